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
tmp=$(mktemp -d /tmp/pandotest-rpm-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# rpm -qlpv: "mode links owner group size month day time path [-> target]".
rpm -qlpv "$rpm" | awk '{ print $1, $3 "/" $4, $9 }' |
	check_layout /usr/lib/systemd/system '^/usr/lib/\.build-id(/|$)' || fail "layout"
[ "$(rpm -qpc "$rpm")" = /etc/pando/pando-helperd.conf ] || fail "config files"

scripts=$(rpm -qp --scripts "$rpm")
# Scriptlets as Fedora's systemd macros expand them (the spec is built where
# rpm lacks them): users from the packaged sysusers.d file, presets on first
# install only, disable --now on erase, try-restart on upgrade; no unit is
# ever started or enabled regardless of the presets.
scriptlet() {  # the body of one scriptlet, e.g. "preinstall"
	awk -v s="$1 scriptlet" 'index($0, s) == 1 { on = 1; next } / scriptlet \(using / { on = 0 } on' <<<"$scripts"
}
pre=$(scriptlet preinstall)
post=$(scriptlet postinstall)
preun=$(scriptlet preuninstall)
postun=$(scriptlet postuninstall)
grep -q '^systemd-sysusers --replace=/usr/lib/sysusers.d/pando-helper.conf -' <<<"$pre" ||
	fail "%pre does not create the users with systemd-sysusers"
# The sysusers.d lines in %pre are those of the packaged file.
rpm2archive - <"$rpm" | tar -xzO ./usr/lib/sysusers.d/pando-helper.conf >"$tmp/sysusers" ||
	fail "no /usr/lib/sysusers.d/pando-helper.conf"
grep -v '^#' "$tmp/sysusers" | grep . | while IFS= read -r line; do
	grep -qxF "$line" <<<"$pre" || fail "%pre lacks the sysusers line: $line"
done
grep -q 'systemctl --no-reload preset pando-helperd.socket' <<<"$post" || fail "%post does not apply the presets"
grep -q '"$1" -eq 1' <<<"$post" || fail "%post applies the presets on upgrades too"
grep -q 'systemctl --no-reload disable --now pando-helperd.socket pando-helperd.service' <<<"$preun" ||
	fail "%preun does not disable and stop the units on erase"
grep -q 'systemctl try-restart pando-helperd.service' <<<"$postun" || fail "%postun does not try-restart on upgrade"
if grep -v '^[[:space:]]*#' <<<"$scripts" | grep -E 'systemctl.* (start|restart|enable) '; then
	fail "a scriptlet starts or enables a unit regardless of the admin's choice"
fi
grep -qx 'systemd' < <(rpm -qpR "$rpm") || fail "no Requires: systemd for the scriptlets"
echo "PASS: rpm layout, config, scriptlets"
