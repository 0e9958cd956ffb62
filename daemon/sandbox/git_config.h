#pragma once

// Reads a git config file (the caller's, pinned read-only in the session) for
// the settings that make git load or run other files: core.hooksPath,
// include.path and includeIf.<condition>.path. Their targets inside the
// project must be pinned too, or the role edits what git runs (husky's
// `core.hooksPath = .husky/_` is the common case). Follows git-config(1):
// case-insensitive section and key names, subsections, quotes, escapes, line
// continuations, '#' and ';' comments. A value that cannot be parsed is
// skipped; git would refuse such a file.

#include <string>
#include <vector>

namespace pando::sandbox {

struct GitConfigPaths {
  std::vector<std::string> hooks_paths;    // core.hooksPath values, as written
  std::vector<std::string> include_paths;  // include.path and includeIf.*.path values
};

GitConfigPaths git_config_paths(const std::string& text);

}  // namespace pando::sandbox
