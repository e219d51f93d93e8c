#!/usr/bin/env bash
# Records-out benchmarks, each beside a peer measured in the same run:
#
#   1. `pchronicle cat` of MIB of JSONL (files of 128 MiB) vs `cat` of the
#      same files, both into a pipe (goal >= 0.5x)
#   2. `cat LEAF/.records` through the mount, LEAF imported from those
#      files, vs pylance 14.0.2 reading the leaf's `record` column
#      (goal >= 1x). Both pay Lance's decoding of the leaf as import wrote
#      it: with records of 256 bytes or more, one zstd frame per record
#      (docs/performance.md, "Why pylance is slow here"), which is most of
#      both times; the ratio says little about the mount's own pipeline.
#   3. records per role, `GROUP BY json_get_str(record, 'role')`, with
#      `pchronicle query` vs DuckDB's read_json over the same files
#      (goal: at most 2x DuckDB's time)
#
# pylance and duckdb come from PyPI into a virtualenv made on first use.
# Usage: bash benches/records.sh        (after cargo build --release)
# Sizes (environment): PCHRONICLE_BENCH_RECORDS_MIB (1024), _RUNS (3),
#   PCHRONICLE_BENCH_VENV (the virtualenv; default under ~/.cache),
#   PCHRONICLE_BENCH_DIR (a temp dir).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin="${CARGO_TARGET_DIR:-/var/cache/pchronicle/target}/release/pchronicle"
[ -x "$bin" ] || { echo "build first: cargo build --release ($bin missing)" >&2; exit 1; }
mib="${PCHRONICLE_BENCH_RECORDS_MIB:-1024}"
runs="${PCHRONICLE_BENCH_RUNS:-3}"
gen=benches/fixtures.py

work="$(mktemp -d "${PCHRONICLE_BENCH_DIR:-${TMPDIR:-/tmp}}/pchronicle-records.XXXXXX")"
mnt=""
cleanup() {
  [ -n "$mnt" ] && "$bin" umount "$mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "inf"; else printf "%.2f", a / b }'; }
median_ms() { python3 "$gen" median-ms "$runs" sh -c "$1"; }

source benches/peers.sh

python3 "$gen" dialogue "$work/jsonl" "$mib"
cat "$work"/jsonl/*.jsonl >/dev/null   # page cache warm for everyone
echo "== records out of $mib MiB of JSONL ($(ls "$work/jsonl" | wc -l) files), median of $runs, page cache warm"

echo
echo "== 1. pchronicle cat vs cat"
native=$(median_ms "cat '$work'/jsonl/*.jsonl | cat >/dev/null")
ours=$(median_ms "'$bin' cat '$work/jsonl' | cat >/dev/null")
lines=$("$bin" cat "$work/jsonl" | wc -l)
printf '  cat             %8s ms\n' "$native"
printf '  pchronicle cat  %8s ms   %sx cat   goal >= 0.5x   (%s records)\n' "$ours" "$(ratio "$native" "$ours")" "$lines"

echo
echo "== 2. LEAF/.records through the mount vs pylance reading the record column"
"$bin" import "$work/jsonl" "$work/wh/leaf" >/dev/null
mkdir -p "$work/mnt"
"$bin" mount "$work/wh" "$work/mnt" >/dev/null
mnt="$work/mnt"
cat "$mnt/leaf/.records" >/dev/null   # Lance's files into the page cache
records_ms=$(median_ms "cat '$mnt/leaf/.records' | cat >/dev/null")
records_bytes=$(wc -c < "$mnt/leaf/.records")
"$venv/bin/python" benches/peers.py pylance-records "$work/wh/leaf" >/dev/null
pylance_ms=$(for _ in $(seq "$runs"); do "$venv/bin/python" benches/peers.py pylance-records "$work/wh/leaf"; done \
  | sort -n | awk '{ ms[NR] = $1; rows = $2 } END { print ms[int((NR + 1) / 2)] }')
printf '  pylance 14.0.2 to_batches(record)  %8s ms\n' "$pylance_ms"
printf '  cat LEAF/.records                  %8s ms   %sx pylance   goal >= 1x   (%s bytes)\n' \
  "$records_ms" "$(ratio "$pylance_ms" "$records_ms")" "$records_bytes"
"$bin" umount "$mnt" >/dev/null
mnt=""

echo
echo "== 3. records per role: pchronicle query vs DuckDB read_json"
sql="SELECT json_get_str(record, 'role') AS role, count(*) AS n FROM records GROUP BY role ORDER BY role"
ours_rows=$("$bin" query "$work/jsonl" "$sql" --csv | tail -n +2 | tr '\n' ' ')
query_ms=$(median_ms "'$bin' query '$work/jsonl' \"$sql\" --csv >/dev/null")
duck=$(for _ in $(seq "$runs"); do "$venv/bin/python" benches/peers.py duckdb-roles "$work/jsonl"; done | sort -n)
duck_ms=$(echo "$duck" | awk '{ ms[NR] = $1 } END { print ms[int((NR + 1) / 2)] }')
duck_rows=$(echo "$duck" | head -1 | cut -d' ' -f2)
printf '  duckdb read_json     %8s ms   %s\n' "$duck_ms" "$duck_rows"
printf '  pchronicle query     %8s ms   %s  %sx DuckDB time   goal <= 2x\n' "$query_ms" "$ours_rows" "$(ratio "$query_ms" "$duck_ms")"
