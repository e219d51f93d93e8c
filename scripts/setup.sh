# Sourced by the other scripts: installs the system packages the build
# and the mount need (as root, with apt-get, only when missing), checks for
# cargo, and points every build at one shared target directory. A script
# that needs more packages lists them in `extra_packages` before sourcing.

# Lance's build scripts run protoc and need the well-known protobuf
# includes; fuse3 brings fusermount3, which mounts and unmounts for users
# other than root.
packages=(protobuf-compiler libprotobuf-dev fuse3 "${extra_packages[@]}")
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

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/pchronicle/target}"
mkdir -p "$CARGO_TARGET_DIR"
