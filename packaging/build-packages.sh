#!/bin/bash
# Builds pando-helper's .deb and .rpm from this source tree in one go:
#   packaging/build-packages.sh [OUT_DIR]        (default: ./out)
# Produces OUT_DIR/pando-helper_<version>_<arch>.deb and
# OUT_DIR/pando-helper-<version>-1.<arch>.rpm. Work trees stay in OUT_DIR for
# inspection: deb/ (the copy of the source tree dpkg-buildpackage ran in, its
# build directory, the dbgsym package and .buildinfo/.changes), rpm-root/.
# The .deb comes from debian/ (debhelper: `dpkg-buildpackage -us -uc -b`), the
# .rpm from packaging/rpm/pando-helper.spec with the files `cmake --install`
# put in rpm-root/ from the same build. Needs: cmake, ninja, a C++20 compiler,
# the build dependencies (debian/control), dpkg-dev, debhelper, binutils
# (readelf) and rpm (rpmbuild). Set PANDO_SKIP_RPM=1 to build only the .deb,
# PANDO_VERSION to give the packages another version than the project's.
# The three executables are static (PANDO_STATIC_BINARIES): neither package
# depends on a library package, and they run on any glibc-2.31-or-later
# distribution (Debian 11+, Ubuntu 22.04+, RHEL 9, Fedora).
set -euo pipefail
umask 022

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(realpath -m "${1:-out}")
pkg="pando-helper"

die() {
	echo "build-packages: $*" >&2
	exit 1
}
need() {
	command -v "$1" >/dev/null 2>&1 || die "$1 not found (install: $2)"
}
need cmake cmake
need ninja ninja-build
need dpkg-buildpackage dpkg-dev
need dpkg-parsechangelog dpkg-dev
need dh debhelper
need readelf binutils
[ "${PANDO_SKIP_RPM:-0}" = 1 ] || need rpmbuild rpm

# The version comes from CMakeLists.txt; debian/changelog must say the same, so
# that dpkg-buildpackage on the checkout builds the project's version.
version=$(sed -n 's/^project(pando-helper VERSION \([0-9][0-9.]*\) .*/\1/p' "$src/CMakeLists.txt")
[ -n "$version" ] || die "cannot read the project version from CMakeLists.txt"
changelog_version=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)
[ "$changelog_version" = "$version" ] ||
	die "debian/changelog is at $changelog_version, CMakeLists.txt at $version: add a debian/changelog entry"
# PANDO_VERSION overrides the packages' version (not the one compiled into the
# programs), e.g. to build a package that upgrades another of the same commit.
if [ -n "${PANDO_VERSION:-}" ]; then
	[[ "$PANDO_VERSION" =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || die "PANDO_VERSION '$PANDO_VERSION' is not a package version"
	version=$PANDO_VERSION
fi
maintainer=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Maintainer)

# Timestamps inside the packages come from the last commit, so two builds of
# one commit give the same file list and dates.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git -C "$src" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH

# --- 1. .deb: dpkg-buildpackage on a copy of the source tree (its products
# land beside the copy; the checkout stays as it is). From a git checkout the
# copy holds what git would commit (tracked and not ignored files), else all
# but build trees.
mkdir -p "$out"
debwork="$out/deb"
tree="$debwork/$pkg-$version"
rm -rf "$debwork"
mkdir -p "$tree"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	(cd "$src" && git ls-files -z --cached --others --exclude-standard |
		tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$tree"
else
	tar -C "$src" --exclude='./build*' --exclude=./out --exclude="./${out#"$src"/}" -cf - . |
		tar -xf - -C "$tree"
fi
[ -x "$tree/debian/rules" ] || die "copying the source tree to $tree failed"
# The changelog entry names the version built and the commit.
commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
printf '%s (%s) unstable; urgency=medium\n\n  * Built from commit %s.\n\n -- %s  %s\n' \
	"$pkg" "$version" "$commit" "$maintainer" "$(date -u -R -d "@$SOURCE_DATE_EPOCH")" \
	>"$tree/debian/changelog"
(cd "$tree" && dpkg-buildpackage -us -uc -b --jobs-try=auto)
arch=$(dpkg --print-architecture)
deb="$out/${pkg}_${version}_${arch}.deb"
rm -f "$out/${pkg}"_*.deb
mv "$debwork/${pkg}_${version}_${arch}.deb" "$deb"
echo "$deb"

# --- 2. .rpm (binary-only spec: files are copied from rpm-root), from the
# build directory dpkg-buildpackage left: same binaries, Debian's hardening
# flags.
if [ "${PANDO_SKIP_RPM:-0}" != 1 ]; then
	build="$tree/obj-$(dpkg-architecture -qDEB_HOST_GNU_TYPE)"
	rpmroot="$out/rpm-root"
	rm -rf "$rpmroot" "$out/rpmbuild" "$out/${pkg}"-*.rpm
	DESTDIR="$rpmroot" cmake --install "$build" --strip >/dev/null
	for f in usr/bin/pando-helper usr/sbin/pando-helperd usr/libexec/pando-helper/pando-helper-sandbox \
		usr/libexec/pando-helper/pando-helper-probe usr/libexec/pando-helper/pando-helper-git-query; do
		[ -x "$rpmroot/$f" ] || die "cmake --install did not produce /$f"
		# The compiler's version string is of no use at run time.
		strip --remove-section=.comment "$rpmroot/$f"
	done
	# Built on Debian 12, whose systemd.pc says /lib/systemd/system; RPM
	# distributions have merged /usr.
	if [ -d "$rpmroot/lib/systemd/system" ]; then
		mkdir -p "$rpmroot/usr/lib/systemd"
		mv "$rpmroot/lib/systemd/system" "$rpmroot/usr/lib/systemd/system"
		rmdir "$rpmroot/lib/systemd" "$rpmroot/lib"
	fi
	gzip -9n "$rpmroot"/usr/share/man/man*/*
	# It names the libraries linked into the executables.
	install -m 0644 "$src/debian/copyright" "$rpmroot/usr/share/doc/$pkg/copyright"
	# Modes are set here, not inherited from the checkout or the umask of
	# whoever built: root:root comes from the spec.
	find "$rpmroot" -type d -exec chmod 0755 {} +
	find "$rpmroot" -type f -exec chmod 0644 {} +
	chmod 0755 "$rpmroot/usr/bin/pando-helper" "$rpmroot/usr/sbin/pando-helperd" \
		"$rpmroot/usr/libexec/pando-helper/pando-helper-sandbox" \
		"$rpmroot/usr/libexec/pando-helper/pando-helper-probe" \
		"$rpmroot/usr/libexec/pando-helper/pando-helper-git-query"
	rpm_arch=$(rpm --eval '%{_arch}')
	rpmbuild -bb --quiet \
		--target "$rpm_arch" \
		--define "_topdir $out/rpmbuild" \
		--define "_rpmdir $out" \
		--define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
		--define "pando_version $version" \
		--define "pando_root $rpmroot" \
		--define "pando_maintainer $maintainer" \
		"$src/packaging/rpm/$pkg.spec" >/dev/null
	echo "$out/$pkg-$version-1.$rpm_arch.rpm"
fi
