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
# The executables are static: no Depends (portability_test.sh checks the ELF
# files and every dependency field).
[ -z "$(field Depends)" ] || fail "Depends: $(field Depends)"

ctl=$(mktemp -d /tmp/pandotest-debctl-XXXXXX)
trap 'rm -rf "$ctl"' EXIT
dpkg-deb -e "$deb" "$ctl"
[ "$(cat "$ctl/conffiles")" = /etc/pando/pando-helperd.conf ] || fail "conffiles"
for s in postinst prerm postrm; do
	[ "$(stat -c %a "$ctl/$s")" = 755 ] || fail "$s mode"
	sh -n "$ctl/$s" || fail "$s syntax"
done
grep -q 'systemd-sysusers pando-helper.conf' "$ctl/postinst" || fail "postinst does not create users with sysusers"
grep -q 'pando-helper security setup-users' "$ctl/postinst" || fail "postinst has no fallback without sysusers"
grep -q '/run/systemd/system' "$ctl/postinst" || fail "postinst starts units without checking systemd runs"
dpkg-deb -x "$deb" "$ctl/root"
(cd "$ctl/root" && md5sum --quiet -c "$ctl/md5sums") || fail "md5sums do not match the payload"

# The package is lintian-clean; accepted tags are overridden, with a reason, in
# packaging/deb/lintian-overrides.
if ! out=$(lintian --fail-on error,warning "$deb" 2>&1); then
	fail "lintian: $out"
fi
if grep -E '^[EW]: ' <<<"$out"; then fail "lintian reported errors or warnings"; fi
echo "PASS: deb contents, control, scripts, lintian"
