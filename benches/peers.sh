# Sourced by the benchmark scripts: makes sure the virtualenv holding the
# peers (pylance 14.0.2 and duckdb from PyPI) exists, installing it on first
# use, and sets `venv` to it. PCHRONICLE_BENCH_VENV overrides where it is.
venv="${PCHRONICLE_BENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/pchronicle-bench-venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import lance, duckdb' 2>/dev/null; then
  echo "installing the peers (pylance 14.0.2, duckdb) into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check pylance==14.0.2 duckdb
fi
