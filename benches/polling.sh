#!/usr/bin/env bash
# Polling through the mount, as a dashboard script does it: ten times a
# second, read the root's `.stats` and list and stat 52 directories (the
# root, `teams/`, 50 team directories of one record file each), with a
# directory of 10,000 record files elsewhere in the tree, on a warehouse
# that does not change. Prints the daemon's CPU as a share of one core,
# for `PCHRONICLE_BIN` and, when given, `PCHRONICLE_BIN_BEFORE` (another
# build, measured in the same run, alternating).
# Usage: cargo build --release && bash benches/polling.sh
#   PCHRONICLE_BENCH_POLL_SECONDS (20), PCHRONICLE_BENCH_RUNS (3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target="${CARGO_TARGET_DIR:-target}"
after="$(realpath "${PCHRONICLE_BIN:-$target/release/pchronicle}")"
before="${PCHRONICLE_BIN_BEFORE:+$(realpath "$PCHRONICLE_BIN_BEFORE")}"
seconds="${PCHRONICLE_BENCH_POLL_SECONDS:-20}"
runs="${PCHRONICLE_BENCH_RUNS:-3}"
work=$(mktemp -d)
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do "$after" umount "$m" >/dev/null 2>&1 || umount "$m" 2>/dev/null || true; done
  # Never into a mount still there.
  if ! grep -q " $work/" /proc/mounts; then rm -rf "$work"; fi
}
trap cleanup EXIT
python3 - "$work/wh" <<'PY'
import os, sys
root = sys.argv[1]
for t in range(50):
    d = os.path.join(root, "teams", f"t{t:02}")
    os.makedirs(d)
    with open(os.path.join(d, "a.jsonl"), "w") as f:
        for i in range(100):
            f.write('{"id":%d,"ts":%d}\n' % (i, 1764547200 + i))
big = os.path.join(root, "big")
os.makedirs(big)
for i in range(10000):
    with open(os.path.join(big, f"f{i:05}.jsonl"), "w") as f:
        f.write('{"id":1}\n')
PY
mount_with() {  # binary, name
  local mnt="$work/$2"
  mkdir -p "$mnt"
  "$1" mount "$work/wh" "$mnt" >/dev/null
  mounts+=("$mnt")
}
pid_of() { pgrep -n -f -- "mount $work/wh $work/$1"; }
poll() {  # mountpoint, pid
  python3 - "$1" "$2" "$seconds" <<'PY'
import os, sys, time
mnt, pid, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
dirs = [mnt, os.path.join(mnt, "teams")] + [os.path.join(mnt, "teams", f"t{t:02}") for t in range(50)]
def ticks():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])
hz = os.sysconf("SC_CLK_TCK")
for d in dirs:  # one round first: a warm daemon
    with open(os.path.join(d, ".stats"), "rb") as f:
        f.read()
t0, start, tick, rounds = time.monotonic(), ticks(), time.monotonic(), 0
while time.monotonic() < t0 + seconds:
    with open(os.path.join(mnt, ".stats"), "rb") as f:
        f.read()
    for d in dirs:  # what `ls -l` asks: names, then lstat
        for e in os.scandir(d):
            os.lstat(e.path)
    rounds += 1
    tick += 0.1
    pause = tick - time.monotonic()
    if pause > 0:
        time.sleep(pause)
elapsed = time.monotonic() - t0
print("%.2f" % (100 * (ticks() - start) / hz / elapsed))
PY
}
mount_with "$after" after
after_pid=$(pid_of after)
if [ -n "$before" ]; then
  mount_with "$before" before
  before_pid=$(pid_of before)
fi
sleep 1
echo "polling 52 directories and the root's .stats, 10/s for ${seconds}s, $runs runs (goal: <= 2 % of a core)"
for run in $(seq "$runs"); do
  if [ -n "$before" ]; then
    echo "  run $run: before $(poll "$work/before" "$before_pid") %, after $(poll "$work/after" "$after_pid") % of one core"
  else
    echo "  run $run: $(poll "$work/after" "$after_pid") % of one core"
  fi
done
