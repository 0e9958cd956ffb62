#pragma once

// The caller's own git settings that close what the sandbox cannot
// (SECURITY.md, "Persistence through the project"): git, run later by the
// caller, must not use a repository the role made in the project. Read as the
// caller, with the caller's environment, from `/` (system and global config,
// no repository's).

#include <string>
#include <vector>

namespace pando::client {

struct CallerGitCheck {
  std::string check;   // "git.safe_bare_repository", "git.ignore_submodules"
  std::string result;  // "PASS", "WARN" (the exit is open), "SKIP" (no git)
  std::string detail;
};

std::vector<CallerGitCheck> check_caller_git();

}  // namespace pando::client
