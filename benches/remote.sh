#!/usr/bin/env bash
# Remote warehouses against a local S3 server (moto, on 127.0.0.1), in one
# run: `ls` and `stats` of a warehouse of PCHRONICLE_BENCH_REMOTE_LEAVES
# storyline leaves with manifests (requests as the server logged them, and
# times, cold and with nothing changed), and `cat` of one record file of
# PCHRONICLE_BENCH_REMOTE_MIB MiB against one plain GET of the same object
# with boto3 (the server's own speed here).
#
# Environment: PCHRONICLE_BENCH_REMOTE_LEAVES (1000), PCHRONICLE_BENCH_REMOTE_MIB
# (1024), PCHRONICLE_S3_VENV (where moto is, as scripts/test.sh installs it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/pchronicle/target}"
bin="$CARGO_TARGET_DIR/release/pchronicle"
leaves="${PCHRONICLE_BENCH_REMOTE_LEAVES:-1000}"
mib="${PCHRONICLE_BENCH_REMOTE_MIB:-1024}"
venv="${PCHRONICLE_S3_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/pchronicle-s3-venv}"
[ -x "$venv/bin/moto_server" ] || { echo "moto is not installed in $venv (scripts/test.sh installs it)" >&2; exit 1; }

work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$venv/bin/moto_server" -H 127.0.0.1 -p "$port" 2> "$work/moto.log" > /dev/null &
moto=$!
trap 'kill $moto 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port" && break; sleep 0.1; done
export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1
unset AWS_PROFILE
export AWS_SHARED_CREDENTIALS_FILE=/nonexistent AWS_CONFIG_FILE=/nonexistent

ms() { python3 -c 'import time; print(int(time.monotonic()*1000))'; }
# moto logs one line per request (colored by status, so no anchor).
requests() { grep -a -c -E '(GET|HEAD|PUT|POST|DELETE) /' "$work/moto.log" || true; }
lists() { grep -a -c -E 'GET /[^ ]*list-type=2' "$work/moto.log" || true; }

# The warehouse: storyline leaves with manifests, uploaded with boto3
# (moto's own dependency) on 16 threads.
mkdir -p "$work/wh"
for i in $(seq -w 1 "$leaves"); do
  d="$work/wh/leaf-$i"; mkdir -p "$d/generations/g1"
  printf '{"ts":"2026-11-01T09:00:00Z","i":1}\n{"ts":"2026-11-01T09:01:00Z","i":2}\n' > "$d/generations/g1/p.jsonl"
  echo g1 > "$d/CURRENT"
done
"$bin" ls "$work/wh" > /dev/null   # writes the leaf manifests
python3 - "$work/big.jsonl" "$mib" <<'PY'
import sys
line = ('{"ts":"2026-11-01T09:00:00Z","pad":"' + "x" * 150 + '"}\n').encode()
with open(sys.argv[1], "wb") as f:
    f.write(line * ((int(sys.argv[2]) << 20) // len(line)))
PY
"$venv/bin/python" - "$work" "$port" <<'PY'
import os, sys, boto3
from concurrent.futures import ThreadPoolExecutor
work, port = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                  aws_access_key_id="bench", aws_secret_access_key="bench")
s3.create_bucket(Bucket="bench")
root = os.path.join(work, "wh")
files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
def put(path):
    s3.upload_file(path, "bench", "wh/" + os.path.relpath(path, root))
with ThreadPoolExecutor(16) as pool:
    list(pool.map(put, files))
s3.upload_file(os.path.join(work, "big.jsonl"), "bench", "big/records.jsonl")
PY

run() { # label, command...: prints requests, lists and ms of one run
  local label=$1 r0 l0 t0 t1; shift
  r0=$(requests); l0=$(lists); t0=$(ms)
  "$@" > /dev/null
  t1=$(ms)
  printf '%-34s %6d requests (%d LIST)  %6d ms\n' "$label" $(( $(requests) - r0 )) $(( $(lists) - l0 )) $(( t1 - t0 ))
}
echo "== $leaves storyline leaves with manifests on a local S3 server"
run "pchronicle ls s3://bench/wh" "$bin" ls s3://bench/wh
run "pchronicle stats s3://bench/wh" "$bin" stats s3://bench/wh
local_ms() { local t0; t0=$(ms); "$@" > /dev/null; echo $(( $(ms) - t0 )); }
echo "local copy: ls $(local_ms "$bin" ls "$work/wh") ms, stats $(local_ms "$bin" stats "$work/wh") ms"

mnt="$work/mnt"; mkdir -p "$mnt"
if "$bin" mount --attr-ttl 5s s3://bench/wh "$mnt" > /dev/null 2>&1; then
  run "mount: cat .stats (first)" cat "$mnt/.stats"
  run "mount: cat .stats again, at once" cat "$mnt/.stats"
  run "mount: ls, at once" ls "$mnt"
  "$bin" umount "$mnt"
else
  echo "mount: skipped (FUSE is not usable here)"
fi

echo "== cat of a $mib MiB record file"
# The plain download: one signed GET of the whole object with boto3, read
# in 8 MiB pieces.
plain=$("$venv/bin/python" - "$port" <<'PY'
import sys, time, boto3
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}", region_name="us-east-1",
                  aws_access_key_id="bench", aws_secret_access_key="bench")
t0 = time.monotonic()
body = s3.get_object(Bucket="bench", Key="big/records.jsonl")["Body"]
while body.read(8 << 20):
    pass
whole = int((time.monotonic() - t0) * 1000)
# The same bytes in 16 MiB ranged GETs one after another, as pchronicle
# asks for them once it streams (moto reads the whole object for each
# range, so this is the fair baseline on this server).
size = s3.head_object(Bucket="bench", Key="big/records.jsonl")["ContentLength"]
t0 = time.monotonic()
for start in range(0, size, 16 << 20):
    end = min(start + (16 << 20), size) - 1
    s3.get_object(Bucket="bench", Key="big/records.jsonl", Range=f"bytes={start}-{end}")["Body"].read()
print(whole, int((time.monotonic() - t0) * 1000))
PY
)
read -r plain ranged <<< "$plain"
r0=$(requests); t0=$(ms); "$bin" cat s3://bench/big/records.jsonl > /dev/null; cat_ms=$(( $(ms) - t0 ))
t0=$(ms); "$bin" cat "$work/big.jsonl" > /dev/null; local_cat=$(( $(ms) - t0 ))
echo "boto3: one GET $plain ms, 16 MiB ranged GETs $ranged ms; pchronicle cat s3://: $cat_ms ms in $(( $(requests) - r0 )) requests (ratio to the ranged download $(python3 -c "print(round($cat_ms/max($ranged,1),2))")); cat of the local copy: $local_cat ms"
