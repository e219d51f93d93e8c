#!/usr/bin/env bash
# Builds pchronicle and the demo warehouse, mounts it read-only, and shows
# what to type next. Usage:
#   bash scripts/demo.sh [WAREHOUSE_DIR] [MOUNT_DIR]
#   (defaults: ./pchronicle-demo and ./pchronicle-mnt)
# Run as root, or as a user who may mount FUSE filesystems (fusermount3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

cargo build --release --locked --bin pchronicle
bin="$CARGO_TARGET_DIR/release/pchronicle"
dir="${1:-pchronicle-demo}"
mnt="${2:-pchronicle-mnt}"
[ -e "$dir" ] || "$bin" demo "$dir"
mkdir -p "$mnt"
# A mount left from an earlier run (live or dead) is taken down first.
"$bin" umount "$mnt" 2>/dev/null || true
"$bin" mount "$dir" "$mnt"
echo
ls -la "$mnt"
echo
cat "$mnt/.stats"
echo
echo "next:  ls $mnt/team   cat $mnt/team/codex_jsonl/.stats   getfattr -d $mnt/team/planner"
echo "       pchronicle ls --sources $dir   ($bin)"
echo "web:   $bin serve $dir    (prints http://127.0.0.1:8765/#token=...: open it in a browser)"
echo "done:  $bin umount $mnt"
