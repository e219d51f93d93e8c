#!/usr/bin/env bash
# The mount benchmark suite: generates its fixtures, then measures in one run
# and prints each figure with its ratio against the native filesystem (or a
# bindfs passthrough) and the goals of docs/performance.md:
#
#   1. `ls -l` of 10,000 entries: native / mount / bindfs (benches/mount.sh)
#   2. cold and warm `.stats` at the root of a 1,000-leaf warehouse
#   3. restart to the first `.stats` of a warehouse holding 5 GiB of JSONL,
#      with and without the persisted count cache
#   4. sequential read of a 1 GiB shard through the mount vs native
#   5. daemon CPU while polling `.stats` and `ls -l` of every directory
#      10 times a second for 30 s (from /proc/PID/stat)
#   6. daemon RSS after `find` and `cat` of every `.stats` of a warehouse
#      of 100,000 entries
#
# Usage: bash benches/run.sh            (after cargo build --release)
# Sizes (environment): PCHRONICLE_BENCH_ENTRIES (10000), _LEAVES (1000),
#   _JSONL_MIB (5120), _SHARD_MIB (1024), _POLL_SECONDS (30),
#   _WALK_ENTRIES (100000), PCHRONICLE_BENCH_DIR (a temp dir).
# Needs root (or fusermount3), /dev/fuse, python3; uses only public tools.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin="${CARGO_TARGET_DIR:-/var/cache/pchronicle/target}/release/pchronicle"
[ -x "$bin" ] || { echo "build first: cargo build --release ($bin missing)" >&2; exit 1; }
leaves="${PCHRONICLE_BENCH_LEAVES:-1000}"
jsonl_mib="${PCHRONICLE_BENCH_JSONL_MIB:-5120}"
shard_mib="${PCHRONICLE_BENCH_SHARD_MIB:-1024}"
poll_seconds="${PCHRONICLE_BENCH_POLL_SECONDS:-30}"
walk_entries="${PCHRONICLE_BENCH_WALK_ENTRIES:-100000}"
gen=benches/fixtures.py

work="$(mktemp -d "${PCHRONICLE_BENCH_DIR:-${TMPDIR:-/tmp}}/pchronicle-bench.XXXXXX")"
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do "$bin" umount "$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# Mounts warehouse $1 at a fresh directory (name $2) with options $3...;
# prints the mount point.
mount_at() {
  local wh="$1" name="$2"; shift 2
  local mnt="$work/$name"
  mkdir -p "$mnt"
  "$bin" mount "$wh" "$mnt" "$@" >/dev/null
  mounts+=("$mnt")
  echo "$mnt"
}
umount_at() { "$bin" umount "$1" >/dev/null; }
# The daemon runs with the mount command's own arguments.
daemon_pid() { pgrep -n -f -- "pchronicle mount .*$1"; }
now_ns() { date +%s%N; }
ms_since() { echo $(( ($(now_ns) - $1) / 1000000 )); }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "inf"; else printf "%.2f", a / b }'; }
drop_caches() { if [ -w /proc/sys/vm/drop_caches ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi; }

echo "== 1. ls -l of ${PCHRONICLE_BENCH_ENTRIES:-10000} entries"
PCHRONICLE_BENCH_DIR="$work" bash benches/mount.sh

echo
echo "== 2. .stats at the root of a $leaves-leaf warehouse"
python3 "$gen" leaves "$work/leaves" "$leaves"
"$bin" stats "$work/leaves" >/dev/null 2>&1  # writes every leaf manifest
drop_caches
mnt=$(mount_at "$work/leaves" leaves-mnt --attr-ttl 0)
t0=$(now_ns); cat "$mnt/.stats" >/dev/null; cold=$(ms_since "$t0")
warm=$(python3 "$gen" median-ms 15 cat "$mnt/.stats")
printf '  cold (fresh daemon, dropped page cache) %6s ms\n' "$cold"
printf '  warm (median of 15, rendered each time) %6s ms   warm/cold = %s\n' "$warm" "$(ratio "$warm" "$cold")"
umount_at "$mnt"

echo
echo "== 3. restart to the first .stats, $jsonl_mib MiB of JSONL"
python3 "$gen" jsonl "$work/big" "$jsonl_mib"
first_stats() {  # mount options...; prints ms from mount to the .stats answer
  local t0 mnt ms
  t0=$(now_ns)
  mnt=$(mount_at "$work/big" big-mnt "$@")
  cat "$mnt/.stats" >/dev/null
  ms=$(ms_since "$t0")
  umount_at "$mnt"
  echo "$ms"
}
rm -rf "$work/big/.pchronicle/cache"
without=$(first_stats --no-cache)
first_stats >/dev/null   # fills and writes the persisted cache
with=$(first_stats)
printf '  without the persisted cache %8s ms\n' "$without"
printf '  with the persisted cache    %8s ms   %sx faster (goal >= 20x)\n' "$with" "$(ratio "$without" "$with")"

echo
echo "== 4. sequential read of a $shard_mib MiB shard"
python3 "$gen" shard "$work/shard" "$shard_mib"
shard="$(ls "$work/shard"/*.jsonl)"
mnt=$(mount_at "$work/shard" shard-mnt)
read_mib_s() { python3 "$gen" read-mib-s "$1"; }
native_first=$(read_mib_s "$shard")
native=$(read_mib_s "$shard")
mounted_first=$(read_mib_s "$mnt/$(basename "$shard")")
mounted=$(read_mib_s "$mnt/$(basename "$shard")")
printf '  native  %8s MiB/s (first read %s)\n' "$native" "$native_first"
printf '  mount   %8s MiB/s (first read %s)   %sx native\n' "$mounted" "$mounted_first" "$(ratio "$mounted" "$native")"
umount_at "$mnt"

echo
echo "== 5. polling CPU: .stats and ls -l of every directory, 10/s for ${poll_seconds}s"
mnt=$(mount_at "$work/leaves" poll-mnt)
pid=$(daemon_pid "$mnt")
python3 "$gen" poll "$mnt" "$pid" "$poll_seconds"
umount_at "$mnt"

echo
echo "== 6. daemon RSS after a full walk of $walk_entries entries"
python3 "$gen" walk-tree "$work/walk" "$walk_entries"
# Mounts the tree, walks it (find, then cat of every .stats), prints RSS.
walk_rss() {
  local label="$1" mnt pid t0 walked rss_kib hwm_kib
  mnt=$(mount_at "$work/walk" walk-mnt)
  pid=$(daemon_pid "$mnt")
  t0=$(now_ns)
  find "$mnt" >/dev/null
  find "$mnt" -name .stats -exec cat {} + >/dev/null
  walked=$(ms_since "$t0")
  rss_kib=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
  hwm_kib=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
  printf '  %-34s walk %6s ms; RSS %5s MiB (peak %5s MiB)   goal <= 64 MiB\n' "$label" "$walked" \
    "$(awk -v k="$rss_kib" 'BEGIN { printf "%.1f", k / 1024 }')" \
    "$(awk -v k="$hwm_kib" 'BEGIN { printf "%.1f", k / 1024 }')"
  umount_at "$mnt"
}
walk_rss "first mount (counts every file)"
walk_rss "restarted (persisted count cache)"
