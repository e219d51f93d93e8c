#!/usr/bin/env bash
# The mount's listing benchmark: `ls -l` of one directory of N entries
# (default 10,000) on the native directory, through a pchronicle mount, and
# through a bindfs passthrough of the same directory, all in this run.
# Prints the medians and the ratios against the goals (mount within 1.5x of
# native, faster than bindfs), plus `cat .stats` of that directory.
#
# Usage: bash benches/mount.sh          (after a release build)
# Environment: PCHRONICLE_BENCH_ENTRIES (10000), PCHRONICLE_BENCH_RUNS (15),
#   PCHRONICLE_BENCH_DIR (a temp dir), PCHRONICLE_BIN (the binary measured;
#   by default the release build under CARGO_TARGET_DIR, else target/).
# Needs root (or fusermount3) and /dev/fuse; installs bindfs with apt-get
# when missing and run as root, and reports it as unavailable otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

entries="${PCHRONICLE_BENCH_ENTRIES:-10000}"
runs="${PCHRONICLE_BENCH_RUNS:-15}"
bin="$(realpath "${PCHRONICLE_BIN:-${CARGO_TARGET_DIR:-target}/release/pchronicle}")"
[ -x "$bin" ] || { echo "build first: cargo build --release ($bin missing)" >&2; exit 1; }

if ! command -v bindfs >/dev/null && [ "$(id -u)" -eq 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bindfs) >/dev/null 2>&1 || true
fi

work="$(mktemp -d "${PCHRONICLE_BENCH_DIR:-${TMPDIR:-/tmp}}/pchronicle-mount-bench.XXXXXX")"
wh="$work/warehouse"; mnt="$work/mnt"; mnt0="$work/mnt-ttl0"; bind="$work/bind"
cleanup() {
  "$bin" umount "$mnt" 2>/dev/null || true
  "$bin" umount "$mnt0" 2>/dev/null || true
  if mountpoint -q "$bind" 2>/dev/null; then fusermount3 -u "$bind" 2>/dev/null || umount -l "$bind" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$wh/big" "$mnt" "$mnt0" "$bind"
python3 - "$wh/big" "$entries" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, f"s{i:06}.0a1b2c3d.jsonl"), "w") as f:
        f.write('{"id":"r%d","ts":"2026-11-30T00:00:00Z","role":"user"}\n' % i)
PY

"$bin" mount "$wh" "$mnt" >/dev/null
# The same warehouse with every cache on the kernel side and the render
# memo off: each stat and open asks the daemon and renders again.
"$bin" mount "$wh" "$mnt0" --attr-ttl 0 >/dev/null
have_bindfs=0
if command -v bindfs >/dev/null && bindfs --no-allow-other "$wh" "$bind" 2>/dev/null; then have_bindfs=1; fi

# Median wall time, in ms, of `$@` over $runs runs (after two warm-ups).
median_ms() {
  local times=() i t0 t1
  "$@" >/dev/null; "$@" >/dev/null
  for ((i = 0; i < runs; i++)); do
    t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N)
    times+=($(( (t1 - t0) / 1000 )))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m/1000}'
}

native=$(median_ms ls -l "$wh/big")
mounted=$(median_ms ls -l "$mnt/big")
if [ "$have_bindfs" = 1 ]; then bound=$(median_ms ls -l "$bind/big"); else bound=""; fi
stats=$(median_ms cat "$mnt/big/.stats")
mounted0=$(median_ms ls -l "$mnt0/big")
stats0=$(median_ms cat "$mnt0/big/.stats")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "ls -l of $entries entries, warm, median of $runs runs"
printf '  %-22s %8s ms\n' "native" "$native"
printf '  %-22s %8s ms   %sx native (goal <= 1.5)\n' "pchronicle mount" "$mounted" "$(ratio "$mounted" "$native")"
if [ -n "$bound" ]; then
  printf '  %-22s %8s ms   mount/bindfs = %s (goal < 1)\n' "bindfs passthrough" "$bound" "$(ratio "$mounted" "$bound")"
else
  printf '  %-22s %8s\n' "bindfs passthrough" "not available"
fi
printf '  %-22s %8s ms   %sx native\n' "mount, --attr-ttl 0" "$mounted0" "$(ratio "$mounted0" "$native")"
echo "cat big/.stats ($entries record files), warm catalog"
printf '  %-22s %8s ms   (renders reused within the 1 s TTL)\n' "default TTL" "$stats"
printf '  %-22s %8s ms   (rendered on every open)\n' "--attr-ttl 0" "$stats0"
