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
#   PCHRONICLE_REQUIRE_S3    1 (default): remote tests fail when the local S3
#                            server cannot start; 0: they skip with a note
#   PCHRONICLE_S3_VENV       where moto is installed (default
#                            ~/.cache/pchronicle-s3-venv)
#   PCHRONICLE_SCREENSHOTS   where the browser test saves a screenshot of
#                            each page (default $CARGO_TARGET_DIR/web-screenshots)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export PCHRONICLE_REQUIRE_FUSE="${PCHRONICLE_REQUIRE_FUSE:-1}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# The mount tests drive these tools against a real mount.
# util-linux brings setpriv and passwd brings useradd: the hostile mount
# tests read the mount as a second, unprivileged user. python3-venv holds
# the records benchmark's peers (pylance, duckdb).
# mount: mount(8) and umount(8), which the system-mount tests drive.
# git: the shard tests and the append benchmark run it in temporary
# repositories. chromium, chromium-driver and python3-selenium: the web
# pages are tested in a real headless browser (web-tests/browser.py);
# fonts-dejavu-core makes its screenshots readable. e2fsprogs: a sync test
# makes an ext4 with one-second timestamps on a loop device.
extra_packages=(attr jq python3 python3-venv coreutils findutils procps util-linux mount passwd git e2fsprogs
  chromium chromium-driver python3-selenium fonts-dejavu-core)
source scripts/setup.sh

# The remote tests' local S3-compatible server: moto in server mode, from
# PyPI into a virtualenv of its own once; the tests start it on 127.0.0.1.
s3_venv="${PCHRONICLE_S3_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/pchronicle-s3-venv}"
if ! "$s3_venv/bin/python" -c 'import moto.server' 2>/dev/null; then
  echo "installing moto[server] 5.2.5 into $s3_venv"
  python3 -m venv "$s3_venv"
  "$s3_venv/bin/pip" install --quiet --disable-pip-version-check 'moto[server]==5.2.5'
fi
export PCHRONICLE_S3_SERVER="$s3_venv/bin/moto_server"
# The remote tests fail, not skip, when the server cannot run.
export PCHRONICLE_REQUIRE_S3="${PCHRONICLE_REQUIRE_S3:-1}"

step() { printf '\n== %s\n' "$*"; }

step "format"
cargo fmt --all -- --check

# One profile (release) for everything, so the crate graph is built once.
step "build"
cargo build --release --locked --all-targets

step "benchmarks (short pass: they must run; full numbers in docs/performance.md)"
PCHRONICLE_BENCH_COUNT_MB=32 PCHRONICLE_BENCH_ENTRIES=1000 PCHRONICLE_BENCH_LEAVES=100 \
PCHRONICLE_BENCH_COMPACT_LEAVES=100 PCHRONICLE_BENCH_IMPORT_MB=32 \
PCHRONICLE_BENCH_INDEX_RECORDS=50000 \
  cargo bench --locked --bench catalog
PCHRONICLE_BENCH_ENTRIES=1000 PCHRONICLE_BENCH_RUNS=5 PCHRONICLE_BENCH_LEAVES=200 \
  PCHRONICLE_BENCH_JSONL_MIB=256 PCHRONICLE_BENCH_SHARD_MIB=64 PCHRONICLE_BENCH_INDEX_RECORDS=50000 \
  PCHRONICLE_BENCH_POLL_SECONDS=3 PCHRONICLE_BENCH_WALK_ENTRIES=5000 bash benches/run.sh
# The web server: polling cost, tree, first byte, runs.
PCHRONICLE_BENCH_LEAVES=100 PCHRONICLE_BENCH_ENTRIES=1000 PCHRONICLE_BENCH_SERVE_MIB=32 \
  PCHRONICLE_BENCH_POLL_SECONDS=5 PCHRONICLE_BENCH_CLIENTS=3 PCHRONICLE_BENCH_PAGE_RUNS=6000 bash benches/serve.sh
# sync: nothing new over many files, and an appended file.
PCHRONICLE_BENCH_SYNC_FILES=1000 PCHRONICLE_BENCH_SYNC_MIB=32 PCHRONICLE_BENCH_RUNS=1 bash benches/sync.sh
# Reading the past: --as-of against plain stats.
PCHRONICLE_BENCH_HISTORY_FILES=100 bash benches/history.sh
# Polling a warehouse that does not change, through the mount.
PCHRONICLE_BENCH_POLL_SECONDS=3 PCHRONICLE_BENCH_RUNS=1 bash benches/polling.sh
# Remote warehouses against the local S3 server (moto, installed above).
PCHRONICLE_BENCH_REMOTE_LEAVES=100 PCHRONICLE_BENCH_REMOTE_MIB=32 bash benches/remote.sh
# Reads over workers: local vs one vs two workers pinned to a core each.
PCHRONICLE_BENCH_DIST_MIB=64 PCHRONICLE_BENCH_RUNS=1 bash benches/distributed.sh
# Both install their peers (pylance, duckdb) from PyPI into a virtualenv once.
PCHRONICLE_BENCH_RECORDS_MIB=64 PCHRONICLE_BENCH_LEAF_MIB=64 PCHRONICLE_BENCH_RUNS=1 bash benches/records.sh

step "test"
cargo test --release --locked

# The pages in a real browser: Debian's python3 holds selenium (the
# package above), whichever python3 is first on PATH.
step "browser (headless chromium; screenshots in \$PCHRONICLE_SCREENSHOTS)"
screenshots="${PCHRONICLE_SCREENSHOTS:-$CARGO_TARGET_DIR/web-screenshots}"
/usr/bin/python3 web-tests/browser.py "$CARGO_TARGET_DIR/release/pchronicle" "$screenshots"
