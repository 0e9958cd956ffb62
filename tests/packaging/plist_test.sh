#!/bin/bash
# Checks launchd/com.pando.helperd.plist: well-formed XML, parses as a property
# list, and holds the decisions the README documents; and the .pkg scripts parse.
#   plist_test.sh SOURCE_DIR
set -euo pipefail
plist="$1/launchd/com.pando.helperd.plist"
if command -v xmllint >/dev/null 2>&1; then
	xmllint --noout "$plist"
fi
python3 - "$plist" <<'PY'
import plistlib
import sys

with open(sys.argv[1], "rb") as f:
    p = plistlib.load(f)

def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)

check(p.get("Label") == "com.pando.helperd", "Label")
check(p.get("ProgramArguments") == [
    "/usr/local/sbin/pando-helperd", "--config",
    "/usr/local/etc/pando/pando-helperd.conf", "--foreground"], "ProgramArguments")
check(p.get("UserName") == "root", "runs as root")
listener = p.get("Sockets", {}).get("Listeners", {})
check(listener.get("SockPathName") == "/var/run/pando/helper.sock", "socket path")
check(listener.get("SockType") == "stream" and listener.get("SockFamily") == "Unix",
      "stream Unix socket")
mode = listener.get("SockPathMode")
check(type(mode) is int and mode == 0o666, "SockPathMode must be the integer 438 (0666)")
check(p.get("KeepAlive") == {"SuccessfulExit": False},
      "KeepAlive restarts only after a failure (idle exit stays stopped)")
check(p.get("StandardErrorPath") == "/var/log/pando-helperd.log", "log path")
check(p.get("StandardOutPath") == "/var/log/pando-helperd.log", "log path")
print("PASS: plist")
PY
# The .pkg's install scripts: present, executable and valid sh (they run on
# macOS only; their syntax is what can be checked here).
for script in preinstall postinstall; do
	f="$1/packaging/macos/scripts/$script"
	[ -x "$f" ] || { echo "FAIL: $f missing or not executable" >&2; exit 1; }
	sh -n "$f" || { echo "FAIL: $f is not valid sh" >&2; exit 1; }
done
echo "PASS: pkg scripts"
