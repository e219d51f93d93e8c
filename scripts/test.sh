#!/usr/bin/env bash
# Runs the whole pchronicle test suite on a fresh machine: installs what the
# build and the tests need, then formats-checks, builds, tests and runs a
# short benchmark pass. This is the README's test command, and CI runs it.
#
# Environment:
#   CARGO_TARGET_DIR         build directory shared between runs
#                            (default /var/cache/pchronicle/target)
#   PCHRONICLE_REQUIRE_FUSE  1 (default): mount tests fail when mounting is
#                            impossible; 0: they skip with a note
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/pchronicle/target}"
export PCHRONICLE_REQUIRE_FUSE="${PCHRONICLE_REQUIRE_FUSE:-1}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# System packages the build and the tests need (Debian names). The list
# grows with the code: Lance's build needs protoc, the mount tests fusermount.
packages=(coreutils)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages: ${missing[*]} (run as root, or install them)" >&2
    exit 1
  fi
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

command -v cargo >/dev/null || { echo "cargo is required (a Rust toolchain via rustup)" >&2; exit 1; }
mkdir -p "$CARGO_TARGET_DIR"

step() { printf '\n== %s\n' "$*"; }

step "format"
cargo fmt --all -- --check

# One profile (release) for everything, so the crate graph is built once.
step "build"
cargo build --release --locked --all-targets

step "benchmarks (short pass: they must run; full numbers in docs/performance.md)"
PCHRONICLE_BENCH_COUNT_MB=32 PCHRONICLE_BENCH_ENTRIES=1000 PCHRONICLE_BENCH_LEAVES=100 \
  cargo bench --locked --bench catalog

step "test"
cargo test --release --locked
