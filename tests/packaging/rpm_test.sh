#!/bin/bash
# Checks the built .rpm without installing it: file list with owners and
# modes, the config file, and the scriptlets.
#   rpm_test.sh OUT_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/layout.sh"
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
shopt -s nullglob
rpms=("$1"/pando-helper-*.rpm)
[ "${#rpms[@]}" = 1 ] || fail "expected one .rpm in $1, found ${#rpms[@]}"
rpm=${rpms[0]}

# rpm -qlpv: "mode links owner group size month day time path [-> target]".
rpm -qlpv "$rpm" | awk '{ print $1, $3 "/" $4, $9 }' |
	check_layout /usr/lib/systemd/system '^/usr/lib/\.build-id(/|$)' || fail "layout"
[ "$(rpm -qpc "$rpm")" = /etc/pando/pando-helperd.conf ] || fail "config files"

scripts=$(rpm -qp --scripts "$rpm")
grep -q '^preinstall scriptlet' <<<"$scripts" || fail "no %pre"
grep -q 'useradd -r -g "$user" -d /nonexistent -M -s /usr/sbin/nologin' <<<"$scripts" || fail "%pre does not create locked system users"
grep -q 'systemctl --no-reload enable pando-helperd.socket' <<<"$scripts" || fail "%post does not enable the socket"
grep -q '^preuninstall scriptlet' <<<"$scripts" || fail "no %preun"
grep -q '^postuninstall scriptlet' <<<"$scripts" || fail "no %postun"
grep -q 'shadow-utils' < <(rpm -qpR "$rpm") || fail "Requires(pre): shadow-utils"
echo "PASS: rpm layout, config, scriptlets"
