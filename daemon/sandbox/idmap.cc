#include "daemon/sandbox/idmap.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "daemon/sandbox/mount_api.h"
#include "proto/error.h"

namespace pando::sandbox {

namespace {

using pando::helper::v1::ERROR_IDMAP_UNSUPPORTED;
using pando::helper::v1::ERROR_LAUNCH_FAILED;

// --- filesystem names -----------------------------------------------------

std::string filesystem_name(int fd) {
  struct statfs st {};
  if (fstatfs(fd, &st) != 0) return "(unknown)";
  static constexpr std::pair<unsigned long, const char*> kNames[] = {
      {0xEF53, "ext2/ext3/ext4"}, {0x9123683E, "btrfs"},   {0x58465342, "xfs"},
      {0x01021994, "tmpfs"},      {0x858458F6, "ramfs"},   {0x6969, "nfs"},
      {0xFF534D42, "cifs"},       {0xFE534D42, "smb2"},    {0x65735546, "fuse"},
      {0x794C7630, "overlayfs"},  {0x4D44, "vfat/msdos"},  {0x2011BAB0, "exfat"},
      {0x5346544E, "ntfs"},       {0x7366746E, "ntfs3"},   {0xF2F52010, "f2fs"},
      {0xF15F, "ecryptfs"},       {0x01021997, "9p"},      {0x00C36400, "ceph"},
      {0x2FC12FC1, "zfs"},        {0xE0F5E1E2, "erofs"},   {0x73717368, "squashfs"},
      {0x9660, "iso9660"},        {0x137F, "minix"},       {0x138F, "minix"},
      {0x2468, "minix2"},         {0x2478, "minix2"},      {0x4D5A, "minix3"},
      {0x9FA0, "proc"},           {0x62656572, "sysfs"},   {0x958458F6, "hugetlbfs"},
      {0x1CD1, "devpts"},         {0x63677270, "cgroup2"}, {0x0027E0EB, "cgroup"},
      {0x61756673, "aufs"},
  };
  const auto type = static_cast<unsigned long>(st.f_type) & 0xFFFFFFFFUL;
  for (const auto& [magic, name] : kNames) {
    if (magic == type) return name;
  }
  char hex[32];
  std::snprintf(hex, sizeof(hex), "0x%lx", type);
  return hex;
}

// --- idmapping ------------------------------------------------------------

// Kills and reaps the user-namespace holder child on every path.
class HolderChild {
 public:
  HolderChild(pid_t pid, int pipe_write) : pid_(pid), pipe_write_(pipe_write) {}
  ~HolderChild() {
    pipe_write_.reset();
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, __WALL) < 0 && errno == EINTR) {
    }
  }
  HolderChild(const HolderChild&) = delete;
  HolderChild& operator=(const HolderChild&) = delete;

 private:
  pid_t pid_;
  UniqueFd pipe_write_;
};

void write_proc_file(int proc_fd, const std::string& path, const std::string& content) {
  UniqueFd file(openat(proc_fd, path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!file.valid()) throw_errno("open " + path);
  if (write(file.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    throw_errno("write " + path);
  }
}

// A user namespace whose only mapping is caller -> role (uid and gid), for
// MOUNT_ATTR_IDMAP: on such a mount the caller's files appear owned by the
// role and the role's new files land owned by the caller. `proc_fd` must be a
// procfs of the calling process's pid namespace. A tiny child holds the
// namespace while the maps are written; it only closes, reads and _exits
// (async-signal-safe), and it is killed and reaped before returning.
UniqueFd make_idmap_userns(int proc_fd, uid_t caller_uid, gid_t caller_gid, uid_t role_uid,
                           gid_t role_gid) {
  if (caller_uid == 0 || caller_gid == 0 || role_uid == 0 || role_gid == 0) {
    throw Error(ERROR_LAUNCH_FAILED,
                "refusing to idmap uid/gid 0 (caller " + std::to_string(caller_uid) + ":" +
                    std::to_string(caller_gid) + ", role " + std::to_string(role_uid) + ":" +
                    std::to_string(role_gid) + ")");
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  UniqueFd pipe_read(pipe_fds[0]);
  UniqueFd pipe_write(pipe_fds[1]);
  // Exit signal 0: no SIGCHLD for the daemon's handlers, reaped with __WALL.
  const long pid = syscall(SYS_clone, CLONE_NEWUSER, nullptr, nullptr, nullptr, nullptr);
  if (pid < 0) throw_errno("clone(CLONE_NEWUSER)");
  if (pid == 0) {
    close(pipe_fds[1]);
    char byte;
    while (read(pipe_fds[0], &byte, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  HolderChild holder(static_cast<pid_t>(pid), pipe_write.release());
  const std::string dir = std::to_string(pid) + "/";
  write_proc_file(proc_fd, dir + "uid_map",
                  std::to_string(caller_uid) + " " + std::to_string(role_uid) + " 1\n");
  write_proc_file(proc_fd, dir + "gid_map",
                  std::to_string(caller_gid) + " " + std::to_string(role_gid) + " 1\n");
  UniqueFd userns(openat(proc_fd, (dir + "ns/user").c_str(), O_RDONLY | O_CLOEXEC));
  if (!userns.valid()) throw_errno("open ns/user of the idmap holder");
  return userns;
}

std::string idmap_unsupported(int fs_fd) {
  return "filesystem " + filesystem_name(fs_fd) + " does not support idmapped mounts";
}

bool is_idmap_unsupported_errno(int err) {
  return err == EINVAL || err == EPERM || err == ENOSYS || err == EOPNOTSUPP;
}

// Idmaps the detached tree `tree_fd` (whose filesystem is named after
// `fs_fd`). Never falls back to a plain bind.
void apply_idmap(int tree_fd, int userns_fd, int fs_fd, const std::string& what) {
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_IDMAP;
  attr.userns_fd = static_cast<std::uint64_t>(userns_fd);
  if (mount_setattr(tree_fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) {
    const int err = errno;
    if (is_idmap_unsupported_errno(err)) {
      throw Error(ERROR_IDMAP_UNSUPPORTED, what + ": " + idmap_unsupported(fs_fd));
    }
    errno = err;
    throw_errno("idmap " + what);
  }
}

// A detached, idmapped copy of the caller's directory `dir_fd`.
UniqueFd idmapped_clone(int dir_fd, int userns_fd, bool writable, const std::string& what) {
  UniqueFd tree = clone_private(dir_fd, "", AT_EMPTY_PATH, what);
  if (!tree.valid()) throw_errno("open_tree(OPEN_TREE_CLONE) " + what);
  std::uint64_t attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (!writable) attrs |= MOUNT_ATTR_RDONLY;
  set_mount_attrs(tree.get(), attrs, false, what);
  apply_idmap(tree.get(), userns_fd, dir_fd, what);
  return tree;
}

}  // namespace

CallerTrees clone_caller_trees(const std::string& project_root, int project_fd, int sandbox_dir_fd,
                               int auth_home_fd, int userns_fd, bool project_writable) {
  CallerTrees trees;
  trees.project = idmapped_clone(project_fd, userns_fd, project_writable, project_root);
  trees.sandbox_dir =
      idmapped_clone(sandbox_dir_fd, userns_fd, true, "sandbox home in " + project_root);
  if (auth_home_fd >= 0) {
    trees.auth_home = idmapped_clone(auth_home_fd, userns_fd, false, "auth home");
  }
  return trees;
}

UniqueFd make_idmap_userns(uid_t caller_uid, gid_t caller_gid, uid_t role_uid, gid_t role_gid) {
  UniqueFd proc(open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!proc.valid()) throw_errno("open /proc");
  return make_idmap_userns(proc.get(), caller_uid, caller_gid, role_uid, role_gid);
}

IdmapCheck check_idmap_support(int dir_fd, uid_t caller_uid, gid_t caller_gid, uid_t role_uid,
                               gid_t role_gid) {
  UniqueFd userns = make_idmap_userns(caller_uid, caller_gid, role_uid, role_gid);
  try {
    idmapped_clone(dir_fd, userns.get(), true, "project");
  } catch (const Error& error) {
    if (error.code() != ERROR_IDMAP_UNSUPPORTED) throw;
    return {false, idmap_unsupported(dir_fd)};
  }
  return {true, filesystem_name(dir_fd)};
}

}  // namespace pando::sandbox
