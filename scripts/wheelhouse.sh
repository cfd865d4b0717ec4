#!/usr/bin/env bash
# Fetch into DIR (default .wheelhouse/, git-ignored) every wheel that scripts/build-deb.sh
# needs to build the Debian package without a network (build-deb.sh --wheelhouse DIR):
#
#   fleetd's runtime dependencies (pyproject.toml) at the versions constraints.txt pins, and
#   their dependencies, as wheels for the interpreter the package runs on: Debian 12's
#   python3.11 (CPython 3.11, glibc 2.36, this machine's architecture);
#   setuptools and wheel (and theirs), the build backend python -m build installs.
#
# A wheelhouse that already holds them all is reused as it is (pip checks that offline);
# otherwise pip downloads what is missing from the configured index. scripts/test.sh runs
# this in its install step, so that tests/deb never reaches the network.
# Usage: scripts/wheelhouse.sh [DIR]   ($PYTHON, default python3, runs pip)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.wheelhouse}"
python="${PYTHON:-python3}"
glibc_minor=36 # Debian 12 (bookworm) has glibc 2.36

arch="$(uname -m)"
case "$arch" in
x86_64 | aarch64) ;;
*) echo "wheelhouse: no manylinux wheels for $arch" >&2; exit 1 ;;
esac
# pip takes the target's platform tags one by one: every manylinux_2_N a glibc 2.36 runs,
# and manylinux2014 (which pip widens to manylinux2010 and manylinux1 on x86_64).
target=(--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311)
for ((minor = glibc_minor; minor >= 17; minor--)); do
  target+=(--platform "manylinux_2_${minor}_$arch")
done
target+=(--platform "manylinux2014_$arch")

requirements="$(mktemp)"
trap 'rm -f "$requirements"' EXIT
"$python" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
  >"$requirements"
echo setuptools >>"$requirements"
echo wheel >>"$requirements"

mkdir -p "$dir"
fetch() {
  "$python" -m pip download --quiet --disable-pip-version-check --dest "$dir" \
    -c constraints.txt "${target[@]}" -r "$requirements" "$@"
}
if fetch --no-index --find-links "$dir" >/dev/null 2>&1; then
  echo "wheelhouse: $dir holds every wheel already"
  exit 0
fi
# (a pip configuration may name local index directories that do not exist: pip warns about
# each one and goes on)
fetch 2>&1 | { grep -v '^WARNING: Location .* is ignored' || true; } >&2
echo "wheelhouse: $dir now holds every wheel the Debian package's build needs"
