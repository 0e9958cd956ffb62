#!/bin/bash
# Checks the systemd files: systemd-analyze verify on the units (ExecStart
# pointed at the built daemon, since verify requires the binary to exist), the
# decisions written into them, and that sysusers/tmpfiles produce the expected
# users and directory in a scratch root.
#   units_test.sh SOURCE_DIR DAEMON_BINARY
set -euo pipefail
src=$1
daemon=$(realpath "$2")
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
[ -x "$daemon" ] || fail "daemon binary $daemon missing"
tmp=$(mktemp -d /tmp/pandotest-units-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

service="$src/systemd/pando-helperd.service"
socket="$src/systemd/pando-helperd.socket"

# --- The unit as shipped names the installed paths and the documented CLI.
grep -qx 'ExecStart=/usr/sbin/pando-helperd --config /etc/pando/pando-helperd.conf --foreground' "$service" ||
	fail "ExecStart does not run the installed daemon with the packaged config"

# --- Decisions of the service's own resource settings.
grep -qx 'RestartPreventExitStatus=64 77 78' "$service" ||
	fail "the unit restarts on a config error (RestartPreventExitStatus=64 77 78 missing)"
grep -qx 'TasksMax=33100' "$service" || fail "TasksMax is not sized for max_sessions x pids_max"
grep -qx 'Documentation=man:pando-helperd(8) man:pando-helperd.conf(5)' "$service" ||
	fail "the unit does not point at the man pages"

# --- systemd-analyze verify prints parse problems as warnings and still exits
# 0, so any output at all is a failure.
mkdir "$tmp/units"
sed "s#^ExecStart=/usr/sbin/pando-helperd #ExecStart=$daemon #" "$service" >"$tmp/units/pando-helperd.service"
cp "$socket" "$tmp/units/pando-helperd.socket"
grep -q "^ExecStart=$daemon " "$tmp/units/pando-helperd.service" || fail "ExecStart rewrite failed"
# Documentation=man:... is checked by running man: the pages come from the checkout.
for page in "$src"/packaging/man/*.[158]; do
	mkdir -p "$tmp/man/man${page##*.}"
	cp "$page" "$tmp/man/man${page##*.}/"
done
if ! out=$(MANPATH="$tmp/man" systemd-analyze verify "$tmp/units/pando-helperd.socket" \
	"$tmp/units/pando-helperd.service" 2>&1); then
	fail "systemd-analyze verify failed: $out"
fi
[ -z "$out" ] || fail "systemd-analyze verify reported: $out"

# The check above must be able to fail: a broken copy has to produce output.
sed 's/^KillMode=mixed/KillMode=bogus/' "$tmp/units/pando-helperd.service" >"$tmp/units/broken.service"
out=$(systemd-analyze verify "$tmp/units/broken.service" 2>&1 || true)
[ -n "$out" ] || fail "systemd-analyze verify did not notice an invalid KillMode"

# --- Decisions written into the units (last assignment wins, as in systemd).
prop() {
	grep -E "^$1=" "$2" | tail -n1 | cut -d= -f2-
}
[ "$(prop SocketMode "$socket")" = 0666 ] || fail "SocketMode=0666 must be explicit"
[ "$(prop ListenStream "$socket")" = /run/pando/helper.sock ] || fail "ListenStream"
[ "$(prop RemoveOnStop "$socket")" = yes ] || fail "RemoveOnStop"
[ "$(prop Type "$service")" = notify ] || fail "Type=notify"
[ "$(prop KillMode "$service")" = mixed ] || fail "KillMode=mixed"
[ "$(prop OOMPolicy "$service")" = continue ] || fail "OOMPolicy=continue"
[ "$(prop Delegate "$service")" = "memory pids cpu" ] || fail "Delegate"
[ "$(prop NoNewPrivileges "$service")" = yes ] || fail "NoNewPrivileges"
[ "$(prop LimitNOFILE "$service")" = 65536 ] || fail "LimitNOFILE=65536 (the daemon raises its soft limit to it)"

# The daemon must share the host's mount namespace (open_tree refuses mounts of
# another namespace), and systemd's seccomp filters are inherited by sessions:
# none of these may appear.
for forbidden in ProtectSystem ProtectHome PrivateTmp PrivateDevices PrivateMounts \
	ProtectKernelTunables ProtectKernelModules ProtectKernelLogs ProtectControlGroups \
	ProtectProc ProcSubset ReadOnlyPaths ReadWritePaths InaccessiblePaths BindPaths \
	BindReadOnlyPaths TemporaryFileSystem RootDirectory RootImage PrivateNetwork \
	PrivateUsers PrivateIPC RestrictNamespaces MemoryDenyWriteExecute ProtectHostname \
	DynamicUser; do
	if grep -qE "^$forbidden=" "$service"; then fail "$forbidden= must not be set (see the comment in the unit)"; fi
done

# RestrictSUIDSGID makes openat2 fail with ENOSYS, and the daemon resolves every
# project with openat2; the sessions' own filter refuses set-id modes instead.
if grep -qE '^RestrictSUIDSGID=' "$service"; then fail "RestrictSUIDSGID= must not be set (see the comment in the unit)"; fi

# Sessions apply Landlock and seccomp themselves: the system call filter stays a
# deny-list (an allow-list drops the Landlock calls unless it names them) that
# names neither them nor a group holding them.
filters=$(grep -E '^SystemCallFilter=' "$service" | cut -d= -f2-)
[ -n "$filters" ] || fail "SystemCallFilter missing"
while read -r filter; do
	case "$filter" in
	"~"*) ;;
	*) fail "SystemCallFilter=$filter is an allow-list" ;;
	esac
	for word in ${filter#\~}; do
		case "$word" in
		@sandbox | @default | @known | landlock_* | seccomp) fail "SystemCallFilter denies $word, which sessions need" ;;
		esac
	done
done <<<"$filters"

# Every capability in the bounding set is explained in the comment above it.
caps=$(prop CapabilityBoundingSet "$service")
[ -n "$caps" ] || fail "CapabilityBoundingSet missing"
for cap in $caps; do
	grep -qE "^#   $cap " "$service" || fail "$cap has no justification comment"
done
for cap in CAP_SYS_MODULE CAP_SYS_RAWIO CAP_SYS_TIME CAP_SYSLOG CAP_DAC_OVERRIDE CAP_FOWNER \
	CAP_SETFCAP CAP_BPF CAP_SYS_BOOT CAP_NET_RAW; do
	case " $caps " in *" $cap "*) fail "$cap must not be in the bounding set" ;; esac
done

# --- sysusers: two locked system users with their own group, no shell, no home.
mkdir -p "$tmp/root/etc"
: >"$tmp/root/etc/passwd"
: >"$tmp/root/etc/group"
: >"$tmp/root/etc/shadow"
: >"$tmp/root/etc/gshadow"
systemd-sysusers --root="$tmp/root" "$src/systemd/pando-helper.sysusers" >/dev/null 2>&1 ||
	fail "systemd-sysusers rejected pando-helper.sysusers"
for user in pando-core pando-workspace; do
	IFS=: read -r name _ uid gid _ home shell < <(grep "^$user:" "$tmp/root/etc/passwd") ||
		fail "sysusers did not create $user"
	[ "$uid" -lt 1000 ] || fail "$user uid $uid is not a system uid"
	grep -q "^$user:x:$gid:" "$tmp/root/etc/group" || fail "$user has no own primary group"
	[ "$home" = /nonexistent ] || fail "$user home is $home"
	[ "$shell" = /usr/sbin/nologin ] || fail "$user shell is $shell"
	grep -q "^$user:!" "$tmp/root/etc/shadow" || fail "$user password not locked"
done
if grep -q '^pando:' "$tmp/root/etc/group"; then fail "sysusers created a pando group"; fi

# --- tmpfiles: /run/pando, root-owned 0755.
systemd-tmpfiles --root="$tmp/root" --create "$src/systemd/pando-helper.tmpfiles" >/dev/null 2>&1 ||
	fail "systemd-tmpfiles rejected pando-helper.tmpfiles"
[ "$(stat -c '%a %U %G' "$tmp/root/run/pando")" = "755 root root" ] || fail "/run/pando mode/owner"

# --- --check-config (what an admin runs before a restart, like sshd -t): the
# shipped config passes, a broken one exits 78 naming file, line and field.
out=$("$daemon" --check-config "$src/examples/pando-helperd.conf" 2>&1) ||
	fail "the shipped config does not pass --check-config: $out"
sed 's/^max_sessions: .*/max_sessions: 0/' "$src/examples/pando-helperd.conf" >"$tmp/bad.conf"
grep -q '^max_sessions: 0$' "$tmp/bad.conf" || fail "test config rewrite failed"
set +e
out=$("$daemon" --check-config "$tmp/bad.conf" 2>&1)
rc=$?
set -e
[ "$rc" = 78 ] || fail "--check-config of a bad config exited $rc, not 78: $out"
line=$(grep -n '^max_sessions: 0$' "$tmp/bad.conf" | cut -d: -f1)
case "$out" in
*"$tmp/bad.conf:$line: max_sessions: "*) ;;
*) fail "--check-config did not name file, line and field: $out" ;;
esac

echo "PASS: units verify, hardening choices, sysusers and tmpfiles, --check-config"
