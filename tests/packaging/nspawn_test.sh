#!/bin/bash
# Boots a real systemd (PID 1 of a systemd-nspawn container running Debian
# SUITE), installs the built .deb there with apt, and checks the packaged
# service under its own unit: socket activation, the confinement layers the
# daemon reports, a workspace launch by an unprivileged user whose file lands
# owned by that user, a restart, an upgrade to a second .deb of a higher
# version (an edited conffile survives, the new daemon runs), remove and purge.
#   nspawn_test.sh OUT_DIR SUITE [UPGRADE_OUT_DIR]
# OUT_DIR holds the one pando-helper_*.deb to test. UPGRADE_OUT_DIR holds the
# one .deb to upgrade to, of a higher version; without it the script makes one
# with tests/packaging/upgrade_deb.sh (the same .deb, version <version>+nspawn1)
# in its temporary directory.
#
# The Debian root comes from debootstrap (network: the Debian mirror) on first
# use and is cached as a tarball in /var/cache/pando-helper-tests/nspawn/SUITE
# (PANDO_NSPAWN_CACHE overrides the parent directory); every run boots a fresh
# copy in a temporary directory and removes it. The user "alice" and everything
# else the test makes exist only inside that copy. Runs as root; the host needs
# systemd-nspawn (systemd-container) and debootstrap, installed when missing,
# but not systemd as PID 1.
set -euo pipefail

out=${1:?usage: nspawn_test.sh OUT_DIR SUITE [UPGRADE_OUT_DIR]}
suite=${2:?usage: nspawn_test.sh OUT_DIR SUITE [UPGRADE_OUT_DIR]}
upgrade_out=${3:-}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pkg=pando-helper
mirror=${PANDO_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache_dir=${PANDO_NSPAWN_CACHE:-/var/cache/pando-helper-tests/nspawn}/$suite
user=alice
project=/home/$user/proj
conf=/etc/pando/pando-helperd.conf

tmp=
cache_build=
debootstrap_pid=
by_hand_nsenter=
root_inode=
leftovers_before=
nspawn_pid=
init_pid=

fail() {
	echo "FAIL: $*" >&2
	exit 1
}
# A failure after which the remaining checks still say something: reported at
# once and again at the end, where it fails the test.
failures=()
fail_later() {
	echo "FAIL: $*" >&2
	failures+=("$*")
}

# --- Phase timing: each phase prints how long it took, and the end a summary.
phase_name=
phase_start=
timings=()
phase() {
	local now
	now=$(date +%s)
	if [ -n "$phase_name" ]; then
		timings+=("$(printf '%-34s %4d s' "$phase_name" $((now - phase_start)))")
		echo "== phase '$phase_name' took $((now - phase_start)) s"
	fi
	phase_name=${1:-}
	phase_start=$now
	if [ -n "$phase_name" ]; then echo "== phase '$phase_name'"; fi
}

[ "$(id -u)" = 0 ] || fail "must run as root"
shopt -s nullglob
one_deb() {
	local debs=("$1"/${pkg}_*.deb)
	[ "${#debs[@]}" = 1 ] || fail "expected one .deb in $1, found ${#debs[@]}"
	echo "${debs[0]}"
}
deb=$(one_deb "$out")
shopt -u nullglob

# --- Cleanup: always powers off (or kills) the container and removes the copy.
stop_container() {
	[ -n "$nspawn_pid" ] || return 0
	local i
	if kill -0 "$nspawn_pid" 2>/dev/null && [ -n "$init_pid" ]; then
		timeout 30 nsenter -t "$init_pid" -a -- /bin/systemctl --no-block poweroff >/dev/null 2>&1 || true
		for i in $(seq 1 600); do
			kill -0 "$nspawn_pid" 2>/dev/null || break
			sleep 0.1
		done
	fi
	local killed=0
	if kill -0 "$nspawn_pid" 2>/dev/null; then
		echo "container did not power off within 60 s: killing it" >&2
		killed=1
		# SIGKILL to a PID namespace's init kills every process in it.
		if [ -n "$init_pid" ]; then kill -KILL "$init_pid" 2>/dev/null || true; fi
		for i in $(seq 1 100); do
			kill -0 "$nspawn_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$nspawn_pid" 2>/dev/null || true
	fi
	wait "$nspawn_pid" 2>/dev/null || true
	nspawn_pid=
	init_pid=
	return "$killed"
}
# remove_tree DIR: removes DIR, but only when nothing is mounted below it
# (debootstrap mounts /proc and /sys in its target while it runs).
remove_tree() {
	local mounts
	mounts=$(awk -v d="$1/" 'substr($5, 1, length(d)) == d { print $5 }' /proc/self/mountinfo | sort -r)
	if [ -n "$mounts" ]; then
		echo "unmounting what is left below $1: $mounts" >&2
		xargs -r umount -l <<<"$mounts"
	fi
	if awk -v d="$1/" 'substr($5, 1, length(d)) == d { found = 1 } END { exit !found }' /proc/self/mountinfo; then
		echo "FAIL: mounts left below $1; not removing it" >&2
		return 1
	fi
	rm -rf --one-file-system "$1"
	if [ -e "$1" ]; then
		echo "FAIL: could not remove $1" >&2
		return 1
	fi
}
# Stops the daemon started by hand in the container (bounded, then SIGKILL).
stop_by_hand() {
	[ -n "$by_hand_nsenter" ] || return 0
	local i daemon
	daemon=$(cat /proc/"$by_hand_nsenter"/task/*/children 2>/dev/null || true)
	if [ -n "$daemon" ]; then kill -TERM $daemon 2>/dev/null || true; fi
	for i in $(seq 1 100); do
		kill -0 "$by_hand_nsenter" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$by_hand_nsenter" 2>/dev/null; then
		echo "the daemon started by hand did not stop within 10 s: killing it" >&2
		if [ -n "$daemon" ]; then kill -KILL $daemon 2>/dev/null || true; fi
	fi
	wait "$by_hand_nsenter" 2>/dev/null || true
	by_hand_nsenter=
}
# What systemd-nspawn leaves on the host after its container stopped:
# "payload" and "supervisor" cgroups below its own cgroup (it runs with
# --keep-unit, in this script's cgroup) on the unified and name=systemd
# hierarchies, and a lock file named after the root directory's inode.
nspawn_leftovers() {
	local hierarchy path base leaf
	while IFS=: read -r _ hierarchy path; do
		case "$hierarchy" in
		"") set -- /sys/fs/cgroup /sys/fs/cgroup/unified ;;
		name=systemd) set -- /sys/fs/cgroup/systemd ;;
		*) continue ;;
		esac
		for base in "$@"; do
			[ "$(stat -f -c %T "$base" 2>/dev/null)" != tmpfs ] || continue
			for leaf in payload supervisor; do
				if [ -d "$base${path%/}/$leaf" ]; then echo "$base${path%/}/$leaf"; fi
			done
		done
	done </proc/self/cgroup
	if [ -e "/run/systemd/nspawn/locks/inode-$root_inode" ]; then echo "/run/systemd/nspawn/locks/inode-$root_inode"; fi
}
remove_nspawn_leftovers() {
	local left=0 path
	while read -r path; do
		grep -qxF "$path" <<<"$leftovers_before" && continue
		if [ -d "$path" ]; then
			find "$path" -depth -type d -exec rmdir {} + || left=1
		else
			rm -f "$path" || left=1
		fi
	done < <(nspawn_leftovers)
	[ "$left" = 0 ] || echo "FAIL: could not remove what systemd-nspawn left on the host" >&2
	return "$left"
}
cleanup() {
	local rc=$?
	trap - EXIT
	set +e
	stop_by_hand
	stop_container || true
	if [ -n "$root_inode" ]; then remove_nspawn_leftovers || rc=1; fi
	if [ -n "$debootstrap_pid" ]; then
		kill -TERM "$debootstrap_pid" 2>/dev/null
		wait "$debootstrap_pid" 2>/dev/null
	fi
	if [ -n "$cache_build" ]; then remove_tree "$cache_build" || rc=1; fi
	if [ -n "$tmp" ]; then remove_tree "$tmp" || rc=1; fi
	phase
	if [ "${#timings[@]}" -gt 0 ]; then
		echo "== timings ($suite):"
		printf '   %s\n' "${timings[@]}"
	fi
	if [ "${#failures[@]}" -gt 0 ]; then
		echo "FAIL: ${#failures[@]} check(s) failed:" >&2
		printf '   %s\n' "${failures[@]}" >&2
		rc=1
	fi
	if [ "$rc" = 0 ]; then
		echo "PASS: $suite under systemd: install, socket activation, layers, launch, restart, upgrade, purge"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

phase "host tools"
missing=()
command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ "${#missing[@]}" -gt 0 ]; then
	echo "installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
tmp=$(mktemp -d /tmp/pandotest-nspawn-XXXXXX)
root=$tmp/root

# --- The Debian root: made once per suite, then extracted from the cache. It
# is built beside the cache directory and renamed into place when complete,
# so an interrupted or concurrent run never leaves a half-made cache.
if [ -f "$cache_dir/root.tar" ]; then
	phase "root from cache"
	echo "using the cached $suite root $cache_dir/root.tar"
else
	phase "debootstrap $suite (download)"
	mkdir -p "$(dirname "$cache_dir")"
	cache_build=$(mktemp -d "$cache_dir.build-XXXXXX")
	debootstrap --variant=minbase \
		--include=systemd,systemd-sysv,dbus,passwd,util-linux,ca-certificates \
		"$suite" "$cache_build/root" "$mirror" >"$cache_build/debootstrap.log" 2>&1 &
	debootstrap_pid=$!
	if ! wait "$debootstrap_pid"; then
		debootstrap_pid=
		tail -n 30 "$cache_build/debootstrap.log" >&2
		fail "debootstrap $suite from $mirror"
	fi
	debootstrap_pid=
	tar -C "$cache_build/root" --numeric-owner --xattrs --acls -cf "$cache_build/root.tar" .
	remove_tree "$cache_build/root"
	printf 'debootstrap --variant=minbase %s from %s on %s\n' "$suite" "$mirror" "$(date -u +%FT%TZ)" \
		>"$cache_build/README"
	chmod 0755 "$cache_build"
	if mv -T "$cache_build" "$cache_dir" 2>/dev/null; then
		cache_build=
	else
		echo "another run cached $suite meanwhile; using that one"
	fi
	phase "root from cache"
fi
mkdir "$root"
tar -C "$root" --numeric-owner --xattrs --acls -xf "$cache_dir/root.tar"

# --- Boot. The container shares the host's network; resolv.conf is copied in.
# Its systemd must start like a host's: all capabilities (systemd-nspawn keeps
# e.g. CAP_NET_ADMIN, which the unit grants the daemon, out of the container's
# bounding set) and no seccomp filter of systemd-nspawn's own (its allow-list
# makes the Landlock calls fail with EPERM for everything below the
# container's PID 1). What the unit itself takes away is then what the daemon
# lacks.
phase "boot"
root_inode=$(stat -c %d:%i "$root")
leftovers_before=$(nspawn_leftovers)
SYSTEMD_SECCOMP=0 systemd-nspawn -q -D "$root" -b --register=no --keep-unit --console=pipe \
	--capability=all --resolv-conf=copy-host </dev/null >"$tmp/console.log" 2>&1 &
nspawn_pid=$!
for i in $(seq 1 300); do
	for child in $(cat /proc/"$nspawn_pid"/task/*/children 2>/dev/null); do
		if [ "$(cat /proc/"$child"/comm 2>/dev/null)" = systemd ]; then init_pid=$child; fi
	done
	[ -z "$init_pid" ] || break
	kill -0 "$nspawn_pid" 2>/dev/null || { cat "$tmp/console.log" >&2; fail "systemd-nspawn exited"; }
	sleep 0.1
done
[ -n "$init_pid" ] || { cat "$tmp/console.log" >&2; fail "no systemd in the container after 30 s"; }
echo "container's systemd: host pid $init_pid," \
	"$(sed -n 's/^\(Seccomp_filters\|CapBnd\):\t/\1 /p' "/proc/$init_pid/status" | xargs)"

# inside CMD...: runs CMD in the container (all its namespaces) as root, with a
# clean environment.
inside() {
	nsenter -t "$init_pid" -a -- /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
		DEBIAN_FRONTEND=noninteractive "$@"
}
# as_user CMD...: the same as the unprivileged test user, from its home.
as_user() {
	inside /usr/bin/setpriv --reuid="$user" --regid="$user" --init-groups --reset-env \
		/bin/sh -c 'cd && exec "$@"' sh "$@"
}

state=
for i in $(seq 1 60); do
	state=$(timeout 10 nsenter -t "$init_pid" -a -- /bin/systemctl is-system-running --wait 2>/dev/null) || true
	case "$state" in running | degraded) break ;; esac
	kill -0 "$nspawn_pid" 2>/dev/null || { cat "$tmp/console.log" >&2; fail "the container stopped while booting"; }
	sleep 1
done
case "$state" in
running) echo "systemd in the container: running" ;;
degraded)
	echo "systemd in the container: degraded (failed units below are the container's, not this package's)"
	inside systemctl --failed --no-legend --plain || true
	;;
*)
	cat "$tmp/console.log" >&2
	fail "systemd in the container did not finish booting (state: ${state:-none})"
	;;
esac
inside systemctl --version | sed -n 1p

# --- Install with apt; dependencies come from the Debian mirror.
phase "apt install"
mkdir -p "$root/root/debs"
cp "$deb" "$root/root/debs/"
inside apt-get update -qq >"$tmp/apt-update.log" 2>&1 || { cat "$tmp/apt-update.log" >&2; fail "apt-get update in the container"; }
inside sh -c 'cd /root/debs && apt-get install -y -q ./'"$(basename "$deb")" >"$tmp/apt-install.log" 2>&1 ||
	{ cat "$tmp/apt-install.log" >&2; fail "apt-get install of $(basename "$deb") in the container"; }
version1=$(inside dpkg-query -W -f='${Version}' "$pkg")
echo "installed $pkg $version1"

phase "socket activation, layers"
[ "$(inside systemctl is-enabled pando-helperd.socket)" = enabled ] || fail "pando-helperd.socket is not enabled"
[ "$(inside systemctl is-active pando-helperd.socket)" = active ] || fail "pando-helperd.socket is not active"
service_state=$(inside systemctl is-active pando-helperd.service || true)
[ "$service_state" = inactive ] || fail "pando-helperd.service is $service_state before any connection (want inactive)"
echo "socket active, service inactive until the first connection"

inside useradd -m -U -s /bin/sh "$user"
as_user mkdir "$project"

# status_layers FILE: "name available|unavailable" per layer from status output.
status_layers() {
	sed -n 's/^layer \([a-z_]*\): \([a-z]*\).*/\1 \2/p' "$1"
}
# The first connection starts the service with the packaged configuration.
as_user pando-helper security status --project-root "$project" >"$tmp/status-unit.out" 2>&1 ||
	{ cat "$tmp/status-unit.out" >&2; inside journalctl -u pando-helperd.service --no-pager >&2; fail "security status as $user"; }
[ "$(inside systemctl is-active pando-helperd.service)" = active ] || fail "the service did not start on the first connection"
echo "security status as $user, daemon under its unit:"
sed 's/^/   /' "$tmp/status-unit.out"

# The same binary and configuration started by hand in the container, outside
# the unit: every layer available there must be available under the unit too.
# nsenter forks into the container's PID namespace: its child is the daemon.
nsenter -t "$init_pid" -a -- /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /usr/sbin/pando-helperd \
	--config "$conf" --socket /run/pando-by-hand.sock --foreground </dev/null 2>"$tmp/by-hand.log" &
by_hand_nsenter=$!
for i in $(seq 1 100); do
	inside test -S /run/pando-by-hand.sock && break
	kill -0 "$by_hand_nsenter" 2>/dev/null || break
	sleep 0.1
done
by_hand_rc=0
as_user pando-helper security status --project-root "$project" --socket /run/pando-by-hand.sock \
	>"$tmp/status-by-hand.out" 2>&1 || by_hand_rc=$?
stop_by_hand
[ "$by_hand_rc" = 0 ] || { cat "$tmp/status-by-hand.out" "$tmp/by-hand.log" >&2; fail "status from the daemon started by hand"; }
echo "the same daemon started by hand in the container (no unit) reports:"
sed 's/^/   /' "$tmp/status-by-hand.out"
lost=$(LC_ALL=C comm -23 <(status_layers "$tmp/status-by-hand.out" | awk '$2 == "available"' | sort) \
	<(status_layers "$tmp/status-unit.out" | awk '$2 == "available"' | sort))
[ -z "$lost" ] || fail "layers available by hand but not under the unit: $lost"

for layer in namespaces seccomp landlock idmapped_mounts; do
	grep -q "^$layer available$" <(status_layers "$tmp/status-unit.out") ||
		fail "layer $layer is not available under the unit"
done
echo "layers available under the unit: $(status_layers "$tmp/status-unit.out" | awk '$2 == "available" { print $1 }' | xargs)"
cgroups_line=$(grep '^layer cgroups:' "$tmp/status-unit.out" || true)
allow_unlimited=false
if ! grep -q '^layer cgroups: available' <<<"$cgroups_line"; then
	allow_unlimited=true
	echo "NOTE: the cgroups layer is unavailable in this container ($cgroups_line);"
	echo "      the test config sets cgroups { allow_unlimited: true } so launches run without"
	echo "      cgroup limits here. Sessions in this test are NOT resource-limited."
fi

# --- A workspace launch. The packaged roles run node, which a minimal Debian
# lacks: the conffile is edited so the workspace role runs /bin/sh.
phase "launch"
cat >"$root$conf" <<CONF
# nspawn_test.sh: the roles run /bin/sh instead of the packaged node commands.
max_sessions: 64
max_sessions_per_uid: 16
handshake_timeout_ms: 5000
prestarted_sandboxes: 2
log_level: "info"
core {
  user: "pando-core"
  argv: "/bin/sh"
  argv: "-c"
  argv: "cd '{project_root}' && id -un"
}
workspace {
  user: "pando-workspace"
  argv: "/bin/sh"
  argv: "-c"
  argv: "cd '{project_root}' && id -un && read -r name && echo from-role > \"\$name\" && echo wrote"
}
cgroups {
  allow_unlimited: $allow_unlimited
}
CONF
inside systemctl stop pando-helperd.service >/dev/null 2>&1 || fail "systemctl stop pando-helperd.service"

# launch NAME: a workspace session as the test user writes NAME (its first
# line of input) in the project; the file must land owned by the user.
launch() {
	local name=$1 rc=0
	echo "$name" >"$tmp/launch.in"
	as_user pando-helper security launch --role workspace --project-root "$project" --stdio \
		<"$tmp/launch.in" >"$tmp/launch.out" 2>"$tmp/launch.err" || rc=$?
	if [ "$rc" != 0 ] || [ "$(cat "$tmp/launch.out")" != "$(printf 'pando-workspace\nwrote')" ]; then
		echo "launch: exit $rc; stdout:" >&2
		cat "$tmp/launch.out" >&2
		echo "stderr:" >&2
		cat "$tmp/launch.err" >&2
		echo "the project on disk:" >&2
		inside ls -laRn "$project" >&2 || true
		echo "journal of pando-helperd.service:" >&2
		inside journalctl -u pando-helperd.service --no-pager -n 50 >&2 || true
		fail "workspace launch as $user ($name)"
	fi
	local owner
	owner=$(inside stat -c %U "$project/$name")
	[ "$owner" = "$user" ] || fail "$project/$name written by the workspace role is owned by $owner, not $user"
	echo "launch as $user: $project/$name written by pando-workspace, owned by $owner on disk"
	# The session's mounts belong to its own mount namespace. Under systemd
	# every mount is shared (systemd makes / MS_SHARED at boot), so a mount
	# made before the session's namespace was made private propagates to
	# the host. Leaked mounts are reported, then detached so the checks
	# after this one still run.
	local leaked
	leaked=$(awk -v p="$project" '$5 == p || substr($5, 1, length(p) + 1) == p "/"' \
		"/proc/$init_pid/mountinfo")
	if [ -n "$leaked" ]; then
		fail_later "after the launch ($name), the session's mounts are in the host's mount namespace"
		sed 's/^/   /' <<<"$leaked" >&2
		awk '{ print $5 }' <<<"$leaked" | sort -r | while read -r target; do
			inside umount -l "$target" 2>/dev/null || true
		done
	fi
}
launch after-install

# --- Restart both units; the next connection launches again.
phase "restart"
pid_before=$(inside systemctl show -P MainPID pando-helperd.service)
inside systemctl restart pando-helperd.socket pando-helperd.service
[ "$(inside systemctl is-active pando-helperd.socket)" = active ] || fail "pando-helperd.socket is not active after the restart"
launch after-restart
pid_after=$(inside systemctl show -P MainPID pando-helperd.service)
[ "$pid_after" != 0 ] && [ "$pid_after" != "$pid_before" ] ||
	fail "the service's main pid is $pid_after after the restart (before: $pid_before)"
echo "restarted: daemon pid $pid_before -> $pid_after"

# --- The git of this release against every repository layout the project exits cover:
# git_layouts.sh plants hooks and fsmonitors where the user's git would run them, and must
# find each refused (SECURITY.md, "Persistence through the project"). The workspace role runs
# the line it reads for this phase; the launch configuration comes back after it.
phase "git layouts"
launch_conf=$(cat "$root$conf")
cat >"$root$conf" <<CONF
# nspawn_test.sh: the workspace role runs the line it reads (git_layouts.sh).
log_level: "info"
core {
  user: "pando-core"
  argv: "/bin/true"
}
workspace {
  user: "pando-workspace"
  argv: "/bin/sh"
  argv: "-c"
  argv: "IFS= read -r cmd && eval \"\$cmd\""
}
cgroups {
  allow_unlimited: $allow_unlimited
}
CONF
inside systemctl stop pando-helperd.service >/dev/null 2>&1 || fail "systemctl stop pando-helperd.service"
inside sh -c 'command -v git >/dev/null || apt-get install -y -q git' >"$tmp/apt-git.log" 2>&1 ||
	{ cat "$tmp/apt-git.log" >&2; fail "apt-get install git in the container"; }
cp "$src/tests/packaging/git_layouts.sh" "$root/root/git_layouts.sh"
if inside /bin/bash /root/git_layouts.sh "$user" >"$tmp/git-layouts.log" 2>&1; then
	sed 's/^/   /' "$tmp/git-layouts.log"
else
	sed 's/^/   /' "$tmp/git-layouts.log" >&2
	inside journalctl -u pando-helperd.service --no-pager -n 30 >&2 || true
	fail_later "git layouts with $suite's git"
fi
printf '%s\n' "$launch_conf" >"$root$conf"
inside systemctl stop pando-helperd.service >/dev/null 2>&1 || fail "systemctl stop pando-helperd.service"

# --- Upgrade to the second .deb. The conffile is edited first; the package's
# version of it is the same in both .debs, which is the usual upgrade, and then
# dpkg keeps the admin's file without asking.
phase "upgrade"
if [ -z "$upgrade_out" ]; then
	upgrade_out=$tmp/upgrade-out
	"$src/tests/packaging/upgrade_deb.sh" "$out" "$version1+nspawn1" "$upgrade_out" >/dev/null ||
		fail "making the upgrade .deb"
fi
deb2=$(one_deb "$upgrade_out")
version2=$(dpkg-deb -f "$deb2" Version)
dpkg --compare-versions "$version2" gt "$version1" || fail "$deb2 ($version2) is not newer than $version1"
# From the payload: debhelper's md5sums leave conffiles out (dpkg records
# their hashes itself).
conffile_hash() { dpkg-deb --fsys-tarfile "$1" | tar -xOf - "./${conf#/}" | md5sum | cut -d' ' -f1; }
hash1=$(conffile_hash "$deb")
[ -n "$hash1" ] && [ "$hash1" = "$(conffile_hash "$deb2")" ] || fail "the two .debs ship different $conf"
marker="# nspawn_test.sh: local edit that must survive the upgrade"
echo "$marker" >>"$root$conf"
edited=$(md5sum <"$root$conf")
pid_before=$(inside systemctl show -P MainPID pando-helperd.service)
cp "$deb2" "$root/root/debs/"
inside sh -c 'cd /root/debs && apt-get install -y -q ./'"$(basename "$deb2")" >"$tmp/apt-upgrade.log" 2>&1 ||
	{ cat "$tmp/apt-upgrade.log" >&2; fail "apt-get install of $(basename "$deb2") in the container"; }
[ "$(inside dpkg-query -W -f='${Version}' "$pkg")" = "$version2" ] || fail "$pkg $version2 is not the installed version"
[ "$(md5sum <"$root$conf")" = "$edited" ] || fail "the upgrade changed the edited $conf"
leftovers=$(inside find /etc/pando -name '*.dpkg-*')
[ -z "$leftovers" ] || fail "the upgrade left $leftovers"
echo "upgraded $version1 -> $version2; the edited $conf was kept as it was"
launch after-upgrade
pid_after=$(inside systemctl show -P MainPID pando-helperd.service)
[ "$pid_after" != 0 ] && [ "$pid_after" != "$pid_before" ] ||
	fail "the daemon was not restarted by the upgrade (main pid $pid_after, before $pid_before)"
# The running daemon is the installed file, not the replaced (deleted) one.
[ "$(inside stat -L -c %d:%i "/proc/$pid_after/exe")" = "$(inside stat -c %d:%i /usr/sbin/pando-helperd)" ] ||
	fail "the running daemon ($(inside readlink "/proc/$pid_after/exe")) is not the installed /usr/sbin/pando-helperd"
echo "the daemon running after the upgrade (pid $pid_after) is the upgraded /usr/sbin/pando-helperd"

# --- Remove, then purge: nothing of the package may be left running or on disk.
phase "remove, purge"
# container_pids: "pid comm user" of every process in the container (host pids).
container_pids() {
	local ns p
	ns=$(readlink "/proc/$init_pid/ns/pid")
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/ns/pid" 2>/dev/null)" = "$ns" ] || continue
		echo "${p#/proc/} $(cat "$p/comm" 2>/dev/null) $(stat -c %u "$p" 2>/dev/null)"
	done
}
role_uids=$(inside sh -c 'id -u pando-core; id -u pando-workspace' | xargs | tr ' ' '|')
no_pando_processes() {
	local left
	left=$(container_pids | awk -v uids="^($role_uids)\$" '$2 ~ /^pando-helper/ || $3 ~ uids')
	[ -z "$left" ] || fail "pando processes left after $1: $left"
}
inside apt-get remove -y -q "$pkg" >"$tmp/apt-remove.log" 2>&1 || { cat "$tmp/apt-remove.log" >&2; fail "apt-get remove"; }
for unit in pando-helperd.socket pando-helperd.service; do
	unit_state=$(inside systemctl is-active "$unit" || true)
	[ "$unit_state" = inactive ] || fail "$unit is $unit_state after remove"
done
no_pando_processes remove
for path in /lib/systemd/system/pando-helperd.service /lib/systemd/system/pando-helperd.socket \
	/run/pando/helper.sock /usr/sbin/pando-helperd; do
	if inside test -e "$path"; then fail "$path left after remove"; fi
done
inside test -f "$conf" || fail "remove deleted $conf (only purge may)"
inside apt-get purge -y -q "$pkg" >"$tmp/apt-purge.log" 2>&1 || { cat "$tmp/apt-purge.log" >&2; fail "apt-get purge"; }
no_pando_processes purge
for path in /etc/pando /lib/systemd/system/pando-helperd.service /lib/systemd/system/pando-helperd.socket \
	/etc/systemd/system/sockets.target.wants/pando-helperd.socket /run/pando/helper.sock; do
	if inside test -e "$path" || inside test -L "$path"; then fail "$path left after purge"; fi
done
units=$(inside systemctl list-unit-files --no-legend 'pando-helperd*' || true)
[ -z "$units" ] || fail "systemd still knows unit files after purge: $units"
loaded=$(inside systemctl list-units --all --no-legend 'pando-helperd*' || true)
[ -z "$loaded" ] || fail "systemd still has units loaded after purge: $loaded"
echo "removed and purged: no unit, no socket, no /etc/pando, no pando process"

phase "power off"
stop_container || fail_later "the container did not power off by itself"
