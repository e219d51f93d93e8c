#!/usr/bin/env bash
# Builds pchronicle and the demo warehouse, then shows it. Usage:
#   bash scripts/demo.sh [WAREHOUSE_DIR]   (default: ./pchronicle-demo)
# Mounting (`pchronicle mount`) arrives with the FUSE adapter; until then
# this lists and counts the warehouse through the CLI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

cargo build --release --locked --bin pchronicle
bin="$CARGO_TARGET_DIR/release/pchronicle"
dir="${1:-pchronicle-demo}"
[ -e "$dir" ] || "$bin" demo "$dir"
echo
"$bin" ls "$dir"
echo
"$bin" ls --sources "$dir"
echo
"$bin" stats "$dir"
