#pragma once

// What a launch must know of the project before its role starts (SECURITY.md, step 12): the
// files the role must not read (the role's hidden_files patterns) and every git directory,
// whatever its name, with the entries named .git that lead to one. A ProjectIndex keeps the
// project's directory tree from one launch to the next: the first launch reads every
// directory; later ones read again only the directories a filesystem watch reported changed
// (project_watch.h), or everything when no watch can vouch for the tree.
//
// Reads run as root through a mount of the project that carries no submounts (what the
// session's non-recursive clone shows), never follow a symbolic link and hold a bounded
// number of directory fds however deep the tree: no mode, depth or size of the project can
// hide a name from them, and none refuses a launch.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace pando::daemon {

// Paths are relative to the project root, "" being the root itself.
struct ProjectFindings {
  // Files, directories and symbolic links whose names match a hidden_files pattern.
  std::vector<std::string> hidden;
  // Directories git would take for a git dir: HEAD with objects/ and refs/, or HEAD and a
  // commondir file (a linked worktree's), whatever their names (bare repositories included).
  std::vector<std::string> git_dirs;
  // Entries named .git that are directories (whether git takes them for git dirs or not: the
  // role could complete one) or files (a file names a git dir elsewhere).
  std::vector<std::string> dot_git_dirs;
  std::vector<std::string> dot_git_files;
  // Entries named .git that are symbolic links: git follows them, and the role could point
  // them at a repository of its own.
  std::vector<std::string> dot_git_links;
};

class ProjectIndex {
 public:
  // The identity under which the watch reports changes to the directory `fd` (a hash of its
  // file handle), computed before the directory is read, so that a change made after the read
  // cannot go unseen.
  using Identify = std::function<std::uint64_t(int fd)>;

  ProjectIndex(std::vector<std::string> hidden_patterns, Identify identify);
  ProjectIndex(const ProjectIndex&) = delete;
  ProjectIndex& operator=(const ProjectIndex&) = delete;

  // Brings the tree below `root_fd` up to date: all of it when it was never read or was
  // invalidated, else the directories noted as changed (and whatever appeared below them).
  // Throws pando::Error (ERROR_PROJECT_SCAN_INCOMPLETE) when a directory cannot be read.
  void update(int root_fd);
  ProjectFindings findings() const;
  std::size_t directories() const { return live_; }
  // Directories the last update() listed.
  std::size_t last_read() const { return last_read_; }
  // Whether update() would read everything.
  bool needs_full_read() const;

  // From the watch's thread, at any time.
  void note_change(std::uint64_t identity);
  void invalidate();

 private:
  static constexpr std::uint32_t kNone = UINT32_MAX;
  struct Directory {
    std::string name;
    std::uint32_t parent = kNone;
    std::uint32_t first_child = kNone;
    std::uint32_t next_sibling = kNone;
    std::uint64_t identity = 0;
    bool registered = false;
    bool live = false;
  };
  // The names of one directory a launch looks for.
  struct Marks {
    std::vector<std::string> hidden;
    bool dot_git_link = false;
    bool dot_git_dir = false;
    bool dot_git_file = false;
    bool git_dir = false;
  };
  // What git's own check (setup.c, is_git_directory) needs of a directory, read from its
  // entries only: HEAD (a file or a link to one), then objects/ and refs/ here or in the
  // directory a commondir file names. Links count: git follows them.
  struct GitSignature {
    bool head = false;
    bool objects = false;
    bool refs = false;
    bool commondir = false;
    bool complete() const { return head && ((objects && refs) || commondir); }
  };

  void read_all(int root_fd);
  void read_changed(int root_fd);
  void read_subtree(std::uint32_t top, int top_fd);
  // Lists `dir` (open as `fd`): records its marks and returns the subdirectories still to
  // read. A child it had already is kept (with what was read below it) when a subdirectory of
  // that name is still the same directory; the others are dropped and made anew.
  std::vector<std::uint32_t> read_directory(std::uint32_t dir, int fd);
  void note_entry(const char* name, unsigned char type, Marks& marks, GitSignature& git) const;
  std::optional<std::uint32_t> child_to_read(
      std::uint32_t dir, int fd, const char* name,
      std::unordered_map<std::string, std::uint32_t>& before);
  std::uint32_t add_directory(const std::string& name, std::uint32_t parent);
  void drop_subtree(std::uint32_t dir);
  void register_identity(std::uint32_t dir, std::uint64_t identity);
  void forget_identity(std::uint32_t dir);
  bool is_hidden_name(const char* name) const;
  std::string path_of(std::uint32_t dir) const;
  int reopen(const std::vector<std::uint32_t>& chain, int base_fd) const;

  const std::vector<std::string> hidden_patterns_;
  const Identify identify_;
  std::vector<Directory> dirs_;
  std::vector<std::uint32_t> free_;
  std::unordered_map<std::uint32_t, Marks> marks_;
  std::size_t live_ = 0;
  std::size_t last_read_ = 0;
  std::vector<char> buffer_;

  // Shared with the watch's thread.
  mutable std::mutex changes_mutex_;
  std::unordered_multimap<std::uint64_t, std::uint32_t> by_identity_;
  std::unordered_set<std::uint32_t> changed_;
  bool complete_ = false;
};

}  // namespace pando::daemon
