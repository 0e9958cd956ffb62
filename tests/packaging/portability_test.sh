#!/bin/bash
# The packages install beyond the build host: every ELF file in the .deb and
# the .rpm is static (or needs no glibc symbol newer than 2.31: Debian 11,
# Ubuntu 22.04, RHEL 9), the .deb depends on no library package and the .rpm
# requires nothing Fedora or RHEL lacks; the copyright file names the
# libraries linked in.
#   portability_test.sh OUT_DIR   (where packaging/build-packages.sh put them)
set -euo pipefail
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
shopt -s nullglob
debs=("$1"/pando-helper_*.deb)
rpms=("$1"/pando-helper-*.rpm)
[ "${#debs[@]}" = 1 ] || fail "expected one .deb in $1, found ${#debs[@]}"
[ "${#rpms[@]}" = 1 ] || fail "expected one .rpm in $1, found ${#rpms[@]}"
deb=${debs[0]}
rpm=${rpms[0]}

work=$(mktemp -d /tmp/pandotest-portable-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/deb" "$work/rpm"
dpkg-deb -x "$deb" "$work/deb"
rpm2archive - <"$rpm" | tar -xz -C "$work/rpm"

# Newest GLIBC_x.y a file's dynamic symbols ask for, empty when none.
max_glibc() {
	objdump -T "$1" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' |
		sort -V | tail -n 1
}

check_elf_files() {
	local root=$1 what=$2 count=0 f rel newest
	while IFS= read -r -d '' f; do
		[ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
		count=$((count + 1))
		rel=${f#"$root"}
		if readelf -lW "$f" | grep -q 'Requesting program interpreter' ||
			readelf -dW "$f" | grep -q '(NEEDED)'; then
			newest=$(max_glibc "$f")
			[ -n "$newest" ] && [ "$(printf '%s\n2.31\n' "$newest" | sort -V | tail -n 1)" = 2.31 ] ||
				fail "$what $rel is dynamically linked and needs GLIBC_${newest:-?} (> 2.31)"
			continue
		fi
		[ -z "$(max_glibc "$f")" ] || fail "$what $rel is static but has versioned glibc symbols"
	done < <(find "$root" -type f -print0)
	[ "$count" -ge 3 ] || fail "$what: only $count ELF files (want the three executables)"
}
check_elf_files "$work/deb" .deb
check_elf_files "$work/rpm" .rpm

# The maintainer scripts need a POSIX shell, systemd-sysusers (from systemd or
# a standalone package) and Debian's helpers; nothing else is required.
for field in Depends Pre-Depends Recommends; do
	value=$(dpkg-deb -f "$deb" "$field")
	while IFS= read -r dep; do
		dep=$(sed 's/^ *//; s/ *(.*//; s/ *$//' <<<"$dep")
		[ -n "$dep" ] || continue
		case "$dep" in
		adduser | passwd | init-system-helpers | systemd | systemd-sysv | systemd-standalone-sysusers | systemd-sysusers) ;;
		*) fail ".deb $field names $dep (no library package may appear): $value" ;;
		esac
	done < <(tr ',|' '\n\n' <<<"$value")
done

# rpmlib() features, the scriptlet shell, systemd for the scriptlets
# (systemd-sysusers, systemctl) and the package's own config(): all on Fedora
# 40+ and RHEL 9.
while IFS= read -r req; do
	case "$req" in
	'rpmlib('*')'* | /bin/sh | shadow-utils | systemd | 'config(pando-helper) = '*) ;;
	*) fail ".rpm requires '$req', which not every RPM distribution provides" ;;
	esac
done < <(rpm -qpR "$rpm")

for copyright in "$work/deb/usr/share/doc/pando-helper/copyright" \
	"$work/rpm/usr/share/doc/pando-helper/copyright"; do
	[ -f "$copyright" ] || fail "${copyright#"$work"} missing"
	for lib in 'GNU C Library' 'GCC runtime' 'Protocol Buffers' spdlog fmt libcap libseccomp \
		Boost.Asio; do
		grep -q "^  $lib" "$copyright" || fail "${copyright#"$work"} does not name $lib"
	done
done
echo "PASS: static executables, no library dependencies in the .deb or the .rpm"
