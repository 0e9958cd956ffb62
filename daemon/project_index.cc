#include "daemon/project_index.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "common/unique_fd.h"
#include "proto/error.h"

namespace pando::daemon {

namespace {

using pando::helper::v1::ERROR_PROJECT_SCAN_INCOMPLETE;

// getdents64's buffer: a directory of a few thousand entries in one call.
constexpr std::size_t kListingBytes = 64 * 1024;
// Directory fds one read holds at most: the ancestors of the directory being read, up to this
// many levels; deeper ones are opened again from the nearest one held when their turn comes.
constexpr std::size_t kOpenLevels = 64;
// Rounds of reading what changed while the previous round read: changes come only from the
// caller's own processes then (the walk window pauses the caller's sessions), so one round
// normally settles it.
constexpr int kUpdateRounds = 4;

struct LinuxDirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

[[noreturn]] void unreadable(const std::string& path, const std::string& why) {
  throw Error(ERROR_PROJECT_SCAN_INCOMPLETE,
              "cannot read " + (path.empty() ? std::string("the project root") : path) +
                  " to find the project's secrets and git metadata: " + why);
}

bool is_dot_or_dot_dot(const char* name) {
  return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

int open_directory(int parent_fd, const char* name) {
  return openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

}  // namespace

ProjectIndex::ProjectIndex(std::vector<std::string> hidden_patterns, Identify identify)
    : hidden_patterns_(std::move(hidden_patterns)), identify_(std::move(identify)) {}

bool ProjectIndex::needs_full_read() const {
  std::lock_guard lock(changes_mutex_);
  return !complete_;
}

void ProjectIndex::note_change(std::uint64_t identity) {
  std::lock_guard lock(changes_mutex_);
  const auto [first, last] = by_identity_.equal_range(identity);
  for (auto it = first; it != last; ++it) changed_.insert(it->second);
}

void ProjectIndex::invalidate() {
  std::lock_guard lock(changes_mutex_);
  complete_ = false;
}

void ProjectIndex::update(int root_fd) {
  UniqueFd root(openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) unreadable("", std::strerror(errno));
  buffer_.resize(kListingBytes);
  last_read_ = 0;
  try {
    if (needs_full_read()) read_all(root.get());
    for (int round = 0; round < kUpdateRounds; ++round) {
      {
        std::lock_guard lock(changes_mutex_);
        if (changed_.empty()) return;
      }
      read_changed(root.get());
    }
  } catch (...) {
    // What was left half read is read whole next time.
    invalidate();
    throw;
  }
  invalidate();
  unreadable("", "it kept changing while it was read; launch again");
}

void ProjectIndex::read_all(int root_fd) {
  {
    std::lock_guard lock(changes_mutex_);
    by_identity_.clear();
    changed_.clear();
    // Set before reading: an invalidation that comes while it reads clears it again.
    complete_ = true;
  }
  dirs_.clear();
  free_.clear();
  marks_.clear();
  live_ = 0;
  read_subtree(add_directory("", kNone), root_fd);
}

// Directories the watch reported changed are read again, shallowest first: one that an
// ancestor's new reading dropped is gone by its turn. A directory that cannot be opened by its
// path any more was moved or removed: its parent, which says so, is read instead.
void ProjectIndex::read_changed(int root_fd) {
  std::vector<std::uint32_t> changed;
  {
    std::lock_guard lock(changes_mutex_);
    changed.assign(changed_.begin(), changed_.end());
    changed_.clear();
  }
  const auto depth = [this](std::uint32_t dir) {
    std::size_t levels = 0;
    for (std::uint32_t at = dir; dirs_[at].parent != kNone; at = dirs_[at].parent) ++levels;
    return levels;
  };
  std::vector<std::pair<std::size_t, std::uint32_t>> order;
  for (const std::uint32_t dir : changed) {
    if (dir < dirs_.size() && dirs_[dir].live) order.emplace_back(depth(dir), dir);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [levels, dir] : order) {
    if (!dirs_[dir].live) continue;  // dropped with an ancestor meanwhile
    std::vector<std::uint32_t> chain;
    for (std::uint32_t at = dir; at != kNone; at = dirs_[at].parent) chain.push_back(at);
    std::reverse(chain.begin(), chain.end());
    UniqueFd fd(reopen(chain, root_fd));
    if (!fd.valid() || identify_(fd.get()) != dirs_[dir].identity) {
      if (dirs_[dir].parent == kNone) unreadable("", "the project root was replaced");
      std::lock_guard lock(changes_mutex_);
      changed_.insert(dirs_[dir].parent);
      continue;
    }
    read_subtree(dir, fd.get());
  }
}

// Depth first, without recursion. The fds of the directories being walked stay open up to
// kOpenLevels levels up; a deeper ancestor whose turn comes again is reopened by name from the
// nearest one held, and must still be the same directory.
void ProjectIndex::read_subtree(std::uint32_t top, int top_fd) {
  struct Frame {
    std::uint32_t dir;
    UniqueFd owned;
    int fd;
    std::vector<std::uint32_t> pending;
    std::size_t next = 0;
  };
  std::vector<Frame> stack;
  stack.push_back({top, UniqueFd(), top_fd, read_directory(top, top_fd)});
  while (!stack.empty()) {
    if (stack.back().next == stack.back().pending.size()) {
      stack.pop_back();
      continue;
    }
    if (stack.back().fd < 0) {
      std::vector<std::uint32_t> chain;
      std::size_t base = stack.size() - 1;
      while (stack[base].fd < 0) --base;
      for (std::size_t i = base; i < stack.size(); ++i) chain.push_back(stack[i].dir);
      stack.back().owned.reset(reopen(chain, stack[base].fd));
      if (!stack.back().owned.valid() ||
          identify_(stack.back().owned.get()) != dirs_[stack.back().dir].identity) {
        unreadable(path_of(stack.back().dir), "it changed while it was read; launch again");
      }
      stack.back().fd = stack.back().owned.get();
    }
    Frame& frame = stack.back();
    const std::uint32_t child = frame.pending[frame.next++];
    UniqueFd fd(open_directory(frame.fd, dirs_[child].name.c_str()));
    if (!fd.valid()) {
      const int error = errno;
      if (error != ENOENT && error != ENOTDIR && error != ELOOP) {
        unreadable(path_of(child), std::strerror(error));
      }
      // Replaced or removed since its parent was listed: the parent is read again.
      drop_subtree(child);
      std::lock_guard lock(changes_mutex_);
      changed_.insert(frame.dir);
      continue;
    }
    std::vector<std::uint32_t> pending = read_directory(child, fd.get());
    // Never the top's: it is the caller's, and where every reopening starts.
    if (stack.size() > kOpenLevels) {
      Frame& far = stack[stack.size() - kOpenLevels];
      far.owned.reset();
      far.fd = -1;
    }
    const int raw = fd.get();
    stack.push_back({child, std::move(fd), raw, std::move(pending)});
  }
}

// Opens chain.back() from chain[0], the directory `base_fd` holds, one name at a time,
// following no symbolic link. -1 when a name is gone or no longer a directory.
int ProjectIndex::reopen(const std::vector<std::uint32_t>& chain, int base_fd) const {
  if (chain.size() == 1) return fcntl(base_fd, F_DUPFD_CLOEXEC, 0);
  UniqueFd current;
  int at = base_fd;
  for (std::size_t i = 1; i < chain.size(); ++i) {
    current.reset(open_directory(at, dirs_[chain[i]].name.c_str()));
    if (!current.valid()) return -1;
    at = current.get();
  }
  return current.release();
}

// What one entry tells: a .git entry, a part of git's signature, a hidden name.
void ProjectIndex::note_entry(const char* name, unsigned char type, Marks& marks,
                              GitSignature& git) const {
  const bool file_or_link = type == DT_REG || type == DT_LNK;
  const bool dir_or_link = type == DT_DIR || type == DT_LNK;
  if (std::strcmp(name, ".git") == 0) {
    marks.dot_git_dir = marks.dot_git_dir || type == DT_DIR;
    marks.dot_git_file = marks.dot_git_file || type == DT_REG;
    marks.dot_git_link = marks.dot_git_link || type == DT_LNK;
  }
  git.head = git.head || (std::strcmp(name, "HEAD") == 0 && file_or_link);
  git.objects = git.objects || (std::strcmp(name, "objects") == 0 && dir_or_link);
  git.refs = git.refs || (std::strcmp(name, "refs") == 0 && dir_or_link);
  git.commondir = git.commondir || (std::strcmp(name, "commondir") == 0 && file_or_link);
  if ((file_or_link || type == DT_DIR) && is_hidden_name(name)) marks.hidden.emplace_back(name);
}

// A subdirectory `name` of `dir` (open as `fd`): a child it had already is kept when it is
// still the same directory; else it is made anew, to be read (returned).
std::optional<std::uint32_t> ProjectIndex::child_to_read(
    std::uint32_t dir, int fd, const char* name,
    std::unordered_map<std::string, std::uint32_t>& before) {
  const auto known = before.find(name);
  if (known != before.end()) {
    const UniqueFd child(open_directory(fd, name));
    const bool same = child.valid() && identify_(child.get()) == dirs_[known->second].identity;
    const std::uint32_t id = known->second;
    before.erase(known);
    if (same) return std::nullopt;
    drop_subtree(id);
  }
  return add_directory(name, dir);
}

std::vector<std::uint32_t> ProjectIndex::read_directory(std::uint32_t dir, int fd) {
  register_identity(dir, identify_(fd));
  ++last_read_;
  std::unordered_map<std::string, std::uint32_t> before;
  for (std::uint32_t child = dirs_[dir].first_child; child != kNone;
       child = dirs_[child].next_sibling) {
    before.emplace(dirs_[child].name, child);
  }
  Marks marks;
  GitSignature git;
  std::vector<std::uint32_t> pending;
  for (;;) {
    const long got = syscall(SYS_getdents64, fd, buffer_.data(), buffer_.size());
    if (got < 0) unreadable(path_of(dir), std::strerror(errno));
    if (got == 0) break;
    for (long offset = 0; offset < got;) {
      const auto* entry = reinterpret_cast<const LinuxDirent64*>(buffer_.data() + offset);
      offset += entry->d_reclen;
      const char* name = entry->d_name;
      if (is_dot_or_dot_dot(name)) continue;
      unsigned char type = entry->d_type;
      if (type == DT_UNKNOWN) {
        struct stat st {};
        if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
          unreadable(path_of(dir) + "/" + name, std::strerror(errno));
        }
        type = IFTODT(st.st_mode);
      }
      note_entry(name, type, marks, git);
      if (type != DT_DIR) continue;
      if (const auto child = child_to_read(dir, fd, name, before)) pending.push_back(*child);
    }
  }
  for (const auto& [name, child] : before) drop_subtree(child);
  marks.git_dir = git.complete();
  if (marks.hidden.empty() && !marks.dot_git_dir && !marks.dot_git_file && !marks.dot_git_link &&
      !marks.git_dir) {
    marks_.erase(dir);
  } else {
    marks_[dir] = std::move(marks);
  }
  return pending;
}

std::uint32_t ProjectIndex::add_directory(const std::string& name, std::uint32_t parent) {
  std::uint32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
    dirs_[id] = Directory{};
  } else {
    id = static_cast<std::uint32_t>(dirs_.size());
    dirs_.emplace_back();
  }
  Directory& dir = dirs_[id];
  dir.live = true;
  dir.name = name;
  dir.parent = parent;
  if (parent != kNone) {
    dir.next_sibling = dirs_[parent].first_child;
    dirs_[parent].first_child = id;
  }
  ++live_;
  return id;
}

void ProjectIndex::drop_subtree(std::uint32_t top) {
  const std::uint32_t parent = dirs_[top].parent;
  if (parent != kNone) {
    std::uint32_t* link = &dirs_[parent].first_child;
    while (*link != top) link = &dirs_[*link].next_sibling;
    *link = dirs_[top].next_sibling;
  }
  std::vector<std::uint32_t> todo{top};
  std::lock_guard lock(changes_mutex_);
  while (!todo.empty()) {
    const std::uint32_t dir = todo.back();
    todo.pop_back();
    for (std::uint32_t child = dirs_[dir].first_child; child != kNone;
         child = dirs_[child].next_sibling) {
      todo.push_back(child);
    }
    if (dirs_[dir].registered) forget_identity(dir);
    marks_.erase(dir);
    changed_.erase(dir);
    dirs_[dir] = Directory{};
    free_.push_back(dir);
    --live_;
  }
}

void ProjectIndex::register_identity(std::uint32_t dir, std::uint64_t identity) {
  std::lock_guard lock(changes_mutex_);
  if (dirs_[dir].registered) forget_identity(dir);
  dirs_[dir].identity = identity;
  dirs_[dir].registered = true;
  by_identity_.emplace(identity, dir);
}

// With changes_mutex_ held.
void ProjectIndex::forget_identity(std::uint32_t dir) {
  const auto [first, last] = by_identity_.equal_range(dirs_[dir].identity);
  for (auto it = first; it != last; ++it) {
    if (it->second == dir) {
      by_identity_.erase(it);
      return;
    }
  }
}

bool ProjectIndex::is_hidden_name(const char* name) const {
  for (const std::string& pattern : hidden_patterns_) {
    // Most names differ in their first character from a pattern that starts with a literal
    // one (".env"): fnmatch only runs for the others.
    const char first = pattern.front();
    if (first != '*' && first != '?' && first != '[' && first != '\\' && first != name[0]) {
      continue;
    }
    if (fnmatch(pattern.c_str(), name, 0) == 0) return true;
  }
  return false;
}

std::string ProjectIndex::path_of(std::uint32_t dir) const {
  std::vector<const std::string*> names;
  for (std::uint32_t at = dir; dirs_[at].parent != kNone; at = dirs_[at].parent) {
    names.push_back(&dirs_[at].name);
  }
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (!path.empty()) path += '/';
    path += **it;
  }
  return path;
}

ProjectFindings ProjectIndex::findings() const {
  ProjectFindings found;
  const auto join = [](const std::string& dir, const std::string& name) {
    return dir.empty() ? name : dir + "/" + name;
  };
  for (const auto& [dir, marks] : marks_) {
    const std::string path = path_of(dir);
    for (const std::string& name : marks.hidden) found.hidden.push_back(join(path, name));
    if (marks.dot_git_dir) found.dot_git_dirs.push_back(join(path, ".git"));
    if (marks.dot_git_file) found.dot_git_files.push_back(join(path, ".git"));
    if (marks.dot_git_link) found.dot_git_links.push_back(join(path, ".git"));
    if (marks.git_dir) found.git_dirs.push_back(path);
  }
  for (auto* list : {&found.hidden, &found.git_dirs, &found.dot_git_dirs, &found.dot_git_files,
                     &found.dot_git_links}) {
    std::sort(list->begin(), list->end());
  }
  return found;
}

}  // namespace pando::daemon
