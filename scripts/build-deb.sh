#!/usr/bin/env bash
# Build fleetd's two release artifacts from this tree into dist/ (or the directory given):
#
#   fleetd-<version>-py3-none-any.whl  python -m build (setuptools and wheel from constraints.txt)
#   fleetd_<version>_<arch>.deb        fleetd in its own virtual environment under
#                                      /usr/lib/fleetd/venv, made from that wheel and the
#                                      pinned constraints.txt
#
# Usage: scripts/build-deb.sh [--wheelhouse DIR] [OUTDIR]
# With --wheelhouse (made by scripts/wheelhouse.sh) the build needs no network: setuptools and
# wheel for the build backend and every dependency in the environment come from DIR alone
# (pip --no-index --find-links DIR). Without it, pip takes them from the configured index.
#
# What the package holds and why: docs/operations.md, "The Debian package". Its maintainer
# scripts, control template and lintian overrides are in packaging/deb/.
# Needs: $PYTHON (default python3) with pip >= 22.3 and build (the test extra installs it);
# Debian's python3.11 and python3-venv (the interpreter the package runs on); dpkg-deb and
# dpkg-shlibdeps (dpkg-dev); strip (binutils). DEB_COMPRESSION: dpkg-deb's compression options
# (default "-Zgzip -z6"; lintian 2.116 refuses zstd; "-Zxz" is smaller and 20 times slower).
set -euo pipefail
die() { echo "build-deb: $*" >&2; exit 1; }
wheelhouse=""
while [ $# -gt 0 ]; do
  case "$1" in
  --wheelhouse) [ $# -ge 2 ] || die "--wheelhouse needs a directory"; wheelhouse="$2"; shift 2 ;;
  --wheelhouse=*) wheelhouse="${1#*=}"; shift ;;
  -*) die "unknown option $1 (usage: build-deb.sh [--wheelhouse DIR] [OUTDIR])" ;;
  *) break ;;
  esac
done
[ $# -le 1 ] || die "usage: build-deb.sh [--wheelhouse DIR] [OUTDIR]"
if [ -n "$wheelhouse" ]; then
  [ -d "$wheelhouse" ] || die "no wheelhouse at $wheelhouse (make it with scripts/wheelhouse.sh $wheelhouse)"
  wheelhouse="$(cd "$wheelhouse" && pwd)"
fi
repo="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "${1:-$repo/dist}" # (paths given are the caller's; the default is the tree's dist/)
out="$(cd "${1:-$repo/dist}" && pwd)"
cd "$repo"
python="${PYTHON:-python3}"
deb_python=/usr/bin/python3.11
prefix=/usr/lib/fleetd/venv
pkg="$repo/packaging/deb"
# Where every pip below (and build's, for the build backend) finds packages: the wheelhouse
# and nothing else, or the configured index
if [ -n "$wheelhouse" ]; then
  export PIP_NO_INDEX=1 PIP_FIND_LINKS="$wheelhouse"
fi
for tool in dpkg-deb dpkg-shlibdeps strip "$deb_python"; do
  command -v "$tool" >/dev/null || die "$tool is missing (Debian packages: dpkg-dev, binutils, python3.11, python3-venv)"
done
"$deb_python" -c 'import venv, ensurepip' 2>/dev/null || die "$deb_python cannot make a venv (apt install python3-venv)"
"$python" -m build --version >/dev/null 2>&1 || die "$python has no 'build' (pip install -c constraints.txt build)"

version="$("$python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')"
arch="$(dpkg --print-architecture)"
maintainer="${DEB_MAINTAINER:-$(git log -1 --format='%an <%ae>' 2>/dev/null || echo 'fleetd maintainers <root@localhost>')}"
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
export SOURCE_DATE_EPOCH

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
venv="$root$prefix"
site="$venv/lib/python3.11/site-packages"

# ---------------------------------------------------------------------------- 1. the wheel
# Built from a copy of the tree (what git tracks, plus new files it does not ignore), so
# setuptools' build/ and *.egg-info never land in the checkout and two builds never meet.
mkdir "$stage/src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' file; do [ ! -e "$file" ] || printf '%s\0' "$file"; done |
    tar -c --null -T - | tar -x -C "$stage/src"  # (a file deleted but not committed is left out)
else
  tar -c --exclude=./.venv --exclude=./.wheelhouse --exclude=./dist --exclude=./build --exclude=./.git . | tar -x -C "$stage/src"
fi
wheel="$out/fleetd-$version-py3-none-any.whl"
rm -f "$wheel"
# The build backend: $PYTHON's own where it has setuptools and wheel at the pinned versions
# (the test extra installs them), else build's isolated environment installs them (from the
# wheelhouse alone when given); each way the wheel is made by the same setuptools.
isolation=()
# shellcheck disable=SC2046
"$python" - $(grep -E '^(setuptools|wheel)==' constraints.txt) <<'EOF' && isolation=(--no-isolation)
import sys
from importlib.metadata import PackageNotFoundError, version

try:
    pins = [pin.split("==") for pin in sys.argv[1:]]
    sys.exit(len(pins) != 2 or any(version(name) != pinned for name, pinned in pins))
except PackageNotFoundError:
    sys.exit(1)
EOF
PIP_CONSTRAINT="$repo/constraints.txt" "$python" -m build "${isolation[@]}" --wheel --outdir "$out" "$stage/src" \
  >"$stage/build.log" 2>&1 || { cat "$stage/build.log" >&2; die "python -m build failed${wheelhouse:+ (with $wheelhouse alone)}"; }
[ -f "$wheel" ] || die "python -m build made no $wheel"

# ------------------------------------------- 2. the virtual environment, at its final path
# Made without the system's site-packages, so pip installs every dependency into it; the
# installed environment then sees them (pyvenv.cfg below) for ROCm's amdsmi and psycopg2.
"$deb_python" -m venv --without-pip "$venv"
"$python" -m pip --python "$venv/bin/python3" install --quiet --disable-pip-version-check \
  --no-compile --no-warn-script-location -c constraints.txt "$wheel" 2>&1 |
  { grep -v '^WARNING: Location .* is ignored' || true; } >&2 ||
  die "pip could not install the environment${wheelhouse:+ from $wheelhouse alone (scripts/wheelhouse.sh $wheelhouse completes it)}"
[ -x "$venv/bin/fleetd" ] || die "pip did not install fleetd into the environment"

# Generated from the environment itself: man pages list its commands, the copyright file
# its distributions. (-B: no byte-code in the package; the postinst compiles it on the node)
install -d "$root/usr/share/man/man1" "$root/usr/share/doc/fleetd"
"$venv/bin/python3" -B "$pkg/manpage.py" "$root/usr/share/man/man1"
gzip -9n "$root/usr/share/man/man1/fleetd.1" "$root/usr/share/man/man1/fleetctl.1"
first_year="$({ git log --max-parents=0 --format=%cd --date=format:%Y 2>/dev/null || true; } | sort | sed -n 1p)"
COPYRIGHT_YEARS="${first_year:-$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)}-$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)" \
  "$venv/bin/python3" -B "$pkg/copyright.py" "$site" >"$root/usr/share/doc/fleetd/copyright"

# ------------------------------------------------- 3. from a build venv to a system package
# Only fleetd's own commands stay (the dependencies' idna, normalizer, pygmentize, …
# are not part of the package); the activate scripts name the staging path and go.
find "$venv/bin" -mindepth 1 -maxdepth 1 ! -name fleetd ! -name fleetctl ! -name 'python*' -delete
rmdir "$venv/include/python3.11" "$venv/include"  # empty: nothing here builds C extensions
for program in fleetd fleetctl; do
  case "$(head -n1 "$venv/bin/$program")" in
    "#!$venv/bin/python"*) ;;
    *) die "unexpected interpreter line in $program: $(head -n1 "$venv/bin/$program")" ;;
  esac
  sed -i "1s|.*|#!$prefix/bin/python3|" "$venv/bin/$program"
done
ln -sfn ../../../../bin/python3.11 "$venv/bin/python3.11"  # = /usr/bin/python3.11, relative
cat >"$venv/pyvenv.cfg" <<EOF
home = /usr/bin
include-system-site-packages = true
version = $("$deb_python" -c 'import platform; print(platform.python_version())')
executable = /usr/bin/python3.11
EOF
rm -f "$site/fleetd-$version.dist-info/direct_url.json"  # the build machine's wheel path
# PyYAML's wheel links a static copy of libyaml; without it fleetd uses the pure-Python
# parser it already falls back to (fleetd/configbase.py), and no unpatchable libyaml ships.
rm -f "$site"/yaml/_yaml.*.so
# requests trusts certifi's bundle; make that the system's CA store (Depends: ca-certificates)
ln -sfn /etc/ssl/certs/ca-certificates.crt "$site/certifi/cacert.pem"
find "$venv" -name '*.so' -type f -exec strip --strip-unneeded --remove-section=.comment --remove-section=.note {} +
if find "$venv" -name __pycache__ -print -quit | grep -q .; then
  die "byte-code in the environment: the postinst compiles it on the node, the prerm removes it"
fi
if grep -rlF --binary-files=without-match "$stage" "$venv" >"$stage/leaks"; then
  die "files still name the staging directory: $(tr '\n' ' ' <"$stage/leaks")"
fi

# --------------------------------------------------------------- 4. everything around it
install -d "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/fleetd/rules.d" \
  "$root/usr/share/doc/fleetd/examples" "$root/usr/share/lintian/overrides"
install -d -m 0700 "$root/etc/fleetd/secrets"
ln -s ../lib/fleetd/venv/bin/fleetd "$root/usr/bin/fleetd"
ln -s ../lib/fleetd/venv/bin/fleetctl "$root/usr/bin/fleetctl"
install -m 0640 docs/fleetd.example.yaml "$root/etc/fleetd/fleetd.yaml"
# The unit as in systemd/, run from the package's path (the tree's names /usr/local/bin)
sed -e 's|^ExecStart=/usr/local/bin/fleetd |ExecStart=/usr/bin/fleetd |' \
  -e 's|^# Install: copy to /etc/systemd/system/.*|# Installed by the fleetd package; change it with a drop-in (systemctl edit fleetd).|' \
  systemd/fleetd.service >"$root/lib/systemd/system/fleetd.service"
grep -q '^ExecStart=/usr/bin/fleetd run ' "$root/lib/systemd/system/fleetd.service" ||
  die "systemd/fleetd.service: ExecStart=/usr/local/bin/fleetd not found to point at /usr/bin/fleetd"
install -m 0644 systemd/vllm@.service "$root/usr/share/doc/fleetd/examples/"
install -m 0644 README.md "$root/usr/share/doc/fleetd/"
(cd docs && find . -type f \( -name '*.md' -o -name '*.yaml' -o -name '*.json' \) -print0 |
  xargs -0 -I{} install -D -m 0644 {} "$root/usr/share/doc/fleetd/docs/{}")
install -m 0644 "$pkg/lintian-overrides" "$root/usr/share/lintian/overrides/fleetd"
changelog_date="$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
printf 'fleetd (%s) unstable; urgency=medium\n\n  * Built from the fleetd tree at commit %s.\n\n -- %s  %s\n' \
  "$version" "$commit" "$maintainer" "$changelog_date" | gzip -9n >"$root/usr/share/doc/fleetd/changelog.gz"

# Debian's modes: directories 0755, files 0644, the two commands 0755; secrets and the
# configuration are root's only (docs/security.md).
find "$root" -type d -exec chmod 0755 {} +
find "$root" -type f -exec chmod 0644 {} +
chmod 0755 "$venv/bin/fleetd" "$venv/bin/fleetctl"
chmod 0700 "$root/etc/fleetd/secrets"
chmod 0640 "$root/etc/fleetd/fleetd.yaml"

# ------------------------------------------------------------------------- 5. the control
shlibs="$(
  cd "$stage" && mkdir -p debian && printf 'Source: fleetd\n\nPackage: fleetd\nArchitecture: any\n' >debian/control &&
    find root -name '*.so' -type f -print0 | xargs -0 dpkg-shlibdeps -O 2>/dev/null | sed -n 's/^shlibs:Depends=//p'
)"
[ -n "$shlibs" ] || die "dpkg-shlibdeps found no library dependencies"
install -d "$root/DEBIAN"
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$maintainer|" \
  -e "s|@SHLIBS_DEPENDS@|$shlibs|" -e "s|@INSTALLED_SIZE@|$(du -sk --apparent-size "$root" | cut -f1)|" \
  "$pkg/control" >"$root/DEBIAN/control"
install -m 0755 "$pkg/postinst" "$pkg/prerm" "$pkg/postrm" "$root/DEBIAN/"
echo /etc/fleetd/fleetd.yaml >"$root/DEBIAN/conffiles"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
  xargs -0 md5sum >DEBIAN/md5sums)

deb="$out/fleetd_${version}_${arch}.deb"
read -r -a compression <<<"${DEB_COMPRESSION:--Zgzip -z6}"
dpkg-deb --root-owner-group "${compression[@]}" --build "$root" "$stage/fleetd.deb" >/dev/null
mv "$stage/fleetd.deb" "$deb"
echo "$wheel"
echo "$deb"
