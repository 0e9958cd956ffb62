#!/bin/bash
# Checks the built .deb without installing it: file list with owners and modes,
# control fields, maintainer scripts, and lintian.
#   deb_contents_test.sh OUT_DIR   (where packaging/build-packages.sh put it)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/layout.sh"
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
shopt -s nullglob
debs=("$1"/pando-helper_*.deb)
[ "${#debs[@]}" = 1 ] || fail "expected one .deb in $1, found ${#debs[@]}"
deb=${debs[0]}

# "./usr/bin/x" -> "/usr/bin/x"; the root entry "./" is skipped.
dpkg-deb -c "$deb" | awk '$6 != "./" { p = substr($6, 2); sub(/\/$/, "", p); print $1, $2, p }' |
	check_layout /lib/systemd/system '^/usr/share/lintian/overrides/pando-helper$' || fail "layout"

field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = pando-helper ] || fail "Package"
[ "$(field Architecture)" = "$(dpkg --print-architecture)" ] || fail "Architecture"
# The executables are static: Depends names only what debhelper's maintainer
# script snippets call (portability_test.sh checks the ELF files and every
# dependency field against the packages allowed there).
[ "$(field Depends)" = 'systemd | systemd-standalone-sysusers | systemd-sysusers' ] ||
	fail "Depends: $(field Depends)"

ctl=$(mktemp -d /tmp/pandotest-debctl-XXXXXX)
trap 'rm -rf "$ctl"' EXIT
dpkg-deb -e "$deb" "$ctl"
[ "$(cat "$ctl/conffiles")" = /etc/pando/pando-helperd.conf ] || fail "conffiles"
for s in postinst prerm postrm; do
	[ "$(stat -c %a "$ctl/$s")" = 755 ] || fail "$s mode"
	sh -n "$ctl/$s" || fail "$s syntax"
done
# debhelper's snippets (dh_installsysusers, dh_installtmpfiles,
# dh_installsystemd), users first: the daemon refuses to start without them.
users_line=$(grep -n 'systemd-sysusers .*pando-helper.conf' "$ctl/postinst" | cut -d: -f1)
enable_line=$(grep -n "deb-systemd-helper enable 'pando-helperd.socket'" "$ctl/postinst" | cut -d: -f1)
start_line=$(grep -n 'deb-systemd-invoke $_dh_action .*pando-helperd.socket' "$ctl/postinst" | cut -d: -f1)
[ -n "$users_line" ] || fail "postinst does not create users with sysusers"
grep -q 'systemd-tmpfiles .*--create pando-helper.conf' "$ctl/postinst" || fail "postinst does not create /run/pando"
[ -n "$enable_line" ] || fail "postinst does not enable the socket"
[ -n "$start_line" ] || fail "postinst does not start the socket"
[ "$users_line" -lt "$enable_line" ] && [ "$users_line" -lt "$start_line" ] ||
	fail "postinst starts the socket before it creates the users"
grep -q '/run/systemd/system' "$ctl/postinst" || fail "postinst starts units without checking systemd runs"
# On upgrade (postinst configure with the old version in $2) the units are
# restarted; deb-systemd-invoke restarts no disabled unit that is not running.
grep -q '_dh_action=restart' "$ctl/postinst" || fail "postinst does not restart the daemon on upgrade"
grep -q "deb-systemd-invoke stop .*pando-helperd.service" "$ctl/prerm" || fail "prerm does not stop the daemon on remove"
dpkg-deb -x "$deb" "$ctl/root"
# The units' Documentation= names README.md uncompressed.
for unit in "$ctl/root/lib/systemd/system/"pando-helperd.*; do
	for doc in $(sed -n 's|^Documentation=.*file:\(/[^ ]*\).*|\1|p' "$unit"); do
		[ -f "$ctl/root$doc" ] || fail "$(basename "$unit") documents $doc, which the package lacks"
	done
done
(cd "$ctl/root" && md5sum --quiet -c "$ctl/md5sums") || fail "md5sums do not match the payload"

# The package is lintian-clean; accepted tags are overridden, with a reason, in
# debian/pando-helper.lintian-overrides.
if ! out=$(lintian --fail-on error,warning "$deb" 2>&1); then
	fail "lintian: $out"
fi
if grep -E '^[EW]: ' <<<"$out"; then fail "lintian reported errors or warnings"; fi
echo "PASS: deb contents, control, scripts, lintian"
