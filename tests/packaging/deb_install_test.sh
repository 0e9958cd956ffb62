#!/bin/bash
# Installs the built .deb on this machine, checks what it put there, runs the
# installed daemon and one confined launch for an unprivileged user, then
# purges the package and checks the machine is as it was: package gone, role
# users removed if this test created them, /etc/passwd & co. byte-identical,
# systemd enablement state unchanged. Must run as root; refuses to run when
# pando-helper is already installed (purging it would change this machine).
#   deb_install_test.sh OUT_DIR
set -uo pipefail
out=$1
pkg=pando-helper
roles=(pando-core pando-workspace)
test_user=pandotest-pkg
daemon_pid=
failed=0

fail() {
	echo "FAIL: $*" >&2
	exit 1
}
[ "$(id -u)" = 0 ] || fail "must run as root"
shopt -s nullglob
debs=("$out"/${pkg}_*.deb)
[ "${#debs[@]}" = 1 ] || fail "expected one .deb in $out, found ${#debs[@]}"
deb=${debs[0]}
if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'installed'; then
	fail "$pkg is already installed here; purging it would change this machine. Remove it first (dpkg --purge $pkg)."
fi
if getent passwd "$test_user" >/dev/null; then fail "user $test_user exists (left by an earlier run?)"; fi
tmp=$(mktemp -d /tmp/pandotest-debinst-XXXXXX)
chmod 0755 "$tmp"

# --- What "as found" means. Account files: every entry there before is still
# there unchanged, and no line names a user this test touches that was not
# there before (entries other processes add or delete meanwhile are not this
# test's).
# Everything else: identical listings.
account_files=(/etc/passwd /etc/group /etc/shadow /etc/gshadow /etc/subuid /etc/subgid)
account_lines() {
	local f
	for f in "${account_files[@]}"; do
		if [ -e "$f" ]; then sed "s|^|$f:|" "$f"; fi
	done | LC_ALL=C sort
}
snapshot() {
	find /etc/systemd/system /var/lib/systemd/deb-systemd-helper-enabled \
		/var/lib/systemd/deb-systemd-helper-masked /etc/pando /usr/share/doc/pando-helper \
		/usr/libexec/pando-helper -printf '%p %y %l\n' 2>/dev/null | LC_ALL=C sort
	[ -d /run/pando ] && echo "/run/pando present"
	true
}
declare -A role_existed
for user in "${roles[@]}"; do
	if getent passwd "$user" >/dev/null; then role_existed[$user]=1; else role_existed[$user]=0; fi
done
# postrm removes an empty /run/pando; one that was here before is put back.
run_pando_before=$(stat -c '%a %u %g' /run/pando 2>/dev/null || true)
before=$(snapshot)
accounts_before=$(account_lines)

cleanup() {
	if [ -n "$daemon_pid" ]; then
		kill -TERM "$daemon_pid" 2>/dev/null
		wait "$daemon_pid" 2>/dev/null
	fi
	if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -qv 'not-installed'; then
		dpkg --purge "$pkg" >"$tmp/purge.log" 2>&1 || { cat "$tmp/purge.log" >&2; failed=1; }
	fi
	if getent passwd "$test_user" >/dev/null; then userdel -r "$test_user" 2>/dev/null; fi
	# The daemon keeps its cgroup parent; the test made it, the test removes it.
	local parent
	for parent in /sys/fs/cgroup/*/pandotest-pkg; do
		[ -d "$parent" ] && { rmdir "$parent" || failed=1; }
	done
	local user
	for user in "${roles[@]}"; do
		if [ "${role_existed[$user]}" = 0 ]; then
			if getent passwd "$user" >/dev/null; then userdel "$user" || failed=1; fi
			if getent group "$user" >/dev/null; then groupdel "$user" || failed=1; fi
		fi
	done
	if [ -n "$run_pando_before" ] && [ ! -d /run/pando ]; then
		read -r mode uid gid <<<"$run_pando_before"
		install -d -m "$mode" -o "$uid" -g "$gid" /run/pando || failed=1
	fi
	local after accounts_after removed added
	after=$(snapshot)
	if [ "$before" != "$after" ]; then
		echo "FAIL: the machine is not as the test found it:" >&2
		diff <(echo "$before") <(echo "$after") >&2
		failed=1
	fi
	accounts_after=$(account_lines)
	# A removed line counts when its entry was changed (the name is still in
	# that file) or is one of ours; whole entries of other names may have been
	# deleted meanwhile by whoever made them.
	removed=$(LC_ALL=C comm -23 <(echo "$accounts_before") <(echo "$accounts_after") |
		while IFS=: read -r file name rest; do
			if [ "$name" = "$test_user" ] || [ "$name" = "${roles[0]}" ] || [ "$name" = "${roles[1]}" ] ||
				grep -q "^$file:$name:" <<<"$accounts_after"; then
				echo "$file:$name:$rest"
			fi
		done)
	added=$(LC_ALL=C comm -13 <(echo "$accounts_before") <(echo "$accounts_after") |
		grep -E "^/etc/[a-z]+:($test_user|${roles[0]}|${roles[1]}):" || true)
	if [ -n "$removed$added" ]; then
		echo "FAIL: account files not restored; removed or changed: $removed; added: $added" >&2
		failed=1
	fi
	rm -rf "$tmp"
}

as_test_user() {
	setpriv --reuid="$test_user" --regid="$test_user" --init-groups --reset-env -- "$@"
}

# Starts the installed daemon on a private socket and waits until it accepts
# connections (bounded wait, not a timing assertion). It runs under what the
# installed unit imposes and this machine can reproduce without systemd as
# PID 1: its capability bounding set and no_new_privs.
start_daemon() {
	local config=$1 log=$2 i caps bounding=-all
	caps=$(sed -n 's/^CapabilityBoundingSet=//p' /lib/systemd/system/pando-helperd.service)
	[ -n "$caps" ] || { echo "no CapabilityBoundingSet in the installed unit" >&2; return 1; }
	for i in $caps; do
		i=${i#CAP_}
		bounding+=",+${i,,}"
	done
	setpriv --no-new-privs --bounding-set="$bounding" --inh-caps=-all -- \
		/usr/sbin/pando-helperd --config "$config" --socket "$tmp/helper.sock" --foreground 2>"$log" &
	daemon_pid=$!
	for i in $(seq 1 200); do
		[ -S "$tmp/helper.sock" ] && return 0
		kill -0 "$daemon_pid" 2>/dev/null || break
		sleep 0.1
	done
	echo "daemon did not come up; its log:" >&2
	cat "$log" >&2
	return 1
}
stop_daemon() {
	kill -TERM "$daemon_pid" && wait "$daemon_pid"
	local rc=$?
	daemon_pid=
	return $rc
}

# launch ROLE PROJECT EXPECTED_STDOUT: one session as the test user.
launch() {
	local rc=0
	as_test_user /usr/bin/pando-helper security launch --role "$1" --project-root "$2" --stdio \
		--socket "$tmp/helper.sock" </dev/null >"$tmp/launch.out" 2>"$tmp/launch.err" || rc=$?
	if [ "$rc" != 0 ] || [ "$(cat "$tmp/launch.out")" != "$3" ]; then
		echo "launch $1: exit $rc; stdout:" >&2
		cat "$tmp/launch.out" >&2
		echo "stderr and daemon log:" >&2
		cat "$tmp/launch.err" "$tmp/daemon-launch.log" >&2
		fail "confined launch of role $1 for $test_user"
	fi
}

run_checks() {
	# --- Install.
	dpkg -i "$deb" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; fail "dpkg -i failed"; }
	[ "$(dpkg-query -W -f='${Status}' "$pkg")" = "install ok installed" ] || fail "package not installed"
	dpkg-query -W -f='${Conffiles}\n' "$pkg" | grep -q '^ /etc/pando/pando-helperd.conf ' ||
		fail "config not registered as conffile"

	local path mode owner got
	while read -r mode owner path; do
		got=$(stat -c '%a %U:%G' "$path" 2>/dev/null) || fail "$path not installed"
		[ "$got" = "$mode $owner" ] || fail "$path is $got, want $mode $owner"
	done <<LIST
755 root:root /usr/bin/pando-helper
755 root:root /usr/sbin/pando-helperd
755 root:root /usr/libexec/pando-helper
755 root:root /usr/libexec/pando-helper/pando-helper-sandbox
755 root:root /usr/libexec/pando-helper/pando-helper-probe
755 root:root /usr/libexec/pando-helper/pando-helper-git-query
644 root:root /etc/pando/pando-helperd.conf
755 root:root /etc/pando
644 root:root /lib/systemd/system/pando-helperd.service
644 root:root /lib/systemd/system/pando-helperd.socket
644 root:root /usr/lib/sysusers.d/pando-helper.conf
644 root:root /usr/lib/tmpfiles.d/pando-helper.conf
755 root:root /run/pando
LIST
	cmp -s /etc/pando/pando-helperd.conf "$(dirname "$0")/../../examples/pando-helperd.conf" ||
		fail "installed config is not examples/pando-helperd.conf"
	[ -L /etc/systemd/system/sockets.target.wants/pando-helperd.socket ] ||
		fail "postinst did not enable pando-helperd.socket"

	# --- Role users: system uids, own group, locked, no shell.
	local user uid gid home shell pw sys_uid_max
	sys_uid_max=$(awk '$1 == "SYS_UID_MAX" { print $2 }' /etc/login.defs)
	for user in "${roles[@]}"; do
		IFS=: read -r _ _ uid gid _ home shell < <(getent passwd "$user") || fail "user $user not created"
		[ "$uid" -le "${sys_uid_max:-999}" ] || fail "$user uid $uid is not a system uid"
		[ "$(getent group "$gid" | cut -d: -f1)" = "$user" ] || fail "$user primary group is not $user"
		case "$shell" in */nologin | /bin/false) ;; *) fail "$user has login shell $shell" ;; esac
		pw=$(getent shadow "$user" | cut -d: -f2)
		case "$pw" in '!'* | '*'*) ;; *) fail "$user password is not locked" ;; esac
	done

	# The other way to make the users accepts what the package made.
	/usr/bin/pando-helper security setup-users >"$tmp/setup-users.out" 2>&1 ||
		{ cat "$tmp/setup-users.out" >&2; fail "setup-users refuses the users the package created"; }

	# --- An unprivileged caller with a project in its home.
	useradd -m -U -s /bin/sh "$test_user" || fail "useradd $test_user"
	local home_dir project
	home_dir=$(getent passwd "$test_user" | cut -d: -f6)
	project="$home_dir/project"
	as_test_user mkdir "$project" || fail "mkdir project"
	as_test_user sh -c "echo marker-from-caller > '$project/marker'" || fail "write marker"

	# The installed daemon with the packaged config: answers a status request.
	start_daemon /etc/pando/pando-helperd.conf "$tmp/daemon-packaged.log" || fail "installed daemon with packaged config"
	as_test_user /usr/bin/pando-helper security status --socket "$tmp/helper.sock" >"$tmp/status.out" 2>&1 ||
		{ cat "$tmp/status.out" "$tmp/daemon-packaged.log" >&2; fail "status request from $test_user"; }
	stop_daemon || { cat "$tmp/daemon-packaged.log" >&2; fail "daemon did not stop cleanly on SIGTERM"; }

	# One launch per role. The packaged config runs node, which this machine
	# need not have, so here the roles run shell scripts: core sees the project
	# read-only, workspace writes to it and its file lands owned by the caller
	# (idmapped mount).
	cat >"$tmp/launch.conf" <<CONF
socket_path: "$tmp/helper.sock"
core {
  user: "pando-core"
  argv: "/bin/sh"
  argv: "-c"
  argv: "cd '{project_root}' && id -un && cat marker && if echo x > core-file 2>/dev/null; then echo core-wrote; else echo read-only; fi"
}
workspace {
  user: "pando-workspace"
  argv: "/bin/sh"
  argv: "-c"
  argv: "cd '{project_root}' && id -un && echo from-role > written-by-role && echo wrote"
}
cgroups {
  parent: "pandotest-pkg"
  allow_unlimited: true
}
CONF
	chmod 0644 "$tmp/launch.conf"
	start_daemon "$tmp/launch.conf" "$tmp/daemon-launch.log" || fail "installed daemon with launch config"
	launch core "$project" "$(printf 'pando-core\nmarker-from-caller\nread-only')"
	launch workspace "$project" "$(printf 'pando-workspace\nwrote')"
	[ "$(stat -c %U "$project/written-by-role" 2>/dev/null)" = "$test_user" ] ||
		fail "file written by the workspace role is not owned by $test_user"
	[ ! -e "$project/core-file" ] || fail "the core role could write to the project"
	stop_daemon || { cat "$tmp/daemon-launch.log" >&2; fail "daemon did not stop cleanly"; }

	# --- Purge: every file of the package is gone, the users stay.
	dpkg --purge "$pkg" >"$tmp/purge.log" 2>&1 || { cat "$tmp/purge.log" >&2; fail "dpkg --purge failed"; }
	for path in /usr/bin/pando-helper /usr/sbin/pando-helperd /usr/libexec/pando-helper \
		/etc/pando /lib/systemd/system/pando-helperd.service /lib/systemd/system/pando-helperd.socket \
		/usr/lib/sysusers.d/pando-helper.conf /usr/lib/tmpfiles.d/pando-helper.conf \
		/usr/share/doc/pando-helper /etc/systemd/system/sockets.target.wants/pando-helperd.socket; do
		if [ -e "$path" ] || [ -L "$path" ]; then fail "$path left after purge"; fi
	done
	if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -qv 'not-installed'; then
		fail "dpkg still knows $pkg after purge"
	fi
	for user in "${roles[@]}"; do
		getent passwd "$user" >/dev/null || fail "purge removed role user $user (it must keep it)"
	done
}

finish() {
	local rc=$?
	trap - EXIT
	cleanup
	if [ "$rc" = 0 ] && [ "$failed" = 0 ]; then
		echo "PASS: deb install, files, users, daemon, launch, purge, machine restored"
		exit 0
	fi
	exit 1
}
trap finish EXIT
run_checks
