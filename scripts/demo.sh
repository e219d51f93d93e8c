#!/usr/bin/env bash
# Builds pchronicle and the demo warehouse, then shows it. Usage:
#   bash scripts/demo.sh [WAREHOUSE_DIR]   (default: ./pchronicle-demo)
# Mounting (`pchronicle mount`) arrives with the FUSE adapter; until then
# this lists and counts the warehouse through the CLI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/pchronicle/target}"
command -v cargo >/dev/null || { echo "cargo is required (a Rust toolchain via rustup)" >&2; exit 1; }

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
