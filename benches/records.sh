#!/usr/bin/env bash
# Records-out benchmarks, each beside a peer measured in the same run:
#
#   1. `pchronicle cat` of MIB of JSONL (files of 128 MiB) vs `cat` of the
#      same files, both into a pipe (goal >= 0.5x)
#   2. `cat LEAF/.records` through the mount vs pylance 14.0.2 reading
#      the leaf's `record` column (goal >= 1x), alternating, for three
#      leaves of LEAF_MIB each: agent turns of real text (`transcript`),
#      short repetitive turns (`dialogue`) and records all under 256
#      bytes (`shard`, the most records per byte). Also `pchronicle cat
#      LEAF` (the same plan without the mount) and `.records` into a pipe.
#   3. records per role, `GROUP BY json_get_str(record, 'role')`, with
#      `pchronicle query` vs DuckDB's read_json over the same files
#      (goal: at most 2x DuckDB's time)
#
# pylance and duckdb come from PyPI into a virtualenv made on first use.
# Usage: bash benches/records.sh        (after cargo build --release)
# Sizes (environment): PCHRONICLE_BENCH_RECORDS_MIB (1024), _LEAF_MIB (256), _RUNS (3),
#   PCHRONICLE_BENCH_VENV (the virtualenv; default under ~/.cache),
#   PCHRONICLE_BENCH_DIR (a temp dir).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin="${CARGO_TARGET_DIR:-/var/cache/pchronicle/target}/release/pchronicle"
[ -x "$bin" ] || { echo "build first: cargo build --release ($bin missing)" >&2; exit 1; }
mib="${PCHRONICLE_BENCH_RECORDS_MIB:-1024}"
leaf_mib="${PCHRONICLE_BENCH_LEAF_MIB:-256}"
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
echo "== 2. LEAF/.records through the mount vs pylance reading the record column ($leaf_mib MiB leaves, median of $runs alternating rounds)"
printf '  %-10s %9s %9s %9s %9s %8s\n' leaf pylance .records "| cat" "pc cat" ratio
# "<ms>" of one run of a shell command; fails when it does.
once_ms() {
  local t0 t1
  t0=$(date +%s%N)
  sh -c "set -e; $1" || return 1
  t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 ))
}
failed() { echo "failed: $1" >&2; exit 1; }
median_of() { tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
mkdir -p "$work/mnt"
for kind in transcript dialogue shard; do
  python3 "$gen" "$kind" "$work/$kind" "$leaf_mib"
  "$bin" import "$work/$kind" "$work/wh-$kind/leaf" >/dev/null
  rm -rf "$work/$kind"
  "$bin" mount "$work/wh-$kind" "$work/mnt" >/dev/null
  mnt="$work/mnt"
  leaf="$work/wh-$kind/leaf"
  cat "$mnt/leaf/.records" >/dev/null   # Lance's files into the page cache
  "$venv/bin/python" benches/peers.py pylance-records "$leaf" >/dev/null
  py="" records="" piped="" plan=""
  for _ in $(seq "$runs"); do
    ms=$("$venv/bin/python" benches/peers.py pylance-records "$leaf" | cut -d' ' -f1) || failed pylance
    py="$py $ms"
    ms=$(once_ms "cat '$mnt/leaf/.records' >/dev/null") || failed .records
    records="$records $ms"
    # Without pipefail in sh, the pipe's status is the last cat's: the
    # read's own status is checked on its own above.
    ms=$(once_ms "cat '$mnt/leaf/.records' | cat >/dev/null") || failed ".records | cat"
    piped="$piped $ms"
    ms=$(once_ms "'$bin' cat '$leaf' >/dev/null") || failed "pchronicle cat"
    plan="$plan $ms"
  done
  py=$(echo "$py" | median_of); records=$(echo "$records" | median_of)
  piped=$(echo "$piped" | median_of); plan=$(echo "$plan" | median_of)
  printf '  %-10s %6s ms %6s ms %6s ms %6s ms %7sx   goal >= 1x\n' \
    "$kind" "$py" "$records" "$piped" "$plan" "$(ratio "$py" "$records")"
  "$bin" umount "$mnt" >/dev/null
  mnt=""
  rm -rf "$work/wh-$kind"
done

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
