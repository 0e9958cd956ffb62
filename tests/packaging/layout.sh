# Expected package layout, shared by the .deb and .rpm checks: "mode path".
# UNITDIR is /lib/systemd/system in the .deb and /usr/lib/systemd/system in the
# .rpm (Debian 12 vs. merged-/usr RPM distributions).
expected_layout() {
	local unitdir=$1
	cat <<LIST
-rw-r--r-- /etc/pando/pando-helperd.conf
-rwxr-xr-x /usr/bin/pando-helper
-rwxr-xr-x /usr/sbin/pando-helperd
-rwxr-xr-x /usr/libexec/pando-helper/pando-helper-git-query
-rwxr-xr-x /usr/libexec/pando-helper/pando-helper-probe
-rwxr-xr-x /usr/libexec/pando-helper/pando-helper-sandbox
-rw-r--r-- $unitdir/pando-helperd.service
-rw-r--r-- $unitdir/pando-helperd.socket
-rw-r--r-- /usr/lib/sysusers.d/pando-helper.conf
-rw-r--r-- /usr/lib/tmpfiles.d/pando-helper.conf
-rw-r--r-- /usr/share/man/man1/pando-helper.1.gz
-rw-r--r-- /usr/share/man/man5/pando-helperd.conf.5.gz
-rw-r--r-- /usr/share/man/man8/pando-helperd.8.gz
LIST
}

# Reads "mode owner path" lines on stdin; fails on a wrong owner, a set-id or
# sticky bit, a missing expected file, or a file that is neither expected nor
# documentation. Extra allowed prefixes (one regex) come as $2.
check_layout() {
	local unitdir=$1 allowed=$2 listing expected mode path owner
	listing=$(cat)
	while read -r mode owner path; do
		[ "$owner" = root/root ] || { echo "FAIL: $path is owned by $owner" >&2; return 1; }
		case "$mode" in
		*[sStT]*) echo "FAIL: $path has a set-id or sticky bit ($mode)" >&2; return 1 ;;
		d*) [ "$mode" = drwxr-xr-x ] || { echo "FAIL: directory $path is $mode" >&2; return 1; } ;;
		-*)
			expected=$(expected_layout "$unitdir" | awk -v p="$path" '$2 == p { print $1 }')
			if [ -n "$expected" ]; then
				[ "$mode" = "$expected" ] || { echo "FAIL: $path is $mode, want $expected" >&2; return 1; }
			elif [[ "$path" =~ ^/usr/share/doc/pando-helper/ ]] || [[ -n "$allowed" && "$path" =~ $allowed ]]; then
				[ "$mode" = -rw-r--r-- ] || { echo "FAIL: $path is $mode" >&2; return 1; }
			else
				echo "FAIL: unexpected file $path" >&2
				return 1
			fi
			;;
		l*) [[ -n "$allowed" && "$path" =~ $allowed ]] || { echo "FAIL: unexpected link $path" >&2; return 1; } ;;
		*) echo "FAIL: unexpected entry $mode $path" >&2; return 1 ;;
		esac
	done <<<"$listing"
	while read -r mode path; do
		grep -qE "^-[^ ]* root/root $path\$" <<<"$listing" || { echo "FAIL: $path missing" >&2; return 1; }
	done < <(expected_layout "$unitdir")
}
