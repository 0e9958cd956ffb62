#pragma once

// What the caller's git would read as config and run as hooks for the repositories of a
// project, asked of git itself (SECURITY.md, step 12): pando-helper-git-query runs this as the
// caller, confined, and the daemon pins what it names. No config syntax is read here: git
// parses every file, and this only follows the include paths git lists, because git lists an
// include it did not follow (a condition that is false today, a file that does not exist yet)
// without reading it, and the role must not be able to write such a file either.

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "gitquery/git.h"

namespace pando::gitquery {

struct Unit {
  // A working tree (git run there, finding its repository as the caller's git would), or a
  // git directory (git run with --git-dir) that no working tree in the project uses.
  bool worktree = true;
  std::string path;  // absolute
};

struct QueryFindings {
  std::set<std::string> config_files;  // absolute, as git opens them
  std::set<std::string> hooks_dirs;    // absolute
  std::vector<std::string> errors;     // "<path>: <git's message>"
  // Every file whose change could change the answer: what git read or would read (config
  // files, includes, HEAD for an onbranch condition, the .git entries discovery looks at), and
  // git itself. The daemon keeps the answer while none of them changes.
  std::set<std::string> depends;
};

class Query {
 public:
  // `environment` is git's whole environment (HOME among it: `home`).
  Query(std::string git, std::string home, std::vector<std::string> environment);
  void run(const Unit& unit);
  const QueryFindings& findings() const { return findings_; }

 private:
  GitRun git(const std::string& directory, const std::vector<std::string>& args) const;
  void run_worktree(const std::string& path);
  void run_git_dir(const std::string& path);
  void list_config(const std::string& directory, const std::vector<std::string>& context,
                   const std::string& hooks_base);
  void take_entries(const std::vector<ConfigEntry>& entries, const std::string& directory,
                    const std::string& hooks_base);
  void follow_includes(const std::string& hooks_base);
  std::string expand(const std::string& value, const std::string& base) const;
  void refuse(const std::string& path, const GitRun& run);
  void depend_on_git_dir(const std::string& git_dir);

  const std::string git_;
  const std::string home_;
  const std::vector<std::string> environment_;
  QueryFindings findings_;
  std::set<std::string> covered_git_dirs_;
  std::set<std::string> listed_;       // config files whose entries were taken
  std::vector<std::string> includes_;  // named, not listed yet
};

}  // namespace pando::gitquery
