#!/usr/bin/env bash
# What `pchronicle sync` costs, each figure beside its baseline measured in
# the same run, ending with a table of the goals and whether each is met:
#
#   1. a sync with nothing new over 10,000 source files vs
#      `pchronicle ls --sources` of the source
#   2. a sync of 1 GiB appended to a source file already synced vs
#      `pchronicle import` of that 1 GiB into a new leaf; peak RSS of both
#
# Usage: bash benches/sync.sh            (after cargo build --release)
# Sizes (environment): PCHRONICLE_BENCH_SYNC_FILES (10000),
#   _SYNC_MIB (1024), _RUNS (5), PCHRONICLE_BENCH_DIR (a temp dir).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin="${CARGO_TARGET_DIR:-/var/cache/pchronicle/target}/release/pchronicle"
[ -x "$bin" ] || { echo "build first: cargo build --release ($bin missing)" >&2; exit 1; }
files="${PCHRONICLE_BENCH_SYNC_FILES:-10000}"
mib="${PCHRONICLE_BENCH_SYNC_MIB:-1024}"
runs="${PCHRONICLE_BENCH_RUNS:-5}"
gen=benches/fixtures.py

work="$(mktemp -d "${PCHRONICLE_BENCH_DIR:-${TMPDIR:-/tmp}}/pchronicle-sync-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
source benches/goals.sh
median_ms() { python3 "$gen" median-ms "$runs" "$@"; }

echo "== 1. a sync with nothing new over $files source files"
python3 "$gen" walk-tree "$work/tree" "$files"
"$bin" sync "$work/tree" "$work/tree-leaf" >/dev/null
quiet=$(median_ms "$bin" sync "$work/tree" "$work/tree-leaf")
listed=$(median_ms "$bin" ls --sources "$work/tree")
printf '  sync, nothing new   %8s ms\n  ls --sources        %8s ms\n' "$quiet" "$listed"
goal "sync with nothing new over $files files vs ls --sources" \
  "$quiet ms vs $listed ms = $(ratio "$quiet" "$listed")x" "$(ratio "$quiet" "$listed")" le 2 "<= 2x"
rm -rf "$work/tree" "$work/tree-leaf"

echo "== 2. a sync of $mib MiB appended to a source already synced, vs import of it"
python3 "$gen" shard "$work/more" "$mib"
sync_ms=(); import_ms=(); sync_kib=0; import_kib=0
rounds=$(( runs < 3 ? runs : 3 ))
for _ in $(seq "$rounds"); do
  rm -rf "$work/src" "$work/leaf" "$work/import-leaf"
  python3 "$gen" shard "$work/src" 16
  "$bin" sync "$work/src" "$work/leaf" >/dev/null
  cat "$work/more/agent.0a1b2c3d.jsonl" >> "$work/src/agent.0a1b2c3d.jsonl"
  read -r ms kib < <(python3 "$gen" peak "$bin" sync "$work/src" "$work/leaf")
  sync_ms+=("$ms"); (( kib > sync_kib )) && sync_kib=$kib
  read -r ms kib < <(python3 "$gen" peak "$bin" import "$work/more" "$work/import-leaf")
  import_ms+=("$ms"); (( kib > import_kib )) && import_kib=$kib
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
synced=$(median "${sync_ms[@]}"); imported=$(median "${import_ms[@]}")
printf '  sync of the append  %8s ms (runs: %s), peak RSS %s KiB\n  import of it        %8s ms (runs: %s), peak RSS %s KiB\n' \
  "$synced" "${sync_ms[*]}" "$sync_kib" "$imported" "${import_ms[*]}" "$import_kib"
goal "sync of $mib MiB appended vs import of it" \
  "$synced ms vs $imported ms = $(ratio "$synced" "$imported")x" "$(ratio "$synced" "$imported")" le 1.2 "<= 1.2x"
goal "peak RSS of that sync vs the import's" \
  "$sync_kib KiB vs $import_kib KiB = $(ratio "$sync_kib" "$import_kib")x" "$(ratio "$sync_kib" "$import_kib")" le 1.2 "<= 1.2x"

echo
echo "== goals"
for row in "${goals[@]}"; do echo "$row"; done
