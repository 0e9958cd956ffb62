#!/bin/bash
# The .deb the nspawn tests upgrade to: the one .deb in OUT_DIR with VERSION as its version and
# everything else as it is, written to UPGRADE_OUT_DIR.
#   upgrade_deb.sh OUT_DIR VERSION UPGRADE_OUT_DIR
# What an upgrade to another build of the same commit would install: build-packages.sh's
# PANDO_VERSION changes the packages' version only, never the programs, and debhelper writes the
# same maintainer scripts. So this saves a second Release build without changing what dpkg and
# systemd do in the upgrade (files replaced, conffiles kept, the service restarted).
set -euo pipefail

out=${1:?usage: upgrade_deb.sh OUT_DIR VERSION UPGRADE_OUT_DIR}
version=${2:?usage: upgrade_deb.sh OUT_DIR VERSION UPGRADE_OUT_DIR}
upgrade_out=${3:?usage: upgrade_deb.sh OUT_DIR VERSION UPGRADE_OUT_DIR}
pkg=pando-helper

fail() {
	echo "upgrade_deb.sh: $*" >&2
	exit 1
}

shopt -s nullglob
debs=("$out"/${pkg}_*.deb)
shopt -u nullglob
[ "${#debs[@]}" = 1 ] || fail "expected one .deb in $out, found ${#debs[@]}"
deb=${debs[0]}
[[ "$version" =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || fail "'$version' is not a package version"
dpkg --compare-versions "$version" gt "$(dpkg-deb -f "$deb" Version)" ||
	fail "$version is not newer than $(dpkg-deb -f "$deb" Version)"

tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
# -R keeps the owners and modes of the payload and the maintainer scripts as they are.
dpkg-deb -R "$deb" "$tree/root"
sed -i "s/^Version: .*/Version: $version/" "$tree/root/DEBIAN/control"
mkdir -p "$upgrade_out"
rm -f "$upgrade_out/${pkg}"_*.deb
upgrade="$upgrade_out/${pkg}_${version}_$(dpkg-deb -f "$deb" Architecture).deb"
dpkg-deb --build "$tree/root" "$upgrade" >/dev/null
[ "$(dpkg-deb -f "$upgrade" Version)" = "$version" ] || fail "$upgrade does not have version $version"
echo "$upgrade"
