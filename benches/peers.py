"""The peers of benches/records.sh, run with the virtualenv that holds them.

python benches/peers.py pylance-records LEAF    reads the leaf's `record` column with pylance;
                                                prints "<ms> <rows> <bytes>"
python benches/peers.py duckdb-roles DIR        counts records per role of DIR/*.jsonl with DuckDB;
                                                prints "<ms> <role>=<n>,..."
python benches/peers.py pylance-import JSONL DEST  writes JSONL as a compact-jsonl-shaped Lance
                                                dataset with pyarrow + pylance; prints "<ms> <rows>"
"""

import sys
import time


def pylance_records(leaf):
    import lance
    import pyarrow.compute as pc
    t0 = time.perf_counter()
    ds = lance.dataset(leaf)
    rows = size = 0
    for batch in ds.to_batches(columns=["record"]):
        column = batch.column(0)
        rows += len(column)
        size += pc.sum(pc.binary_length(column)).as_py() or 0
    ms = (time.perf_counter() - t0) * 1000
    print("%.1f %d %d" % (ms, rows, size))


def duckdb_roles(directory):
    import duckdb
    t0 = time.perf_counter()
    con = duckdb.connect()
    rows = con.execute(
        "SELECT role, count(*) FROM read_json(?, format='newline_delimited', columns={'role': 'VARCHAR'}) "
        "GROUP BY role ORDER BY role",
        [directory + "/*.jsonl"],
    ).fetchall()
    ms = (time.perf_counter() - t0) * 1000
    print("%.1f %s" % (ms, ",".join("%s=%d" % r for r in rows)))


def pylance_import(src, dest):
    """The same columns pchronicle import writes, by a straightforward
    pyarrow + pylance script: each line parsed for its id and timestamp."""
    import datetime
    import json
    import os
    import lance
    import pyarrow as pa
    schema = pa.schema([
        pa.field("_file_", pa.utf8(), False),
        pa.field("line", pa.uint64(), False),
        pa.field("record_id", pa.utf8()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("failed", pa.bool_(), False),
        pa.field("record", pa.large_utf8()),
        pa.field("offload_sha256", pa.utf8()),
    ])
    name = os.path.basename(src)
    rows = 0

    def batches():
        nonlocal rows
        cols = [[] for _ in range(7)]
        with open(src, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                record = line.rstrip("\n")
                try:
                    obj = json.loads(record)
                    ts = obj.get("ts")
                    ts = datetime.datetime.fromisoformat(ts) if isinstance(ts, str) else None
                    values = (name, n, obj.get("id"), ts, False, record, None)
                except ValueError:
                    values = (name, n, None, None, True, record, None)
                for col, value in zip(cols, values):
                    col.append(value)
                if len(cols[0]) == 8192:
                    rows += len(cols[0])
                    yield pa.record_batch(cols, schema=schema)
                    cols = [[] for _ in range(7)]
        if cols[0]:
            rows += len(cols[0])
            yield pa.record_batch(cols, schema=schema)

    t0 = time.perf_counter()
    reader = pa.RecordBatchReader.from_batches(schema, batches())
    lance.write_dataset(reader, dest, schema=schema)
    print("%.1f %d" % ((time.perf_counter() - t0) * 1000, rows))


def main():
    what, arg = sys.argv[1], sys.argv[2]
    if what == "pylance-records":
        pylance_records(arg)
    elif what == "duckdb-roles":
        duckdb_roles(arg)
    elif what == "pylance-import":
        pylance_import(arg, sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
