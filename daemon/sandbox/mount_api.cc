#include "daemon/sandbox/mount_api.h"

#include <fcntl.h>
#include <sys/fsuid.h>
#include <sys/stat.h>

#include <cerrno>
#include <utility>

#include "common/blocked_syscall.h"
#include "proto/error.h"

namespace pando::sandbox {

namespace {

[[noreturn]] void fail(const std::string& message) {
  throw Error(pando::helper::v1::ERROR_LAUNCH_FAILED, message);
}

}  // namespace

std::vector<std::string> split_absolute(const std::string& path, const std::string& what) {
  if (path.empty() || path[0] != '/') fail(what + " is not an absolute path: " + path);
  std::vector<std::string> parts;
  if (path == "/") return parts;
  std::size_t pos = 1;
  while (pos <= path.size()) {
    std::size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    std::string part = path.substr(pos, next - pos);
    if (part.empty() || part == "." || part == ".." || part.find('\0') != std::string::npos) {
      fail(what + " is not a normalized path: " + path);
    }
    parts.push_back(std::move(part));
    pos = next + 1;
  }
  return parts;
}

namespace {

void restore_root_fs_ids() {
  setfsuid(0);
  setfsgid(0);
}

}  // namespace

FsCredentials::FsCredentials(uid_t uid, gid_t gid) {
  setfsgid(gid);
  setfsuid(uid);
  if (static_cast<uid_t>(setfsuid(static_cast<uid_t>(-1))) != uid ||
      static_cast<gid_t>(setfsgid(static_cast<gid_t>(-1))) != gid) {
    restore_root_fs_ids();
    fail("setfsuid/setfsgid to " + std::to_string(uid) + " failed");
  }
}

FsCredentials::~FsCredentials() { restore_root_fs_ids(); }

UniqueFd open_dir_beneath(int root_fd, const std::vector<std::string>& parts, bool create,
                          const std::string& what) {
  UniqueFd dir(fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!dir.valid()) throw_errno("dup for " + what);
  for (const std::string& part : parts) {
    int next = openat(dir.get(), part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0 && errno == ENOENT && create) {
      struct stat parent {};
      if (fstat(dir.get(), &parent) != 0) throw_errno("fstat parent of " + what);
      {
        FsCredentials creds(parent.st_uid, parent.st_gid);
        if (mkdirat(dir.get(), part.c_str(), parent.st_uid == 0 ? 0755 : 0700) != 0 &&
            errno != EEXIST) {
          throw_errno("mkdir " + part + " for " + what);
        }
      }
      next = openat(dir.get(), part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (next < 0) {
      if (errno == ENOTDIR || errno == ELOOP) {
        fail(what + ": component " + part + " is not a directory (symlinks are not followed)");
      }
      throw_errno("open " + part + " for " + what);
    }
    dir.reset(next);
  }
  return dir;
}

UniqueFd new_filesystem(const char* type, const std::vector<MountOption>& options, unsigned attrs) {
  UniqueFd context(fsopen(type, FSOPEN_CLOEXEC));
  if (!context.valid()) throw_errno(std::string("fsopen ") + type);
  for (const MountOption& option : options) {
    const unsigned cmd = option.value == nullptr ? FSCONFIG_SET_FLAG : FSCONFIG_SET_STRING;
    if (fsconfig(context.get(), cmd, option.key, option.value, 0) != 0) {
      throw_errno(std::string("fsconfig ") + type + " " + option.key);
    }
  }
  if (fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    throw_errno(std::string("create ") + type);
  }
  UniqueFd mount_fd(fsmount(context.get(), FSMOUNT_CLOEXEC, attrs));
  if (!mount_fd.valid()) throw_errno(std::string("fsmount ") + type);
  return mount_fd;
}

void set_mount_attrs(int mount_fd, std::uint64_t attrs, bool recursive, const std::string& what,
                     std::uint64_t clear) {
  mount_attr attr{};
  attr.attr_set = attrs;
  attr.attr_clr = clear;
  const unsigned flags = AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0);
  if (mount_setattr(mount_fd, "", flags, &attr, sizeof(attr)) != 0) {
    throw_if_refused_by_environment(kMountSetattrCall, what);
    throw_errno("mount_setattr " + what);
  }
}

void verify_mount_flags(int fd, unsigned long want, const std::string& what) {
  struct statvfs st {};
  if (fstatvfs(fd, &st) != 0) throw_errno("fstatvfs " + what);
  if ((st.f_flag & want) != want) {
    fail(what + ": mount flags did not take (have 0x" + std::to_string(st.f_flag) + ")");
  }
}

void attach(int mount_fd, int target_fd, const std::string& what) {
  if (move_mount(mount_fd, "", target_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) !=
      0) {
    throw_errno("move_mount " + what);
  }
}

UniqueFd clone_private(int dir_fd, const char* path, unsigned flags, const std::string& what) {
  UniqueFd tree(open_tree(dir_fd, path, flags | OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree.valid()) {
    throw_if_refused_by_environment(kOpenTreeCall, what);
    return tree;
  }
  mount_attr attr{};
  attr.propagation = MS_PRIVATE;
  if (mount_setattr(tree.get(), "", AT_EMPTY_PATH | (flags & AT_RECURSIVE), &attr, sizeof(attr)) !=
      0) {
    throw_if_refused_by_environment(kMountSetattrCall, what);
    throw_errno("make the copy of " + what + " private");
  }
  return tree;
}

UniqueFd clone_host_tree(int dir_fd, const char* path, bool recursive, const std::string& what) {
  UniqueFd tree = clone_private(dir_fd, path, recursive ? AT_RECURSIVE : 0, what);
  if (!tree.valid()) {
    if (errno == ENOENT) fail(what + " does not exist on the host");
    throw_errno("open_tree " + what);
  }
  return tree;
}

void mask_with(int root_fd, const char* mask, int target_fd, const std::string& what) {
  UniqueFd clone = clone_private(root_fd, mask, 0, "mask for " + what);
  if (!clone.valid()) throw_errno("open_tree mask for " + what);
  set_mount_attrs(clone.get(), kReadOnlyAttrs | MOUNT_ATTR_NOEXEC, false, "mask " + what);
  attach(clone.get(), target_fd, "mask " + what);
  verify_mount_flags(clone.get(), kReadOnlyFlags | ST_NOEXEC, "mask " + what);
}

}  // namespace pando::sandbox
