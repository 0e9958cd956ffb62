#pragma once

// Running the host's git and reading what it says, for pando-helper-git-query.

#include <chrono>
#include <string>
#include <vector>

namespace pando::gitquery {

struct GitRun {
  bool started = false;  // the caller could start it there (search permission, the directory)
  bool ran = false;      // exited within the time and output limits
  int exit_status = -1;  // when it ran
  std::string out;
  std::string err;
};

// Runs `git args...` in `directory` with exactly `environment`, stdin from /dev/null. Killed
// past `timeout` or past the output caps.
GitRun run_git(const std::string& git, const std::string& directory,
               const std::vector<std::string>& args, const std::vector<std::string>& environment,
               std::chrono::milliseconds timeout);

// One line of `git config --list --show-origin [--show-scope] -z`.
struct ConfigEntry {
  std::string scope;   // empty without --show-scope
  std::string origin;  // "file:<path>", "command line:", "blob:..."...
  std::string key;     // as git prints it: section and name lowercased
  std::string value;
  bool has_value = false;
};

// False when `listing` does not parse as git prints it.
bool parse_config_listing(const std::string& listing, bool with_scope,
                          std::vector<ConfigEntry>& entries);

// git's refusal to treat a directory as a repository at all, as opposed to a repository it
// cannot read (a broken config, an include loop), which it reports otherwise.
bool says_not_a_repository(const std::string& err);

}  // namespace pando::gitquery
