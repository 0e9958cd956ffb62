#!/usr/bin/env bash
# Installs the reference MCP filesystem server for examples/mcp-filesystem.conf,
# as root, into PREFIX (default /opt/pando-mcp-filesystem):
#   sudo scripts/install-mcp-example.sh [PREFIX]
# Exactly the versions of examples/mcp-filesystem/package-lock.json (`npm ci`
# checks every package's integrity hash), no install scripts run, nothing of the
# dev dependencies. The result is root's alone, all the way up: the daemon refuses
# runtime paths that anyone but root could change. Idempotent: an install of the
# same lock file is kept (only its ownership and modes are set again); another
# one is replaced whole, so PREFIX never holds a half-finished install.
# Needs node 20 or later at /usr/bin/node and npm (with a reachable registry).
set -euo pipefail
umask 022
cd "$(dirname "$0")/.."
source_dir=$(pwd)/examples/mcp-filesystem
prefix=${1:-/opt/pando-mcp-filesystem}

die() {
  echo "scripts/install-mcp-example.sh: $*" >&2
  exit 1
}
[ "$(id -u)" -eq 0 ] || die "run as root: the install must be root's so that the daemon accepts it"
case "$prefix" in
  /*) ;;
  *) die "PREFIX must be an absolute path: $prefix" ;;
esac
case "$prefix/" in
  *//* | */./* | */../*) die "PREFIX must be a normalized path: $prefix" ;;
esac
[ "$prefix" != / ] || die "PREFIX must not be /"
command -v npm >/dev/null || die "npm is not installed"
[ -x /usr/bin/node ] || die "/usr/bin/node is not installed (the config runs it)"

# Every existing directory on the way must be root's alone: the daemon checks the
# same before it binds PREFIX into a sandbox, and the install must not land where
# someone else could swap it. A root-owned sticky directory (/tmp) may be on the
# way, but not be PREFIX's parent (anyone could have created PREFIX first).
parent=$(dirname "$prefix")
mkdir -p "$parent"
dir=$parent
while :; do
  info=$(stat -L -c '%u %a' "$dir")
  owner=${info% *}
  mode=${info#* }
  if [ "$owner" -ne 0 ] || { [ $((8#$mode & 8#022)) -ne 0 ] &&
    { [ "$dir" = "$parent" ] || [ $((8#$mode & 8#1000)) -eq 0 ]; }; }; then
    die "$dir must be owned by root and writable only by root (owner uid $owner, mode $mode)"
  fi
  [ "$dir" != / ] || break
  dir=$(dirname "$dir")
done

lock_hash=$(sha256sum "$source_dir/package-lock.json" | cut -d' ' -f1)
stamp=.pando-lock-sha256
seal() {  # root's alone: no file or directory that anyone else could change
  chown -R -h root:root "$1"
  chmod -R go-w "$1"
}
if [ -d "$prefix" ] && [ ! -L "$prefix" ] && [ "$(cat "$prefix/$stamp" 2>/dev/null)" = "$lock_hash" ]; then
  seal "$prefix"
  echo "$prefix: already installed from this lock file"
  exit 0
fi

staging=$(mktemp -d "$parent/.$(basename "$prefix").new.XXXXXX")
old=
cleanup() {
  rm -rf "$staging"
  [ -z "$old" ] || rm -rf "$old"
}
trap cleanup EXIT
cp "$source_dir/package.json" "$source_dir/package-lock.json" "$staging/"
(cd "$staging" && npm ci --omit=dev --ignore-scripts --engine-strict --no-audit --no-fund)
echo "$lock_hash" >"$staging/$stamp"
chmod 0755 "$staging"
seal "$staging"
if [ -e "$prefix" ] || [ -L "$prefix" ]; then
  old=$(mktemp -d "$parent/.$(basename "$prefix").old.XXXXXX")
  mv -T "$prefix" "$old/tree"
fi
mv -T "$staging" "$prefix"
echo "$prefix: installed from $source_dir/package-lock.json"
