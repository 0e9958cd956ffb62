#!/bin/bash
# Runs inside a booted Debian root (nspawn_test.sh copies it in), as root, against the
# installed pando-helperd whose workspace role runs the line it reads with sh. For the git of
# that Debian release (11: 2.30, 12: 2.39, 13: 2.47), a table of repository layouts: in each,
# the role tries to plant a hook or a core.fsmonitor where the user's git would run it, then the
# user's git works there; a layout passes when every plant was refused and nothing planted ran.
# Two layouts git itself refuses (an include loop, includes deeper than it follows) must refuse
# the launch with git's message. Last, what a launch costs per repository: launches of `true`
# in a project with 0 and with 20 repositories.
#   git_layouts.sh USER   (PANDO_HELPER_SOCKET: another daemon's socket)
set -uo pipefail

user=${1:?usage: git_layouts.sh USER}
home=$(getent passwd "$user" | cut -d: -f6)
work=$home/layouts
marks=$home/marks
failed=0

as_user() {
	setpriv --reuid="$user" --regid="$user" --init-groups --reset-env env HOME="$home" \
		${PANDO_HELPER_SOCKET:+PANDO_HELPER_SOCKET="$PANDO_HELPER_SOCKET"} "$@"
}
git_() { as_user git -c user.name=u -c user.email=u@example.invalid -c protocol.file.allow=always "$@"; }
ok() { git_ "$@" >/dev/null 2>&1 || { echo "setup failed: git $*" >&2; exit 2; }; }
# session PROJECT LINE: a workspace session in PROJECT runs LINE; prints its output.
session() {
	printf '%s\n' "$2" | as_user pando-helper security launch --role workspace --project-root "$1" --stdio
}
row() { printf '%-32s %-8s %s\n' "$1" "$2" "$3"; }

rm -rf "$work" "$marks"
as_user mkdir -p "$work" "$marks"
echo "git: $(git --version)"
printf '%-32s %-8s %s\n' layout result detail

# --- One project holding every layout; each plant is a check "t NAME CMD".
p=$work/all
as_user mkdir "$p" "$work/src"
ok -C "$work/src" init -q && ok -C "$work/src" commit -q --allow-empty -m src
ok -C "$work/src" submodule add -q "$work/src" inner && ok -C "$work/src" commit -q -m inner
ok -C "$p" init -q && ok -C "$p" commit -q --allow-empty -m first
ok -C "$p" config core.hooksPath .husky/_
ok -C "$p" submodule add -q "$work/src" sub
ok -C "$p" submodule update -q --init --recursive
ok -C "$p" commit -q -m sub
ok -C "$p/sub" config core.hooksPath .husky/_
ok -C "$p/sub/inner" config core.hooksPath hooks-inner
ok -C "$p" worktree add -q wt
ok -C "$p" init -q --bare remote.git
ok -C "$p" remote add origin "$p/remote.git"
ok -C "$p" init -q --separate-git-dir="$p/meta.git" separate
ok -C "$p/separate" commit -q --allow-empty -m sep
ok -C "$p/separate" config core.hooksPath hooks-sep
# Includes nine deep, and each way of writing a config that a hand-made parser reads otherwise.
ok -C "$p" config --add include.path ../c1.cfg
for i in 1 2 3 4 5 6 7 8 9; do
	if [ "$i" -lt 9 ]; then printf '[include]\n\tpath = c%d.cfg\n' $((i + 1)); else printf '[user]\n\tname = deep\n'; fi |
		as_user tee "$p/c$i.cfg" >/dev/null
done
as_user mkdir "$p/d"
as_user sh -c "cd '$p/.git' && printf '\357\273\277[include]\n\tpath = t-bom.cfg\n' > bom.inc &&
	printf '[include]\r\n\tpath = t-\\\\\r\ncrlf.cfg\r\n' > crlf.inc &&
	printf '[include]\n\tpath = t-eof.cfg\\\\' > eof.inc &&
	printf '[include]\n\tpath = t\ttab.cfg\n' > tab.inc &&
	printf '[include]\n\tpath = \"\" t-quote.cfg\n' > quote.inc &&
	printf '[include]\n\tpath = t-nul.cfg\000ignored\n' > nul.inc &&
	printf '[include]\n\tpath = ../../all/t-dotdot.cfg\n' > dotdot.inc &&
	printf '[include]\n\tpath = /$p/t-slashes.cfg\n' > slashes.inc &&
	printf '[include]\n\tpath = $p/./d/../t-canon.cfg\n' > canon.inc"
for inc in bom crlf eof tab quote nul dotdot slashes canon; do ok -C "$p" config --add include.path "$inc.inc"; done

plant_hook() { echo "t $1 sh -c 'mkdir -p \"\$(dirname $2)\" && printf \"#!/bin/sh\\ntouch $marks/$1\\n\" > $2 && chmod +x $2';"; }
# Appends to $checks (not in a subshell: it records where each name was planted).
declare -A planted
plant_config() {
	planted[$1]=$2
	checks+="t $1 sh -c 'printf \"[core]\\n\\tfsmonitor = touch $marks/$1\\n\" >> \"$2\"';"
}
checks='t() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "$n yes"; else echo "$n no"; fi; };'
checks+=$(plant_hook main .husky/_/pre-commit)
checks+=$(plant_hook submodule sub/.husky/_/pre-commit)
checks+=$(plant_hook nested-submodule sub/inner/hooks-inner/pre-commit)
checks+=$(plant_hook worktree wt/.husky/_/pre-commit)
checks+=$(plant_hook bare remote.git/hooks/post-receive)
checks+=$(plant_hook separate-git-dir separate/hooks-sep/pre-commit)
plant_config gitdir-file meta.git/config
for i in 1 5 9; do plant_config "include-depth-$i" "c$i.cfg"; done
for pair in bom:.git/t-bom.cfg crlf:.git/t-crlf.cfg eof:.git/t-eof.cfg "tab:.git/t tab.cfg" \
	quote:.git/t-quote.cfg nul:.git/t-nul.cfg dotdot:t-dotdot.cfg slashes:t-slashes.cfg \
	noncanonical:t-canon.cfg; do
	plant_config "parser-${pair%%:*}" "${pair#*:}"
done
# The same include as git 2.47 and later read it: the tab kept.
plant_config parser-tab-kept ".git/t"$'\t'"tab.cfg"
out=$(session "$p" "$checks echo done" 2>&1)
[ "${out##*$'\n'}" = done ] || { echo "$out" >&2; echo "the launch in $p failed" >&2; exit 1; }
# The user's git, where each plant would run.
for dir in "$p" "$p/sub" "$p/sub/inner" "$p/wt" "$p/separate"; do
	git_ -C "$dir" status --porcelain >/dev/null 2>&1
	git_ -C "$dir" commit -q --allow-empty -m after >/dev/null 2>&1
done
git_ -C "$p" push -q origin HEAD >/dev/null 2>&1
# Files git reads, by its own list: a parser case is spelled for the git that reads it so, and
# another release may read another name (2.47 keeps a tab in a value that 2.39 made a space).
# Its paths are relative to the repository's directory, as git opened them.
read_by_git=$(git_ -C "$p" config --list --show-origin -z 2>/dev/null | tr '\0' '\n' |
	sed -n 's/^file://p' | sort -u | while IFS= read -r file; do (cd "$p" && realpath -m -- "$file"); done)
while read -r name answer; do
	[ "$name" = done ] && continue
	if [ "$answer" = no ] && [ ! -e "$marks/$name" ]; then
		row "$name" pass "write refused"
	elif [[ "$name" == parser-* && ! -e "$marks/$name" ]] &&
		! grep -qxF "$(cd "$p" && realpath -m -- "${planted[$name]}")" <<<"$read_by_git"; then
		row "$name" pass "this git reads no file ${planted[$name]}: nothing to pin"
	else
		row "$name" FAIL "role wrote it: $answer; planted code ran: $([ -e "$marks/$name" ] && echo yes || echo no)"
		failed=1
	fi
done <<<"$out"
leftover=$(ls -A "$marks")
[ -z "$leftover" ] || { row "(marks)" FAIL "$leftover"; failed=1; }

# --- What git refuses, the launch refuses, with git's message.
refused() {
	local name=$1 project=$2 out
	out=$(session "$project" "echo launched" 2>&1)
	if [[ "$out" == *ERROR_GIT_REFUSED*"exceeded maximum include depth"* ]]; then
		row "$name" pass "refused with git's message"
	else
		row "$name" FAIL "$out"
		failed=1
	fi
}
as_user mkdir "$work/loop" "$work/deep"
ok -C "$work/loop" init -q
for _ in $(seq 100); do printf '[include]\n\tpath = x\n'; done | as_user tee "$work/loop/.git/x" >/dev/null
ok -C "$work/loop" config include.path x
refused include-loop "$work/loop"
ok -C "$work/deep" init -q
ok -C "$work/deep" config include.path ../e1.cfg
for i in $(seq 1 11); do printf '[include]\n\tpath = e%d.cfg\n' $((i + 1)) | as_user tee "$work/deep/e$i.cfg" >/dev/null; done
refused include-depth-11 "$work/deep"

# --- Cost per repository: launches of `true` with 0 and 20 repositories (median of 5).
median_ms() {
	local project=$1 i start end times=()
	session "$project" true >/dev/null 2>&1
	for i in 1 2 3 4 5; do
		start=$(date +%s%N)
		session "$project" true >/dev/null 2>&1
		end=$(date +%s%N)
		times+=($(((end - start) / 1000)))
	done
	printf '%s\n' "${times[@]}" | sort -n | sed -n 3p
}
as_user mkdir "$work/none" "$work/twenty"
ok -C "$work/none" init -q
ok -C "$work/twenty" init -q
for i in $(seq 1 20); do as_user mkdir "$work/twenty/r$i" && ok -C "$work/twenty/r$i" init -q; done
none=$(median_ms "$work/none")
twenty=$(median_ms "$work/twenty")
echo "launch of true: 1 repository $((none / 1000)).$((none % 1000 / 100)) ms," \
	"21 repositories $((twenty / 1000)).$((twenty % 1000 / 100)) ms:" \
	"$(((twenty - none) / 20)) us per repository"
rm -rf "$work" "$marks"
exit "$failed"
