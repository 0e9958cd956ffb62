#pragma once

// The daemon's side of pando-helper-git-query (gitquery/main.cc): what the caller's own git
// reads as config and runs as hooks for the repositories of a project, asked of git itself,
// never parsed here (SECURITY.md, step 12). The program runs as the caller, never as root,
// confined like a session: new pid, network, IPC and UTS namespaces, no capabilities,
// no_new_privs, the sessions' seccomp filter, read-only Landlock, rlimits, a fixed
// environment, a time limit and a cap on what it may answer.

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/peer_identity.h"

namespace pando::daemon {

// Paths relative to the project root, normalized.
struct GitAnswer {
  std::vector<std::string> config_files;    // pin read-only, made empty when missing
  std::vector<std::string> hooks_dirs;      // pin read-only, made when missing
  std::vector<std::string> passed_through;  // missing directories a named path runs through
  std::vector<std::pair<std::string, std::string>> links;  // (link in the project, what git reads)
  std::vector<std::string> refusals;                       // git's own messages
  std::vector<std::string> depends;  // absolute: files whose change could change the answer
};

// pando-helper-git-query beside the launcher, in a directory root's alone all the way up
// (sandbox_helper_path is checked so at config load), itself root's alone; and the host's git.
class GitQueryProgram {
 public:
  // Opens the program (logging what is missing: then every workspace launch is refused).
  GitQueryProgram(const std::string& sandbox_helper_path, std::string git_path);
  bool available() const { return program_.valid(); }
  // For `security status`.
  std::string status_detail() const;
  // What the caller's git reads and runs for `units` of the project: working trees ('W') and
  // git dirs ('G'), absolute. Thread-safe. Throws pando::Error (ERROR_LAUNCH_FAILED) when the
  // program is missing, cannot run, or answers out of bounds.
  // An answer is kept while no file it depends on changed (compared by device, inode, size,
  // mtime and ctime, stat as the caller): then no git runs at all.
  GitAnswer ask(const PeerIdentity& peer, int seccomp_fd, const std::string& project_root,
                const std::string& home, const std::vector<std::pair<char, std::string>>& units);

 private:
  struct Signature {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    timespec mtime{};
    timespec ctime{};
    bool operator==(const Signature& other) const;
  };
  struct Kept {
    GitAnswer answer;
    std::vector<std::pair<std::string, Signature>> depends;
    std::uint64_t used = 0;
  };
  static Signature signature_of(const std::string& path);
  std::optional<GitAnswer> kept(const std::string& key);
  void keep(const std::string& key, const GitAnswer& answer, const timespec& asked);

  UniqueFd program_;
  std::string missing_;  // why there is no program
  std::string git_;
  bool git_present_ = false;
  std::mutex kept_mutex_;
  std::map<std::string, Kept> kept_;  // by caller, home, project and units
  std::uint64_t uses_ = 0;
};

// Whether `path` is relative, normalized and without "." or ".." ("" is the root itself).
bool is_normal_relative(const std::string& path);

}  // namespace pando::daemon
