#include "daemon/sandbox/project_exits.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/blocked_syscall.h"
#include "common/unique_fd.h"
#include "daemon/sandbox/mount_api.h"
#include "proto/error.h"

namespace pando::sandbox {

namespace {

using pando::helper::sandbox::v1::SandboxPlan;
using pando::helper::v1::ERROR_PROJECT_SCAN_INCOMPLETE;
using pando::helper::v1::ERROR_PROTECTED_PATH_UNSUPPORTED;
using Pin = SandboxPlan::Pin;

std::string parent_of(const std::string& relative) {
  const std::size_t slash = relative.rfind('/');
  return slash == std::string::npos ? "" : relative.substr(0, slash);
}

UniqueFd open_beneath(int project_fd, const std::string& relative, uint64_t flags) {
  open_how how{};
  how.flags = flags | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const char* path = relative.empty() ? "." : relative.c_str();
  const long fd = syscall(SYS_openat2, project_fd, path, &how, sizeof(how));
  if (fd < 0 && errno == ENOSYS) {
    throw Error(pando::helper::v1::ERROR_SANDBOX_UNSUPPORTED,
                blocked_syscall_message("openat2", "needed to protect the project"));
  }
  return UniqueFd(static_cast<int>(fd));
}

class ProjectGuard {
 public:
  ProjectGuard(const SandboxPlan& plan, int root_fd, int project_fd)
      : plan_(plan), root_fd_(root_fd), project_fd_(project_fd) {}

  void create_missing(const Pin& pin) const;
  void mask(const std::string& relative) const;
  void pin(const Pin& pin) const;

 private:
  std::string shown(const std::string& relative) const {
    return relative.empty() ? plan_.project_root() : plan_.project_root() + "/" + relative;
  }
  [[noreturn]] void unsupported(const std::string& relative, const std::string& why) const {
    throw Error(ERROR_PROTECTED_PATH_UNSUPPORTED,
                "cannot protect " + shown(relative) + " from the role: " + why);
  }

  const SandboxPlan& plan_;
  const int root_fd_;
  const int project_fd_;
};

// Makes `pin` and the directories above it that are missing, as the role through the idmapped
// mount, so they land owned by the caller. A directory the role may not write stays as it is
// only where the role could not change that: one it owns it could chmod, so that refuses the
// launch.
void ProjectGuard::create_missing(const Pin& pin) const {
  FsCredentials creds(plan_.ids().role_uid(), plan_.ids().role_gid());
  const std::string& relative = pin.path();
  for (std::size_t end = relative.find('/');; end = relative.find('/', end + 1)) {
    const bool last = end == std::string::npos;
    const std::string path = last ? relative : relative.substr(0, end);
    UniqueFd parent = open_beneath(project_fd_, parent_of(path), O_PATH | O_DIRECTORY);
    if (!parent.valid()) {
      if (errno == ELOOP || errno == EXDEV || errno == ENOTDIR) {
        unsupported(parent_of(path), "it is not a directory (a symbolic link?)");
      }
      return;
    }
    const std::string name = path.substr(path.rfind('/') + 1);
    UniqueFd file;
    bool made = false;
    if (!last || pin.create() == Pin::DIRECTORY) {
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
    if (file.valid() && write(file.get(), pin.content().data(), pin.content().size()) !=
                            static_cast<ssize_t>(pin.content().size())) {
      throw_errno("write " + shown(path));
    }
    if (last) return;
  }
}

// Root reaches through the idmapped mount all the role could and more: a file it cannot reach
// (behind another user's directory) the role cannot either.
void ProjectGuard::mask(const std::string& relative) const {
  UniqueFd target = open_beneath(project_fd_, relative, O_PATH);
  if (!target.valid()) {
    if (errno == ENOENT || errno == EACCES) return;
    throw Error(ERROR_PROJECT_SCAN_INCOMPLETE, "the project changed while the launch read it (" +
                                                   shown(relative) + ": " + strerror(errno) +
                                                   "); launch again");
  }
  struct stat st {};
  if (fstat(target.get(), &st) != 0) throw_errno("fstat " + shown(relative));
  if (S_ISREG(st.st_mode)) mask_with(root_fd_, kMaskFile, target.get(), "hidden file " + relative);
  if (S_ISDIR(st.st_mode))
    mask_with(root_fd_, kMaskDir, target.get(), "hidden directory " + relative);
}

// Binds the path onto itself (with what is mounted below it, the masks among them), read-only
// if asked.
void ProjectGuard::pin(const Pin& pin) const {
  const std::string& relative = pin.path();
  UniqueFd target = open_beneath(project_fd_, relative, O_PATH);
  if (!target.valid()) {
    if (errno == ENOENT || errno == EACCES) return;
    if (errno == ELOOP || errno == EXDEV) {
      unsupported(relative, "it or a directory above it is a symbolic link; remove it");
    }
    throw_errno("open " + shown(relative));
  }
  struct stat st {};
  if (fstat(target.get(), &st) != 0) throw_errno("fstat " + shown(relative));
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
    unsupported(relative, "it is neither a directory nor a regular file; remove it");
  }
  UniqueFd clone = clone_private(target.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, shown(relative));
  if (!clone.valid()) throw_errno("open_tree " + shown(relative));
  // A writable pin below a read-only one (a submodule's git dir below .git/modules) is cloned
  // from that read-only mount: it is made writable again, itself only.
  if (pin.read_only()) {
    set_mount_attrs(clone.get(), MOUNT_ATTR_RDONLY, false, shown(relative));
  } else {
    set_mount_attrs(clone.get(), 0, false, shown(relative), MOUNT_ATTR_RDONLY);
  }
  attach(clone.get(), target.get(), shown(relative));
  verify_mount_flags(clone.get(), pin.read_only() ? kReadOnlyFlags : ST_NOSUID | ST_NODEV,
                     shown(relative));
}

}  // namespace

void guard_project_exits(const SandboxPlan& plan, int root_fd, int project_fd) {
  const ProjectGuard guard(plan, root_fd, project_fd);
  for (const Pin& pin : plan.pins()) {
    if (pin.create() != Pin::NOTHING) guard.create_missing(pin);
  }
  for (const std::string& mask : plan.masks()) guard.mask(mask);
  for (const Pin& pin : plan.pins()) guard.pin(pin);
}

}  // namespace pando::sandbox
