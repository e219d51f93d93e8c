#!/usr/bin/env bash
# Reading the past: `stats --as-of` of a warehouse of N record files (1,000
# records each) and one compact-jsonl leaf of five versions, against plain
# `stats` and `cat(1)` of the same files, measured in the same run, three
# runs (the first counts; later ones meet the count cache).
# Usage: bash benches/history.sh   (PCHRONICLE_BENCH_HISTORY_FILES=N)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target="${CARGO_TARGET_DIR:-target}"
P="${PCHRONICLE_BIN:-$target/release/pchronicle}"
N=${PCHRONICLE_BENCH_HISTORY_FILES:-1000}
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkdir -p "$d/wh/live" "$d/src"
python3 - "$d/wh/live" "$N" <<'PY'
import sys, os
root, n = sys.argv[1], int(sys.argv[2])
for f in range(n):
    with open(os.path.join(root, f"s{f:05}.jsonl"), "w") as out:
        for i in range(1000):
            out.write('{"id":"r%d","ts":%d,"text":"hello hello hello hello hello hello hello hello hello"}\n' % (i, 1764547200 + f*1000 + i))
PY
for i in 1 2 3 4 5; do
  python3 -c "
import sys
with open('$d/src/a.jsonl','a') as f:
  for j in range(20000): f.write('{\"id\":\"v$i-%d\",\"ts\":%d}\n' % (j, 1764547200+j))
"
  "$P" sync "$d/src" "$d/wh/leaf" >/dev/null
done
T=$(python3 -c "import datetime;print(datetime.datetime.fromtimestamp(1764547200+$N*500, datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ'))")
ms() { local s; s=$(date +%s%N); "$@" >/dev/null 2>&1; echo $(( ($(date +%s%N) - s) / 1000000 )); }
ratio() { python3 -c "print(f'{$1 / max($2, 1):.2f}x')"; }
echo "warehouse: $N record files ($(du -sh "$d/wh/live" | cut -f1)), one compact-jsonl leaf of 5 versions"
for run in 1 2 3; do
  a=$(ms "$P" stats "$d/wh" --json)
  b=$(ms "$P" stats "$d/wh" --json --as-of "$T")
  c=$(ms "$P" cat "$d/wh" --as-of "$T")
  w=$(ms cat "$d"/wh/live/*.jsonl)
  echo "run $run: stats $a ms; stats --as-of $b ms ($(ratio "$b" "$a") of stats); cat --as-of $c ms; cat(1) of the files $w ms"
done
for run in 1 2 3; do
  a=$(ms "$P" stats "$d/wh/leaf" --json)
  v=$(ms "$P" stats "$d/wh/leaf" --json --version 3)
  b=$(ms "$P" stats "$d/wh/leaf" --json --as-of 2099-01-01T00:00:00Z)
  l=$(ms "$P" ls "$d/wh/leaf/.versions")
  echo "leaf run $run: stats $a ms; --version 3 $v ms; --as-of $b ms ($(ratio "$b" "$a")); ls .versions $l ms"
done
