#include "daemon/sandbox/project_exits.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/blocked_syscall.h"
#include "common/unique_fd.h"
#include "daemon/sandbox/git_config.h"
#include "daemon/sandbox/mount_api.h"
#include "proto/error.h"

namespace pando::sandbox {

namespace {

using pando::helper::sandbox::v1::SandboxPlan;
using pando::helper::v1::ERROR_PROJECT_SCAN_INCOMPLETE;
using pando::helper::v1::ERROR_PROTECTED_PATH_UNSUPPORTED;

// More repositories than this in one project would mean thousands of mounts.
constexpr size_t kMaxGitDirs = 256;
// A .git file or commondir file holds one path.
constexpr size_t kMaxPointerFileSize = 4096;
// Submodule names may contain '/': modules/a/b/ is the git dir of "a/b".
constexpr int kMaxModuleNesting = 8;

// Config files git includes from one another.
constexpr int kMaxIncludeDepth = 4;
constexpr size_t kMaxConfigSize = 1 << 20;

// What git reads from a git dir and obeys or runs. A missing one is created
// as the caller so that it can be pinned, with content git treats like a
// missing file: empty config, config.worktree, hooks/ and info/, and a
// commondir of "." (the git dir itself; git refuses an empty one).
struct GitMetadata {
  const char* name;
  bool directory;
  const char* content;
};
constexpr GitMetadata kGitMetadata[] = {
    {"config", false, ""}, {"config.worktree", false, ""}, {"hooks", true, ""},
    {"info", true, ""},    {"commondir", false, ".\n"},
};

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

UniqueFd open_beneath(int project_fd, const std::string& relative, uint64_t flags) {
  open_how how{};
  how.flags = flags | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const char* path = relative.empty() ? "." : relative.c_str();
  const long fd = syscall(SYS_openat2, project_fd, path, &how, sizeof(how));
  if (fd < 0 && errno == ENOSYS) {
    throw Error(pando::helper::v1::ERROR_SANDBOX_UNSUPPORTED,
                blocked_syscall_message("openat2", "needed to walk the project"));
  }
  return UniqueFd(static_cast<int>(fd));
}

class ProjectGuard {
 public:
  ProjectGuard(const SandboxPlan& plan, int root_fd, int project_fd)
      : plan_(plan), root_fd_(root_fd), project_fd_(project_fd) {}

  void scan();
  void pin_protected_paths();

 private:
  std::string shown(const std::string& relative) const {
    return relative.empty() ? plan_.project_root() : plan_.project_root() + "/" + relative;
  }
  [[noreturn]] void incomplete(const std::string& relative, const std::string& why,
                               const char* field) const;
  [[noreturn]] void unsupported(const std::string& relative, const std::string& why) const;

  void scan_directory(const std::string& relative, int depth,
                      std::deque<std::pair<std::string, int>>& queue);
  bool is_hidden_name(const char* name) const;
  bool role_can_enter(const std::string& relative) const;

  bool pin(const std::string& relative, bool read_only);
  bool pin_with_parents(const std::string& relative, bool read_only);
  void protect_git_entry(const std::string& relative);
  void protect_git_dir(const std::string& relative, const std::string& worktree);
  void protect_module_dirs(const std::string& relative, int nesting);
  void protect_config_targets(const std::string& config, const std::string& worktree, int depth);
  void follow_pointer(const std::string& file, const std::string& base,
                      const std::string& worktree);
  void create_missing(const std::string& relative, bool directory, const char* content);
  std::string read_small_file(const std::string& relative, size_t limit) const;

  const SandboxPlan& plan_;
  const int root_fd_;
  const int project_fd_;
  uint64_t entries_ = 0;
  std::vector<std::string> git_entries_;
  std::set<std::string> pinned_;
  std::set<std::string> git_dirs_;
};

void ProjectGuard::incomplete(const std::string& relative, const std::string& why,
                              const char* field) const {
  std::string message = "the project walk that hides secrets and finds git metadata stopped at " +
                        shown(relative) + ": " + why;
  if (field != nullptr) {
    message += "; raise " + plan_.role() + "." + field + " in the daemon's config";
  }
  throw Error(ERROR_PROJECT_SCAN_INCOMPLETE, message);
}

void ProjectGuard::unsupported(const std::string& relative, const std::string& why) const {
  throw Error(ERROR_PROTECTED_PATH_UNSUPPORTED,
              "cannot protect " + shown(relative) + " from the role: " + why);
}

bool ProjectGuard::is_hidden_name(const char* name) const {
  for (const std::string& pattern : plan_.hidden_files()) {
    if (fnmatch(pattern.c_str(), name, 0) == 0) return true;
  }
  return false;
}

// Root lists every directory of the caller's through the idmapped mount; one
// it cannot list belongs to someone else (a container's data directory, say),
// so the role cannot chmod it either. Skipping it is safe exactly when the
// role cannot search it: then no name inside is reachable.
bool ProjectGuard::role_can_enter(const std::string& relative) const {
  FsCredentials creds(plan_.ids().role_uid(), plan_.ids().role_gid());
  return open_beneath(project_fd_, join(relative, "."), O_PATH).valid();
}

// Breadth first, as root: the role's modes and ownership do not decide what is
// read. Mounts below the project (the sandbox home) are walked too.
void ProjectGuard::scan() {
  std::deque<std::pair<std::string, int>> queue{{"", 1}};
  while (!queue.empty()) {
    auto [relative, depth] = std::move(queue.front());
    queue.pop_front();
    scan_directory(relative, depth, queue);
  }
}

void ProjectGuard::scan_directory(const std::string& relative, int depth,
                                  std::deque<std::pair<std::string, int>>& queue) {
  UniqueFd fd = open_beneath(project_fd_, relative, O_RDONLY | O_DIRECTORY);
  if (!fd.valid()) {
    const int error = errno;
    if (error == EACCES && !role_can_enter(relative)) return;
    incomplete(relative, std::string("cannot list it: ") + strerror(error), nullptr);
  }
  DIR* listing = fdopendir(fd.get());
  if (listing == nullptr) throw_errno("fdopendir " + shown(relative));
  fd.release();
  struct Closer {
    DIR* dir;
    ~Closer() { closedir(dir); }
  } closer{listing};
  for (;;) {
    errno = 0;
    const dirent* entry = readdir(listing);
    if (entry == nullptr) {
      if (errno != 0) incomplete(relative, std::string("cannot list: ") + strerror(errno), nullptr);
      return;
    }
    const char* name = entry->d_name;
    if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
    if (++entries_ > plan_.project_scan_max_entries()) {
      incomplete(relative,
                 "more than " + std::to_string(plan_.project_scan_max_entries()) + " entries",
                 "project_scan_max_entries");
    }
    unsigned char type = entry->d_type;
    if (type == DT_UNKNOWN) {
      struct stat st {};
      if (fstatat(dirfd(listing), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        incomplete(join(relative, name), std::string("cannot stat: ") + strerror(errno), nullptr);
      }
      type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
    }
    const std::string path = join(relative, name);
    if (std::strcmp(name, ".git") == 0) git_entries_.push_back(path);
    if (type == DT_DIR) {
      if (depth >= static_cast<int>(plan_.project_scan_max_depth())) {
        incomplete(path,
                   "deeper than " + std::to_string(plan_.project_scan_max_depth()) + " levels",
                   "project_scan_max_depth");
      }
      queue.emplace_back(path, depth + 1);
      continue;
    }
    if (type != DT_REG || !is_hidden_name(name)) continue;
    UniqueFd target(openat(dirfd(listing), name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!target.valid() || fstat(target.get(), &st) != 0) {
      incomplete(path, std::string("cannot open: ") + strerror(errno), nullptr);
    }
    if (S_ISREG(st.st_mode)) mask_with(root_fd_, kMaskFile, target.get(), "hidden file " + path);
  }
}

// Binds `relative` onto itself (with what is mounted below it), read-only if
// asked. A mount point cannot be renamed, removed or replaced from inside.
// Returns false when it does not exist.
bool ProjectGuard::pin(const std::string& relative, bool read_only) {
  if (pinned_.count(relative) != 0) return true;
  UniqueFd target = open_beneath(project_fd_, relative, O_PATH);
  if (!target.valid()) {
    if (errno == ENOENT) return false;
    if (errno == ELOOP || errno == EXDEV) unsupported(relative, "a component is a symbolic link");
    throw_errno("open " + shown(relative));
  }
  struct stat st {};
  if (fstat(target.get(), &st) != 0) throw_errno("fstat " + shown(relative));
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
    unsupported(relative, "it is neither a directory nor a regular file (a symbolic link?)");
  }
  UniqueFd clone = clone_private(target.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, shown(relative));
  if (!clone.valid()) throw_errno("open_tree " + shown(relative));
  if (read_only) set_mount_attrs(clone.get(), MOUNT_ATTR_RDONLY, false, shown(relative));
  attach(clone.get(), target.get(), shown(relative));
  verify_mount_flags(clone.get(), read_only ? kReadOnlyFlags : ST_NOSUID | ST_NODEV,
                     shown(relative));
  pinned_.insert(relative);
  return true;
}

// A directory that only contains mount points can still be renamed away:
// every directory above a protected path becomes a mount point too.
bool ProjectGuard::pin_with_parents(const std::string& relative, bool read_only) {
  for (size_t slash = relative.find('/'); slash != std::string::npos;
       slash = relative.find('/', slash + 1)) {
    pin(relative.substr(0, slash), false);
  }
  return pin(relative, read_only);
}

std::string ProjectGuard::read_small_file(const std::string& relative, size_t limit) const {
  UniqueFd fd = open_beneath(project_fd_, relative, O_RDONLY);
  if (!fd.valid()) throw_errno("open " + shown(relative));
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno("read " + shown(relative));
    if (n == 0) return text;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > limit) unsupported(relative, "larger than git metadata should be");
  }
}

// `pointer` names a path relative to the project directory `base`, or an
// absolute one. Returns whether it lies inside the project (below its root)
// and its normalized project-relative path.
std::pair<bool, std::string> resolve_in_project(const std::string& project_root,
                                                const std::string& base,
                                                const std::string& pointer) {
  std::string path;
  if (!pointer.empty() && pointer.front() == '/') {
    if (pointer.compare(0, project_root.size() + 1, project_root + "/") != 0) return {false, ""};
    path = pointer.substr(project_root.size() + 1);
  } else {
    path = join(base, pointer);
  }
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    if (part == "..") {
      if (parts.empty()) return {false, ""};
      parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    start = end + 1;
  }
  std::string relative;
  for (const auto& part : parts) relative = join(relative, part);
  return {!relative.empty(), relative};
}

std::string parent_of(const std::string& relative) {
  const size_t slash = relative.rfind('/');
  return slash == std::string::npos ? "" : relative.substr(0, slash);
}

// A .git file ("gitdir: <path>") or a commondir file ("<path>"): the git dir
// it names is protected when it is inside the project; outside, it is not in
// the view at all.
void ProjectGuard::follow_pointer(const std::string& file, const std::string& base,
                                  const std::string& worktree) {
  std::string pointer = read_small_file(file, kMaxPointerFileSize);
  while (!pointer.empty() && (pointer.back() == '\n' || pointer.back() == '\r')) {
    pointer.pop_back();
  }
  if (file == ".git" || (file.size() > 5 && file.compare(file.size() - 5, 5, "/.git") == 0)) {
    if (pointer.rfind("gitdir: ", 0) != 0) return;  // git refuses such a file too
    pointer.erase(0, std::strlen("gitdir: "));
  }
  const auto [inside, git_dir] = resolve_in_project(plan_.project_root(), base, pointer);
  if (!inside) return;
  struct stat st {};
  UniqueFd fd = open_beneath(project_fd_, git_dir, O_PATH);
  if (!fd.valid() || fstat(fd.get(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
  protect_git_dir(git_dir, worktree);
}

// Creates `relative` and the directories above it that are missing, as the
// role through the idmapped mount, so they land owned by the caller. A
// directory the role may not write stays as it is only where the role could
// not change that: one it owns it could chmod, so that refuses the launch.
void ProjectGuard::create_missing(const std::string& relative, bool directory,
                                  const char* content) {
  FsCredentials creds(plan_.ids().role_uid(), plan_.ids().role_gid());
  for (size_t end = relative.find('/');; end = relative.find('/', end + 1)) {
    const bool last = end == std::string::npos;
    const std::string path = last ? relative : relative.substr(0, end);
    UniqueFd parent = open_beneath(project_fd_, parent_of(path), O_PATH | O_DIRECTORY);
    if (!parent.valid()) return;
    const std::string name = path.substr(path.rfind('/') + 1);
    UniqueFd file;
    bool made = false;
    if (!last || directory) {
      made = mkdirat(parent.get(), name.c_str(), 0755) == 0;
    } else {
      file.reset(openat(parent.get(), name.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
      made = file.valid();
    }
    if (!made && errno != EEXIST) {
      const int error = errno;
      struct stat st {};
      if ((error == EACCES || error == EPERM) && fstat(parent.get(), &st) == 0 &&
          st.st_uid != plan_.ids().role_uid()) {
        return;
      }
      unsupported(path, std::string("cannot create it to protect it: ") + strerror(error));
    }
    if (file.valid()) {
      const size_t size = std::strlen(content);
      if (write(file.get(), content, size) != static_cast<ssize_t>(size)) {
        throw_errno("write " + shown(path));
      }
    }
    if (last) return;
  }
}

// `worktree` is the working tree the git dir belongs to, where a relative
// core.hooksPath is resolved (the git dir itself when not known).
void ProjectGuard::protect_git_dir(const std::string& relative, const std::string& worktree) {
  if (!git_dirs_.insert(relative).second) return;
  if (git_dirs_.size() > kMaxGitDirs) {
    incomplete(relative, "more than " + std::to_string(kMaxGitDirs) + " git repositories", nullptr);
  }
  pin_with_parents(relative, false);
  for (const GitMetadata& entry : kGitMetadata) {
    const std::string path = join(relative, entry.name);
    create_missing(path, entry.directory, entry.content);
    pin(path, true);
  }
  if (pinned_.count(join(relative, "commondir")) != 0) {
    follow_pointer(join(relative, "commondir"), relative, worktree);
  }
  for (const char* config : {"config", "config.worktree"}) {
    if (pinned_.count(join(relative, config)) != 0) {
      protect_config_targets(join(relative, config), worktree, 0);
    }
  }
  protect_module_dirs(join(relative, "modules"), 0);
  protect_module_dirs(join(relative, "worktrees"), kMaxModuleNesting - 1);
}

// What a (pinned) config file makes git run or read from elsewhere: hooks
// directories and included config files inside the project are pinned too,
// created first when missing (the role could otherwise create them).
void ProjectGuard::protect_config_targets(const std::string& config, const std::string& worktree,
                                          int depth) {
  const GitConfigPaths paths = git_config_paths(read_small_file(config, kMaxConfigSize));
  for (const std::string& hooks : paths.hooks_paths) {
    const auto [inside, target] = resolve_in_project(plan_.project_root(), worktree, hooks);
    if (!inside || hooks.rfind('~', 0) == 0) continue;
    create_missing(target, true, "");
    pin_with_parents(target, true);
  }
  for (const std::string& include : paths.include_paths) {
    const auto [inside, target] =
        resolve_in_project(plan_.project_root(), parent_of(config), include);
    if (!inside || include.rfind('~', 0) == 0) continue;
    create_missing(target, false, "");
    if (pin_with_parents(target, true) && depth + 1 < kMaxIncludeDepth) {
      protect_config_targets(target, worktree, depth + 1);
    }
  }
}

// Every git dir below modules/ (submodules, possibly with '/' in their names)
// or worktrees/ (linked worktrees, one level).
void ProjectGuard::protect_module_dirs(const std::string& relative, int nesting) {
  if (!pin(relative, false)) return;
  UniqueFd fd = open_beneath(project_fd_, relative, O_RDONLY | O_DIRECTORY);
  if (!fd.valid()) throw_errno("open " + shown(relative));
  DIR* listing = fdopendir(fd.get());
  if (listing == nullptr) throw_errno("fdopendir " + shown(relative));
  fd.release();
  std::vector<std::string> children;
  while (const dirent* entry = readdir(listing)) {
    if ((entry->d_type == DT_DIR || entry->d_type == DT_UNKNOWN) &&
        std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) {
      children.push_back(join(relative, entry->d_name));
    }
  }
  closedir(listing);
  for (const std::string& child : children) {
    struct stat st {};
    UniqueFd head = open_beneath(project_fd_, join(child, "HEAD"), O_PATH);
    if (head.valid() && fstat(head.get(), &st) == 0) {
      protect_git_dir(child, child);
    } else if (nesting + 1 < kMaxModuleNesting) {
      protect_module_dirs(child, nesting + 1);
    }
  }
}

void ProjectGuard::protect_git_entry(const std::string& relative) {
  UniqueFd fd = open_beneath(project_fd_, relative, O_PATH);
  struct stat st {};
  if (!fd.valid() || fstat(fd.get(), &st) != 0) {
    unsupported(relative, std::string("it changed during the launch: ") + strerror(errno));
  }
  const std::string worktree = parent_of(relative);
  if (S_ISDIR(st.st_mode)) {
    protect_git_dir(relative, worktree);
  } else if (S_ISREG(st.st_mode)) {
    pin_with_parents(relative, true);
    follow_pointer(relative, worktree, worktree);
  } else {
    unsupported(relative, "git follows it, but it is neither a directory nor a regular file");
  }
}

// Only the writable role can change the project; the read-only role's whole
// project is already a read-only mount.
void ProjectGuard::pin_protected_paths() {
  // The other role's HOME and XDG dirs; the role's own is mounted over its
  // directory already and stays writable.
  pin(".pando-sandbox", true);
  for (const std::string& path : plan_.read_only_paths()) {
    if (open_beneath(project_fd_, path, O_PATH).valid() || errno != ENOENT) {
      pin_with_parents(path, true);
    }
  }
  bool has_top_level_git = false;
  for (const std::string& entry : git_entries_) {
    has_top_level_git = has_top_level_git || entry == ".git";
    protect_git_entry(entry);
  }
  if (!has_top_level_git) {
    // Without it the role could create a repository that the caller's shell
    // prompt would run git in. Git skips an empty .git directory.
    create_missing(".git", true, "");
    pin(".git", true);
  }
}

}  // namespace

void guard_project_exits(const SandboxPlan& plan, int root_fd, int project_fd) {
  ProjectGuard guard(plan, root_fd, project_fd);
  guard.scan();
  if (plan.project_writable()) guard.pin_protected_paths();
}

}  // namespace pando::sandbox
