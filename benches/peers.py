"""The peers of benches/records.sh, run with the virtualenv that holds them.

python benches/peers.py pylance-records LEAF    reads the leaf's `record` column with pylance;
                                                prints "<ms> <rows> <bytes>"
python benches/peers.py duckdb-roles DIR        counts records per role of DIR/*.jsonl with DuckDB;
                                                prints "<ms> <role>=<n>,..."
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


def main():
    what, arg = sys.argv[1], sys.argv[2]
    if what == "pylance-records":
        pylance_records(arg)
    elif what == "duckdb-roles":
        duckdb_roles(arg)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
