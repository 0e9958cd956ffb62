#!/bin/bash
# Builds pando-helper's .deb and .rpm from this source tree in one go:
#   packaging/build-packages.sh [OUT_DIR]        (default: ./out)
# Produces OUT_DIR/pando-helper_<version>_<arch>.deb and
# OUT_DIR/pando-helper-<version>-1.<arch>.rpm. Work trees (build, staging) stay in
# OUT_DIR for inspection. Needs: cmake, ninja, a C++20 compiler, the build
# dependencies, binutils (readelf), dpkg-dev (dpkg-deb, dpkg-buildflags) and
# rpm (rpmbuild). Set PANDO_SKIP_RPM=1 to build only the .deb, PANDO_VERSION to
# give the packages another version than the project's.
# The three executables are static (PANDO_STATIC_BINARIES): neither package
# depends on a library package, and they run on any glibc-2.31-or-later
# distribution (Debian 11+, Ubuntu 22.04+, RHEL 9, Fedora).
set -euo pipefail
umask 022

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(realpath -m "${1:-out}")
build="$out/build"
staging="$out/staging"
pkg="pando-helper"
maintainer="${PANDO_MAINTAINER:-pando-helper maintainers <maintainers@users.noreply.a-seed-5d5d78fe.example>}"

die() {
	echo "build-packages: $*" >&2
	exit 1
}
need() {
	command -v "$1" >/dev/null 2>&1 || die "$1 not found (install: $2)"
}
need cmake cmake
need ninja ninja-build
need dpkg-deb dpkg
need readelf binutils
need dpkg-buildflags dpkg-dev
[ "${PANDO_SKIP_RPM:-0}" = 1 ] || need rpmbuild rpm
[ -f "$src/examples/pando-helperd.conf" ] || die "examples/pando-helperd.conf is missing"

mkdir -p "$out"

# Timestamps inside the packages come from the last commit, so two builds of
# one commit give the same file list and dates.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git -C "$src" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH

# --- 1. Release build with Debian's hardening flags (PIE, relro/now, fortify,
# stack protector, CET), so lintian's hardening checks hold for both packages.
export DEB_BUILD_MAINT_OPTIONS="hardening=+all"
CXXFLAGS=$(cd "$src" && dpkg-buildflags --get CXXFLAGS)
CPPFLAGS=$(cd "$src" && dpkg-buildflags --get CPPFLAGS)
LDFLAGS=$(cd "$src" && dpkg-buildflags --get LDFLAGS)
cmake -S "$src" -B "$build" -G Ninja \
	-DCMAKE_BUILD_TYPE=Release \
	-DCMAKE_INSTALL_PREFIX=/usr \
	-DPANDO_TESTS=OFF \
	-DPANDO_STATIC_BINARIES=ON \
	-DCMAKE_CXX_FLAGS="$CXXFLAGS $CPPFLAGS" \
	-DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS" >/dev/null
cmake --build "$build" --target pando-helper pando-helperd pando-helper-sandbox pando-helper-probe
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
[ -n "$version" ] || die "cannot read the project version from $build/CMakeCache.txt"
# PANDO_VERSION overrides the packages' version (not the one compiled into the
# programs), e.g. to build a package that upgrades another of the same commit.
if [ -n "${PANDO_VERSION:-}" ]; then
	[[ "$PANDO_VERSION" =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || die "PANDO_VERSION '$PANDO_VERSION' is not a package version"
	version=$PANDO_VERSION
fi

# --- 2. Staging tree shared by both formats.
rm -rf "$staging"
DESTDIR="$staging" cmake --install "$build" --strip >/dev/null
for f in usr/bin/pando-helper usr/sbin/pando-helperd usr/libexec/pando-helper/pando-helper-sandbox \
	usr/libexec/pando-helper/pando-helper-probe; do
	[ -x "$staging/$f" ] || die "cmake --install did not produce /$f"
	# The compiler's version string is of no use at run time.
	strip --remove-section=.comment "$staging/$f"
done
install -D -m 0644 "$src/examples/pando-helperd.conf" "$staging/etc/pando/pando-helperd.conf"
install -D -m 0644 "$src/systemd/pando-helper.sysusers" "$staging/usr/lib/sysusers.d/$pkg.conf"
install -D -m 0644 "$src/systemd/pando-helper.tmpfiles" "$staging/usr/lib/tmpfiles.d/$pkg.conf"
doc="$staging/usr/share/doc/$pkg"
install -d -m 0755 "$doc"
for f in README.md SECURITY.md LICENSE; do
	if [ -f "$src/$f" ]; then install -m 0644 "$src/$f" "$doc/$f"; fi
done
# Both packages: it names the libraries linked into the executables.
install -m 0644 "$src/packaging/deb/copyright" "$doc/copyright"
for page in pando-helper.1 pando-helperd.8 pando-helperd.conf.5; do
	section=${page##*.}
	install -d -m 0755 "$staging/usr/share/man/man$section"
	gzip -9n <"$src/packaging/man/$page" >"$staging/usr/share/man/man$section/$page.gz"
done
# Modes are set here, not inherited from the checkout or the umask of whoever
# built: root:root comes from the package tools.
find "$staging" -type d -exec chmod 0755 {} +
find "$staging" -type f -exec chmod 0644 {} +
chmod 0755 "$staging/usr/bin/pando-helper" "$staging/usr/sbin/pando-helperd" \
	"$staging/usr/libexec/pando-helper/pando-helper-sandbox" \
	"$staging/usr/libexec/pando-helper/pando-helper-probe"

# No package lists a dependency for a shared library: none may be needed.
for f in usr/bin/pando-helper usr/sbin/pando-helperd usr/libexec/pando-helper/pando-helper-sandbox \
	usr/libexec/pando-helper/pando-helper-probe; do
	if readelf -lW "$staging/$f" | grep -q 'Requesting program interpreter' ||
		readelf -dW "$staging/$f" | grep -q '(NEEDED)'; then
		die "/$f is dynamically linked (configure with -DPANDO_STATIC_BINARIES=ON, no sanitizers)"
	fi
done

# --- 3. .deb
arch=$(dpkg --print-architecture)
debroot="$out/deb-root"
rm -rf "$debroot"
cp -a "$staging" "$debroot"
install -D -m 0644 "$src/systemd/pando-helperd.service" "$debroot/lib/systemd/system/pando-helperd.service"
install -D -m 0644 "$src/systemd/pando-helperd.socket" "$debroot/lib/systemd/system/pando-helperd.socket"
changelog_date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
printf '%s (%s) unstable; urgency=medium\n\n  * Built from commit %s.\n\n -- %s  %s\n' \
	"$pkg" "$version" "$commit" "$maintainer" "$changelog_date" |
	gzip -9n >"$debroot/usr/share/doc/$pkg/changelog.gz"
chmod 0644 "$debroot/usr/share/doc/$pkg/changelog.gz"
install -m 0644 "$src/packaging/deb/lintian-overrides" \
	-D "$debroot/usr/share/lintian/overrides/$pkg"

install -d -m 0755 "$debroot/DEBIAN"
installed_size=$(du -s -k --apparent-size --exclude=DEBIAN "$debroot" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$maintainer|" \
	-e "s|@INSTALLED_SIZE@|$installed_size|" \
	"$src/packaging/deb/control.in" >"$debroot/DEBIAN/control"
install -m 0644 "$src/packaging/deb/conffiles" "$debroot/DEBIAN/conffiles"
for script in postinst prerm postrm; do
	install -m 0755 "$src/packaging/deb/$script" "$debroot/DEBIAN/$script"
done
(cd "$debroot" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
	xargs -0 md5sum) >"$debroot/DEBIAN/md5sums"
chmod 0644 "$debroot/DEBIAN/md5sums"
deb="$out/${pkg}_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$debroot" "$deb" >/dev/null
echo "$deb"

# --- 4. .rpm (binary-only spec: files are copied from the staging tree)
if [ "${PANDO_SKIP_RPM:-0}" != 1 ]; then
	rpmroot="$out/rpm-root"
	rm -rf "$rpmroot" "$out/rpmbuild"
	cp -a "$staging" "$rpmroot"
	install -D -m 0644 "$src/systemd/pando-helperd.service" "$rpmroot/usr/lib/systemd/system/pando-helperd.service"
	install -D -m 0644 "$src/systemd/pando-helperd.socket" "$rpmroot/usr/lib/systemd/system/pando-helperd.socket"
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
