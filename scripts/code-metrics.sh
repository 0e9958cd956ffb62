#!/usr/bin/env bash
# Sizes of the hand-written production sources (daemon/ client/ proto/ common/
# probe/ gitquery/; *.cc and *.h; no tests, no generated code): the ten largest files by
# code lines (cloc) and the ten longest functions (universal-ctags: end - line
# + 1; a lambda counts as a function of its own, and its lines count in the
# enclosing function too).
#   scripts/code-metrics.sh [--check] [SOURCE_DIR]
# --check: exits 1, listing each file over 500 code lines and each function over
# 60 lines (CONTRIBUTING.md, "Size"). The test suite runs it (ctest code_metrics).
set -euo pipefail

check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  shift
fi
root=${1:-$(dirname "$0")/..}
cd "$root"

for tool in cloc ctags python3; do
  command -v "$tool" >/dev/null || {
    echo "code-metrics: $tool is missing (scripts/install-deps.sh installs it)" >&2
    exit 2
  }
done
ctags --version | grep -q '^Universal Ctags' || {
  echo "code-metrics: ctags is not universal-ctags" >&2
  exit 2
}

mapfile -t files < <(find daemon client proto common probe gitquery -type f \( -name '*.cc' -o -name '*.h' \) \
  ! -name '*.pb.*' | LC_ALL=C sort)
[ "${#files[@]}" -gt 0 ] || {
  echo "code-metrics: no sources under $(pwd)" >&2
  exit 2
}

cloc_csv=$(mktemp)
tags_json=$(mktemp)
trap 'rm -f "$cloc_csv" "$tags_json"' EXIT
# --force-lang: cloc would take a .h for C or Objective-C by its content.
cloc --quiet --csv --by-file --force-lang=C++,h "${files[@]}" >"$cloc_csv"
ctags --languages=C++ --language-force=C++ --kinds-C++=f --fields=+ne --output-format=json \
  -o - "${files[@]}" >"$tags_json"

python3 - "$check" "$cloc_csv" "$tags_json" <<'EOF'
import csv, json, sys

check = sys.argv[1] == "1"
MAX_FILE_CODE, MAX_FUNCTION = 500, 60

files = []
with open(sys.argv[2]) as f:
    for row in csv.DictReader(f):
        if row["language"] != "SUM":
            files.append((int(row["code"]), row["filename"]))

functions = []
with open(sys.argv[3]) as f:
    for line in f:
        tag = json.loads(line)
        if tag.get("_type") != "tag" or "end" not in tag:
            continue
        name = tag["name"]
        scope = tag.get("scope", "")
        if name.startswith("__anon"):
            name = "lambda in " + (scope.rsplit("::", 1)[-1] or "file scope")
        elif tag.get("scopeKind") in ("class", "struct"):
            name = scope.rsplit("::", 1)[-1] + "::" + name
        length = tag["end"] - tag["line"] + 1
        functions.append((length, f'{tag["path"]}:{tag["line"]}', name))

files.sort(key=lambda x: (-x[0], x[1]))
functions.sort(key=lambda x: (-x[0], x[1]))
print(f"Largest files (code lines, of {len(files)} files):")
for code, name in files[:10]:
    print(f"  {code:5d}  {name}")
print(f"Longest functions (lines, of {len(functions)} functions):")
for length, where, name in functions[:10]:
    print(f"  {length:5d}  {where}  {name}")

if check:
    sys.stdout.flush()
    over = [f"file over {MAX_FILE_CODE} code lines: {name} ({code})"
            for code, name in files if code > MAX_FILE_CODE]
    over += [f"function over {MAX_FUNCTION} lines: {where} {name} ({length})"
             for length, where, name in functions if length > MAX_FUNCTION]
    for line in over:
        print("code-metrics: " + line, file=sys.stderr)
    sys.exit(1 if over else 0)
EOF
