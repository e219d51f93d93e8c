#!/usr/bin/env bash
# Reads spread over workers, in one run, each figure beside its local
# baseline: 1 GiB of records, a GROUP BY (`query`) and a `cat --contains`,
#
#   local   `pchronicle` on one core (taskset -c 0)
#   1       one worker on core 0, the coordinator unpinned
#   2       two workers, on cores 0 and 1, the coordinator unpinned
#
# Goals: one worker <= 1.2x local (the coordinator's overhead); two
# workers <= 0.6x one worker. Ends with a table of the goals.
#
# Usage: bash benches/distributed.sh      (after cargo build --release)
# Sizes (environment): PCHRONICLE_BENCH_DIST_MIB (1024),
#   PCHRONICLE_BENCH_RUNS (5), PCHRONICLE_BENCH_DIR (a temp dir).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin="${CARGO_TARGET_DIR:-/var/cache/pchronicle/target}/release/pchronicle"
[ -x "$bin" ] || { echo "build first: cargo build --release ($bin missing)" >&2; exit 1; }
mib="${PCHRONICLE_BENCH_DIST_MIB:-1024}"
runs="${PCHRONICLE_BENCH_RUNS:-5}"
gen=benches/fixtures.py
cores=$(nproc)

work="$(mktemp -d "${PCHRONICLE_BENCH_DIR:-${TMPDIR:-/tmp}}/pchronicle-dist-bench.XXXXXX")"
pids=()
stop_workers() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap 'stop_workers; rm -rf "$work"' EXIT
source benches/goals.sh
median_ms() { python3 "$gen" median-ms "$runs" "$@"; }

export PCHRONICLE_WORKER_TOKEN=bench-token
unset PCHRONICLE_WORKERS

# start_worker CORE: a worker pinned to CORE, its address added to
# `workers` (not run in a subshell, so that its pid is kept for the stop).
start_worker() {
  local out="$work/worker-$1-$RANDOM"
  taskset -c "$1" "$bin" worker --listen 127.0.0.1:0 --warehouse "$work/wh" >"$out" 2>/dev/null &
  pids+=($!)
  for _ in $(seq 200); do
    if grep -q 'listening on' "$out" 2>/dev/null; then
      workers+=("$(sed -n 's/.*listening on //p' "$out" | head -1)")
      return
    fi
    sleep 0.05
  done
  echo "the worker on core $1 did not start" >&2
  exit 1
}

# Eight files whatever the size, so that every size is cut the same way.
per_file=$(( mib / 8 > 0 ? mib / 8 : 1 ))
echo "== $mib MiB of records in files of $per_file MiB"
python3 "$gen" dialogue "$work/wh/turns" "$mib" "$per_file"
# Written back and in the page cache before anything is timed.
sync
cat "$work"/wh/turns/* > /dev/null
sql="SELECT json_get_str(record, 'role') AS role, count(*) AS n FROM records GROUP BY role ORDER BY role"
needle='"session":"s0042"'
query() { "$@" query "$work/wh" "$sql" --csv; }
cat_contains() { "$@" cat "$work/wh" --contains "$needle"; }

# The same answers before any is timed.
local_query=$(query taskset -c 0 "$bin"); local_cat=$(cat_contains taskset -c 0 "$bin" | sha256sum)

declare -A took
took[query,local]=$(median_ms taskset -c 0 "$bin" query "$work/wh" "$sql" --csv)
took[cat,local]=$(median_ms taskset -c 0 "$bin" cat "$work/wh" --contains "$needle")

for n in 1 2; do
  if (( n > cores )); then
    echo "  skipping $n workers: this machine has $cores core(s)"
    continue
  fi
  workers=()
  for core in $(seq 0 $((n - 1))); do start_worker "$core"; done
  list=$(IFS=,; echo "${workers[*]}")
  [ "$(PCHRONICLE_WORKERS=$list query "$bin")" == "$local_query" ] ||
    { echo "the query over $n worker(s) differs from the local one" >&2; exit 1; }
  [ "$(PCHRONICLE_WORKERS=$list cat_contains "$bin" | sha256sum)" == "$local_cat" ] ||
    { echo "cat over $n worker(s) differs from the local one" >&2; exit 1; }
  took[query,$n]=$(PCHRONICLE_WORKERS=$list median_ms "$bin" query "$work/wh" "$sql" --csv)
  took[cat,$n]=$(PCHRONICLE_WORKERS=$list median_ms "$bin" cat "$work/wh" --contains "$needle")
  stop_workers
done

for what in query cat; do
  printf '  %-5s local %8s ms   1 worker %8s ms   2 workers %8s ms\n' "$what" \
    "${took[$what,local]}" "${took[$what,1]:-}" "${took[$what,2]:-}"
done
label() { case "$1" in query) echo "GROUP BY over $mib MiB";; cat) echo "cat --contains over $mib MiB";; esac; }
for what in query cat; do
  one=${took[$what,1]:-}; two=${took[$what,2]:-}; here=${took[$what,local]}
  [ -n "$one" ] && goal "$(label "$what"): 1 worker vs local (1 core)" \
    "$one ms vs $here ms = $(ratio "$one" "$here")x" "$(ratio "$one" "$here")" le 1.2 "<= 1.2x"
  [ -n "$two" ] && goal "$(label "$what"): 2 workers vs 1 worker" \
    "$two ms vs $one ms = $(ratio "$two" "$one")x" "$(ratio "$two" "$one")" le 0.6 "<= 0.6x"
done

echo
echo "== goals"
for row in "${goals[@]}"; do echo "$row"; done
