#!/usr/bin/env bash
# The daemon's memory after a first mount's walk of 100,000 files (100
# directories of 1,000 one-record files): its RSS (and of that the
# anonymous part: the heap) once mounted, after `find`, and after `cat` of
# every `.stats` (at once, and settled: a second later, when the daemon
# has handed back what its last renders freed), and its peak (VmHWM) at
# the end. Each run is a first
# mount: the persisted count cache is removed before it. Prints the median
# of the runs for `PCHRONICLE_BIN` and, when given, `PCHRONICLE_BIN_BEFORE`
# (another build, measured in the same run, alternating).
# Usage: cargo build --release && bash benches/memory.sh
#   PCHRONICLE_BENCH_WALK_ENTRIES (100000), PCHRONICLE_BENCH_RUNS (3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target="${CARGO_TARGET_DIR:-target}"
after="$(realpath "${PCHRONICLE_BIN:-$target/release/pchronicle}")"
before="${PCHRONICLE_BIN_BEFORE:+$(realpath "$PCHRONICLE_BIN_BEFORE")}"
entries="${PCHRONICLE_BENCH_WALK_ENTRIES:-100000}"
runs="${PCHRONICLE_BENCH_RUNS:-3}"
work=$(mktemp -d)
mnt="$work/mnt"
cleanup() {
  if grep -q " $mnt " /proc/mounts; then
    "$after" umount "$mnt" >/dev/null 2>&1 || umount "$mnt" 2>/dev/null || true
  fi
  # Never into a mount still there.
  if ! grep -q " $work/" /proc/mounts; then rm -rf "$work"; fi
}
trap cleanup EXIT
python3 benches/fixtures.py walk-tree "$work/wh" "$entries"
mkdir -p "$mnt"

# "VmRSS RssAnon" of a process, in KiB.
rss() { awk '/^VmRSS/ { r = $2 } /^RssAnon/ { a = $2 } END { print r, a }' "/proc/$1/status"; }
# One first mount with binary $1: prints "mounted-rss mounted-anon
# find-rss find-anon stats-rss stats-anon settled-rss settled-anon peak",
# in KiB.
measure() {
  local bin="$1" pid out
  rm -rf "$work/wh/.pchronicle"
  "$bin" mount "$work/wh" "$mnt" >/dev/null
  pid=$(pgrep -n -f -- "mount $work/wh $mnt")
  out="$(rss "$pid")"
  find "$mnt" >/dev/null
  out="$out $(rss "$pid")"
  find "$mnt" -name .stats -exec cat {} + >/dev/null
  out="$out $(rss "$pid")"
  sleep 1
  out="$out $(rss "$pid") $(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")"
  "$bin" umount "$mnt" >/dev/null
  # The daemon has exited before the next mount.
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  echo "$out"
}
# The median of each column of the lines on stdin, in MiB.
medians() {
  python3 -c '
import statistics, sys
rows = [list(map(int, l.split())) for l in sys.stdin if l.strip()]
print(" ".join("%.1f" % (statistics.median(c) / 1024) for c in zip(*rows)))'
}
row() {  # label, medians
  # shellcheck disable=SC2086
  set -- "$1" $2
  printf '%-8s %7s %7s | %7s %7s | %7s %7s | %7s %7s | %7s\n' "$@"
}

: >"$work/after.txt"
: >"$work/before.txt"
for run in $(seq "$runs"); do
  if [ -n "$before" ]; then
    measure "$before" | tee -a "$work/before.txt" | sed "s/^/  run $run before (KiB): /" >&2
  fi
  measure "$after" | tee -a "$work/after.txt" | sed "s/^/  run $run after  (KiB): /" >&2
done
echo "daemon memory, first mount of $entries files, median of $runs runs (MiB; goal: RSS <= 48 after .stats)"
printf '%-8s %15s | %15s | %15s | %15s | %7s\n' "" "mounted" "after find" "after .stats" "settled (1 s)" "peak"
printf '%-8s %7s %7s | %7s %7s | %7s %7s | %7s %7s | %7s\n' "" RSS anon RSS anon RSS anon RSS anon HWM
if [ -n "$before" ]; then row before "$(medians <"$work/before.txt")"; fi
row after "$(medians <"$work/after.txt")"
