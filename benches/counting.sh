#!/usr/bin/env bash
# Counting a record file as a user does it, as processes, warm:
# `pchronicle stats --json FILE` against `wc -l FILE` of the same file in
# the same run, on a 256 MiB shard of ~220-byte records with a timestamp
# and on 256 MiB of dialogue turns (varied lengths, escapes, numbers). The
# commands run alternating, round after round, so a slow moment of the
# machine falls on all of them; each figure is the median of the rounds.
# `PCHRONICLE_BIN_BEFORE` (another build) is measured alongside when set.
# Usage: cargo build --release && bash benches/counting.sh
#   PCHRONICLE_BENCH_COUNT_MIB (256), PCHRONICLE_BENCH_RUNS (7).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target="${CARGO_TARGET_DIR:-target}"
after="$(realpath "${PCHRONICLE_BIN:-$target/release/pchronicle}")"
before="${PCHRONICLE_BIN_BEFORE:+$(realpath "$PCHRONICLE_BIN_BEFORE")}"
mib="${PCHRONICLE_BENCH_COUNT_MIB:-256}"
runs="${PCHRONICLE_BENCH_RUNS:-7}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source benches/goals.sh

python3 benches/fixtures.py shard "$work/shard" "$mib"
python3 benches/fixtures.py dialogue "$work/dialogue" "$mib"
shard=$(ls "$work/shard"/*.jsonl)
dialogue=$(ls "$work/dialogue"/*.jsonl | head -1)

# alternate FILE: one line per command, "<label> <median ms>".
alternate() {
  python3 - "$runs" "$1" "$after" "$before" <<'PY'
import statistics, subprocess, sys, time
runs, path, after, before = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
commands = [("wc", ["wc", "-l", path]), ("after", [after, "stats", "--json", path])]
if before:
    commands.append(("before", [before, "stats", "--json", path]))
with open(path, "rb") as f:  # warm
    while f.read(1 << 24):
        pass
times = {label: [] for label, _ in commands}
for _ in range(runs + 1):
    for label, cmd in commands:
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        times[label].append((time.perf_counter() - t0) * 1000)
for label, _ in commands:
    print(label, "%.1f" % statistics.median(times[label][1:]))
PY
}

for name in shard dialogue; do
  file=${!name}
  declare -A ms=()
  while read -r label value; do ms[$label]=$value; done < <(alternate "$file")
  echo "== $name: $(basename "$file"), $(( $(stat -c %s "$file") >> 20 )) MiB, median of $runs rounds"
  printf '  wc -l                      %8s ms\n' "${ms[wc]}"
  printf '  pchronicle stats --json    %8s ms   %sx wc -l\n' "${ms[after]}" "$(ratio "${ms[after]}" "${ms[wc]}")"
  if [ -n "$before" ]; then
    printf '  before (%s)   %8s ms   %sx wc -l\n' "$(basename "$before")" "${ms[before]}" \
      "$(ratio "${ms[before]}" "${ms[wc]}")"
  fi
  goal "counting $(( $(stat -c %s "$file") >> 20 )) MiB ($name) vs wc -l, as processes" "${ms[after]} / ${ms[wc]} ms" \
    "$(ratio "${ms[after]}" "${ms[wc]}")" le 2 "<= 2x"
  unset ms
done

echo
printf '%-58s %-44s %-14s %s\n' "figure" "measured" "goal" "verdict"
printf '%s\n' "${goals[@]}"
