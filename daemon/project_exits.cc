#include "daemon/project_exits.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "common/path_components.h"
#include "common/unique_fd.h"
#include "proto/error.h"

namespace pando::daemon {

namespace {

namespace sbv1 = pando::helper::sandbox::v1;
using pando::helper::v1::ERROR_GIT_REFUSED;
using pando::helper::v1::ERROR_PROTECTED_PATH_UNSUPPORTED;
using Create = sbv1::SandboxPlan::Pin::Create;

// The kernel's limit on links followed in one resolution.
constexpr int kMaxLinks = 40;

// What git reads from a git dir and obeys or runs. A missing one is made as the caller so that
// it can be pinned, with content git treats like a missing file: empty config and
// config.worktree, empty hooks/ and info/, and a commondir of "." (the git dir itself; git
// refuses an empty one).
struct GitMetadata {
  const char* name;
  Create create;
  const char* content;
  bool run = true;  // git reads or runs what is in it (not so the git dirs below modules/)
};
constexpr GitMetadata kGitMetadata[] = {
    {"config", sbv1::SandboxPlan::Pin::FILE, ""},
    {"config.worktree", sbv1::SandboxPlan::Pin::FILE, ""},
    {"hooks", sbv1::SandboxPlan::Pin::DIRECTORY, ""},
    {"info", sbv1::SandboxPlan::Pin::DIRECTORY, ""},
    {"commondir", sbv1::SandboxPlan::Pin::FILE, ".\n"},
    // Where git keeps the git dirs of submodules and linked worktrees: a git dir the role made
    // there before the caller's `git submodule update --init` would be taken as the
    // submodule's, with its config and hooks. The ones there are pinned on their own.
    {"modules", sbv1::SandboxPlan::Pin::DIRECTORY, "", false},
    {"worktrees", sbv1::SandboxPlan::Pin::DIRECTORY, "", false},
};

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

// The parent of `relative` opened beneath the project without following a symbolic link, and
// the last name.
std::pair<UniqueFd, std::string> open_parent(int root_fd, const std::string& relative) {
  const std::size_t slash = relative.rfind('/');
  const std::string parent = slash == std::string::npos ? "." : relative.substr(0, slash);
  open_how how{};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(syscall(SYS_openat2, root_fd, parent.c_str(), &how, sizeof(how))));
  return {std::move(fd), slash == std::string::npos ? relative : relative.substr(slash + 1)};
}

class ExitsBuilder {
 public:
  ExitsBuilder(std::string project_root, int root_fd)
      : project_root_(std::move(project_root)), root_fd_(root_fd) {}

  void mask_hidden(const std::vector<std::string>& hidden, sbv1::SandboxPlan& plan) const;
  void pin_git(const ProjectFindings& findings);
  void pin_git_answer(const GitAnswer& git);
  void pin_read_only_paths(const RoleConfig& role);
  void write(sbv1::SandboxPlan& plan) const;
  void check_single_names(const sbv1::SandboxPlan& plan) const;

 private:
  void check_single_name(const std::string& relative, const char* what) const;
  struct Wanted {
    bool read_only = false;
    bool run = false;  // git reads or runs it: no file of it may have another name
    Create create = sbv1::SandboxPlan::Pin::NOTHING;
    std::string content;
  };
  std::string shown(const std::string& relative) const { return join(project_root_, relative); }
  [[noreturn]] void unsupported(const std::string& message) const {
    throw Error(ERROR_PROTECTED_PATH_UNSUPPORTED, message);
  }
  void pin(const std::string& relative, bool read_only, Create create = {},
           const std::string& content = "", bool run = true);
  std::optional<std::string> link_target(const std::string& link) const;

  const std::string project_root_;
  const int root_fd_;
  std::map<std::string, Wanted> pins_;
};

// A pin asked for twice keeps the strictest: read-only wins over writable (a path pinned as
// the parent of another first, then named read-only itself, stays read-only), and whatever
// is to be made is made. Every directory above it becomes a mount point too: one that only
// contains mount points can still be renamed away.
void ExitsBuilder::pin(const std::string& relative, bool read_only, Create create,
                       const std::string& content, bool run) {
  if (relative.empty()) return;  // the project root is the session's mount itself
  for (std::size_t slash = relative.find('/'); slash != std::string::npos;
       slash = relative.find('/', slash + 1)) {
    pins_[relative.substr(0, slash)];
  }
  Wanted& wanted = pins_[relative];
  wanted.read_only = wanted.read_only || read_only;
  wanted.run = wanted.run || (read_only && run);
  if (create != sbv1::SandboxPlan::Pin::NOTHING) {
    wanted.create = create;
    wanted.content = content;
  }
}

void ExitsBuilder::pin_git(const ProjectFindings& findings) {
  for (const std::string& link : findings.dot_git_links) {
    unsupported(shown(link) +
                " is a symbolic link named .git: git follows it, and the role could point it at "
                "a repository of its own; remove it, or replace it with a file holding "
                "\"gitdir: <where it points>\"");
  }
  // A .git file names the git dir: read-only. A .git directory cannot be renamed or replaced.
  for (const std::string& file : findings.dot_git_files) pin(file, true);
  const bool top_level =
      std::count(findings.dot_git_dirs.begin(), findings.dot_git_dirs.end(), ".git") +
          std::count(findings.dot_git_files.begin(), findings.dot_git_files.end(), ".git") >
      0;
  if (!top_level) {
    // Without it the role could make the project root's .git a repository that the caller's
    // shell prompt would run git in. Git skips an empty .git directory.
    pin(".git", true, sbv1::SandboxPlan::Pin::DIRECTORY);
  }
  for (const std::string& git_dir : git_dirs(findings)) {
    pin(git_dir, false);
    for (const GitMetadata& item : kGitMetadata) {
      pin(join(git_dir, item.name), true, item.create, item.content, item.run);
    }
  }
}

void ExitsBuilder::pin_git_answer(const GitAnswer& git) {
  for (const std::string& refusal : git.refusals) {
    throw Error(
        ERROR_GIT_REFUSED,
        "git refuses a repository of the project, so the launch is refused too: " + refusal);
  }
  for (const auto& [link, target] : git.links) {
    unsupported(shown(link) + " is a symbolic link on the way to " + target +
                ", which git reads or runs; the role could point it elsewhere: replace it with "
                "what it points to");
  }
  for (const std::string& dir : git.hooks_dirs) {
    if (dir.empty()) {
      unsupported("git runs hooks from the project root " + project_root_ +
                  " itself (core.hooksPath), where the role writes: point core.hooksPath at a "
                  "directory of its own");
    }
    pin(dir, true, sbv1::SandboxPlan::Pin::DIRECTORY);
  }
  for (const std::string& file : git.config_files) {
    pin(file, true, sbv1::SandboxPlan::Pin::FILE);
  }
  for (const std::string& dir : git.passed_through) {
    pin(dir, false, sbv1::SandboxPlan::Pin::DIRECTORY);
  }
}

void ExitsBuilder::pin_read_only_paths(const RoleConfig& role) {
  // The other role's HOME and XDG dirs; the role's own is mounted over its directory already
  // and stays writable. That role's data, not run by the caller.
  pin(".pando-sandbox", true, sbv1::SandboxPlan::Pin::NOTHING, "", false);
  for (const std::string& path : role.read_only_paths()) {
    const auto [parent, name] = open_parent(root_fd_, path);
    struct stat st {};
    if (!parent.valid() && errno == ELOOP) {
      unsupported(shown(path) +
                  " (read_only_paths) has a symbolic link on the way: the role "
                  "could point it elsewhere");
    }
    if (parent.valid() && fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISLNK(st.st_mode)) {
        unsupported(shown(path) +
                    " (read_only_paths) is a symbolic link: the role could point "
                    "it elsewhere");
      }
      pin(path, true);
    }
  }
}

// Where the symbolic link `link` leads in the project, as the kernel resolves it inside the
// session's view: in the project, links are followed (read here); above it, the view has
// nothing but the directories leading to the project, so names are taken as written.
// Nothing when it leads outside the project or to neither a regular file nor a directory.
std::optional<std::string> ExitsBuilder::link_target(const std::string& entry) const {
  const std::vector<std::string> root = path_components(project_root_);
  std::vector<std::string> at = root;  // where the resolution is, as components of the view
  const std::vector<std::string> start = path_components(entry);
  std::deque<std::string> todo(start.begin(), start.end());
  const auto inside = [&] {
    return at.size() > root.size() && std::equal(root.begin(), root.end(), at.begin());
  };
  const auto relative = [&] {
    std::string path;
    for (std::size_t i = root.size(); i < at.size(); ++i) path = join(path, at[i]);
    return path;
  };
  int links = 0;
  struct stat st {};
  while (!todo.empty()) {
    const std::string next = std::move(todo.front());
    todo.pop_front();
    if (next == ".") continue;
    if (next == "..") {
      if (!at.empty()) at.pop_back();
      continue;
    }
    at.push_back(next);
    if (!inside()) continue;
    const auto [parent, name] = open_parent(root_fd_, relative());
    if (!parent.valid() || fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return std::nullopt;
    }
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      const ssize_t length = readlinkat(parent.get(), name.c_str(), target, sizeof(target));
      if (length <= 0 || static_cast<std::size_t>(length) >= sizeof(target) ||
          ++links > kMaxLinks) {
        return std::nullopt;
      }
      at.pop_back();
      if (target[0] == '/') at.clear();
      const std::vector<std::string> more = path_components(std::string_view(target, length));
      todo.insert(todo.begin(), more.begin(), more.end());
    } else if (!S_ISDIR(st.st_mode) && !todo.empty()) {
      return std::nullopt;
    }
  }
  if (!inside() || (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))) return std::nullopt;
  return relative();
}

// A hidden file or directory is covered; a hidden link is followed, and what it leads to in the
// project is covered (a link out of the project leads to nothing the view holds).
void ExitsBuilder::mask_hidden(const std::vector<std::string>& hidden,
                               sbv1::SandboxPlan& plan) const {
  std::set<std::string> masks;
  for (const std::string& path : hidden) {
    if (const std::optional<std::string> file = link_target(path)) masks.insert(*file);
  }
  for (const std::string& mask : masks) plan.add_masks(mask);
}

// A file with more than one name: the role could change (or read) it through a name that is
// not pinned (or masked). Refused, naming the file; every file below a read-only directory git
// runs or reads from (hooks/, a read_only_paths entry) counts.
void ExitsBuilder::check_single_names(const sbv1::SandboxPlan& plan) const {
  for (const std::string& mask : plan.masks()) check_single_name(mask, "read");
  for (const auto& [path, wanted] : pins_) {
    if (wanted.run) check_single_name(path, "change");
  }
}

void ExitsBuilder::check_single_name(const std::string& relative, const char* what) const {
  const auto [parent, name] = open_parent(root_fd_, relative);
  struct stat st {};
  if (!parent.valid() || fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return;
  }
  if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
    unsupported(shown(relative) + " has " + std::to_string(st.st_nlink) +
                " hard links: the role could " + what +
                " it through another name; remove the others (find " + project_root_ +
                " -samefile '" + shown(relative) + "')");
  }
  if (!S_ISDIR(st.st_mode)) return;
  UniqueFd dir(openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  DIR* listing = dir.valid() ? fdopendir(dir.get()) : nullptr;
  if (listing == nullptr) return;
  dir.release();
  std::vector<std::string> below;
  while (const dirent* entry = readdir(listing)) {
    if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) {
      below.push_back(join(relative, entry->d_name));
    }
  }
  closedir(listing);
  for (const std::string& entry : below) check_single_name(entry, what);
}

void ExitsBuilder::write(sbv1::SandboxPlan& plan) const {
  // A map orders each directory before what is below it.
  for (const auto& [path, wanted] : pins_) {
    sbv1::SandboxPlan::Pin* pin = plan.add_pins();
    pin->set_path(path);
    pin->set_read_only(wanted.read_only);
    pin->set_create(wanted.create);
    pin->set_content(wanted.content);
  }
}

}  // namespace

std::vector<std::string> git_dirs(const ProjectFindings& findings) {
  std::set<std::string> dirs(findings.git_dirs.begin(), findings.git_dirs.end());
  dirs.insert(findings.dot_git_dirs.begin(), findings.dot_git_dirs.end());
  return {dirs.begin(), dirs.end()};
}

std::vector<std::pair<char, std::string>> git_units(const std::string& project_root,
                                                    const ProjectFindings& findings) {
  std::set<std::string> worktrees{project_root};
  for (const auto* entries : {&findings.dot_git_dirs, &findings.dot_git_files}) {
    for (const std::string& entry : *entries) {
      const std::size_t slash = entry.rfind('/');
      worktrees.insert(slash == std::string::npos ? project_root
                                                  : join(project_root, entry.substr(0, slash)));
    }
  }
  std::vector<std::pair<char, std::string>> units;
  for (const std::string& worktree : worktrees) units.emplace_back('W', worktree);
  for (const std::string& git_dir : git_dirs(findings)) {
    units.emplace_back('G', join(project_root, git_dir));
  }
  return units;
}

void add_project_exits(const RoleConfig& role, int root_fd, const ProjectFindings& findings,
                       const GitAnswer* git, sbv1::SandboxPlan& plan) {
  ExitsBuilder exits(plan.project_root(), root_fd);
  exits.mask_hidden(findings.hidden, plan);
  if (!plan.project_writable()) return exits.check_single_names(plan);
  exits.pin_read_only_paths(role);
  exits.pin_git(findings);
  if (git != nullptr) exits.pin_git_answer(*git);
  exits.check_single_names(plan);
  exits.write(plan);
}

}  // namespace pando::daemon
