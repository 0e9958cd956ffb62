#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine, as root: installs dependencies,
# builds, creates the role users, starts pando-helperd with the bundled
# shell-demo config, and opens a sandboxed workspace session on a project
# directory as an unprivileged user (your sudo user, else the demo user
# `pando-demo`). Interactive when stdin is a terminal; otherwise it runs a
# short tour of the sandbox. The daemon is stopped when the session ends.
#   usage: sudo scripts/demo.sh [PROJECT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/demo.sh: run as root (sudo scripts/demo.sh): the daemon is a root service" >&2
  exit 2
fi
./scripts/install-deps.sh
cmake -S "$root" -B build/demo -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPANDO_TESTS=OFF >/dev/null
cmake --build build/demo

./build/demo/pando-helper security setup-users

user=${SUDO_USER:-}
if [ -z "$user" ] || [ "$user" = root ]; then
  user=pando-demo
  id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/sh "$user"
fi
home=$(getent passwd "$user" | cut -d: -f6)
project=${1:-}
if [ -z "$project" ]; then
  project=/tmp/pando-demo-project
  install -d -o "$user" -g "$(id -gn "$user")" -m 0755 "$project"
  echo "hello from the project" >"$project/README"
  echo "SECRET_TOKEN=not-for-the-agent" >"$project/.env"
  chown "$user:" "$project/README" "$project/.env"
fi

state=$(mktemp -d /tmp/pando-demo-state.XXXXXX)
chmod 0755 "$state"
sed "s|^socket_path: .*|socket_path: \"/run/pando/helper.sock\"\nsandbox_helper_path: \"$root/build/demo/pando-helper-sandbox\"|" \
  examples/shell-demo.conf >"$state/pando-helperd.conf"
chmod 0644 "$state/pando-helperd.conf"
install -m 0755 build/demo/pando-helper "$state/pando-helper"

./build/demo/pando-helperd --config "$state/pando-helperd.conf" 2>"$state/daemon.log" &
daemon=$!
cleanup() {
  kill -TERM "$daemon" 2>/dev/null || true
  wait "$daemon" 2>/dev/null || true
  rm -rf "$state"
}
trap cleanup EXIT
for _ in $(seq 100); do [ -S /run/pando/helper.sock ] && break; sleep 0.05; done

su -s /bin/sh "$user" -c "$state/pando-helper security status --project-root $project" || true
echo
echo "== sandboxed workspace session on $project as $user (role user pando-workspace)"
launch=("$state/pando-helper" security launch --role workspace --project-root "$project" --stdio)
if [ -t 0 ]; then
  echo "   you are in /bin/sh inside the sandbox; 'exit' ends the session"
  su -s /bin/sh "$user" -c "$(printf '%q ' "${launch[@]}")"
else
  su -s /bin/sh "$user" -c "$(printf '%q ' "${launch[@]}")" <<'TOUR'
echo "id:        $(id)"
echo "hostname:  $(hostname)"
echo "cwd:       $(pwd)"
echo "present:   $(for d in /usr /etc /tmp /dev /proc /home /root /var /run /sys; do [ -e "$d" ] && printf '%s ' "$d"; done)"
echo "absent:    $(for d in /usr /etc /tmp /dev /proc /home /root /var /run /sys; do [ -e "$d" ] || printf '%s ' "$d"; done)"
echo "project:   $(ls -a)"
echo ".env:      '$(cat .env)' (hidden: empty)"
echo "shadow:    $(cat /etc/shadow 2>&1)"
echo "network:   $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
echo "processes: $(ls /proc | grep -c '^[0-9]')"
echo "write:     $(echo made-in-sandbox > from-sandbox.txt && echo ok)"
grep -E '^(Cap(Eff|Bnd)|NoNewPrivs|Seccomp):' /proc/self/status
TOUR
  echo "== on the host: $(ls -l "$project/from-sandbox.txt")"
fi
