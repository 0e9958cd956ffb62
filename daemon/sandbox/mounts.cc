#include "daemon/sandbox/mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <signal.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "daemon/sandbox/mount_api.h"
#include "daemon/sandbox/namespaces.h"
#include "daemon/sandbox/proc_masks.h"
#include "daemon/sandbox/project_exits.h"
#include "proto/error.h"

namespace pando::sandbox {

namespace {

using pando::helper::sandbox::v1::IdMapping;
using pando::helper::sandbox::v1::SandboxPlan;
using pando::helper::v1::ERROR_IDMAP_UNSUPPORTED;
using pando::helper::v1::ERROR_LAUNCH_FAILED;

constexpr off_t kMaxCopiedFileSize = 16 << 20;

[[noreturn]] void fail(const std::string& message) { throw Error(ERROR_LAUNCH_FAILED, message); }

// Binds a root-owned host path read-only, nosuid, nodev (with its submounts)
// onto the directory `target_fd`, and verifies the flags.
void bind_host_read_only(const std::string& host_path, int target_fd) {
  UniqueFd tree = clone_host_tree(AT_FDCWD, host_path.c_str(), true, host_path);
  set_mount_attrs(tree.get(), kReadOnlyAttrs, true, host_path);
  attach(tree.get(), target_fd, host_path);
  verify_mount_flags(tree.get(), kReadOnlyFlags, host_path);
}

// Mounts a caller tree from the daemon onto `target_fd`. Its root is owned by
// the caller on disk, so it must appear owned by the role: proof that the
// idmap is in place before the role can touch it.
void attach_caller_tree(const UniqueFd& tree, uid_t role_uid, bool writable, int target_fd,
                        const std::string& what) {
  struct stat st {};
  if (fstat(tree.get(), &st) != 0) throw_errno("fstat " + what);
  if (st.st_uid != role_uid) {
    fail(what + " is not idmapped to the role (owner " + std::to_string(st.st_uid) + ")");
  }
  attach(tree.get(), target_fd, what);
  verify_mount_flags(tree.get(), writable ? ST_NOSUID | ST_NODEV : kReadOnlyFlags, what);
}

// --- files ----------------------------------------------------------------

void write_file(int dir_fd, const char* name, const std::string& content, mode_t mode) {
  UniqueFd file(openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!file.valid()) throw_errno(std::string("create /etc/") + name);
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(file.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw_errno(std::string("write /etc/") + name);
    done += static_cast<std::size_t>(n);
  }
}

// Copies a root-owned host file (following a root-owned symlink, as for
// /etc/localtime) to a new file `name` in `dir_fd`, inside the kernel
// (sendfile): no buffer of ours is filled, which costs page faults. Does
// nothing when the host file does not exist.
void copy_host_file(int host_dir_fd, const char* host_path, int dir_fd, const char* name) {
  UniqueFd in(openat(host_dir_fd, host_path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!in.valid()) {
    if (errno == ENOENT) return;
    throw_errno(std::string("open host ") + host_path);
  }
  struct stat st {};
  if (fstat(in.get(), &st) != 0) throw_errno(std::string("fstat host ") + host_path);
  if (!S_ISREG(st.st_mode) || st.st_size > kMaxCopiedFileSize) {
    fail(std::string("host ") + host_path + " is not a regular file of sane size");
  }
  UniqueFd out(openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!out.valid()) throw_errno(std::string("create /etc/") + name);
  off_t copied = 0;
  for (;;) {
    const ssize_t n = sendfile(out.get(), in.get(), nullptr,
                               static_cast<std::size_t>(kMaxCopiedFileSize + 1 - copied));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno(std::string("copy host ") + host_path);
    if (n == 0) return;
    copied += n;
    if (copied > kMaxCopiedFileSize) fail(std::string("host ") + host_path + " grew while copying");
  }
}

void check_passwd_field(const std::string& value, const std::string& what) {
  if (value.empty() || value.find_first_of(":\n,") != std::string::npos ||
      value.find('\0') != std::string::npos) {
    fail(what + " is not usable in /etc/passwd: '" + value + "'");
  }
}

// --- the pieces of the view -----------------------------------------------

// /etc without the identity files, which populate_identity() adds per request.
UniqueFd populate_host_etc(int root_fd) {
  UniqueFd etc_mount =
      new_filesystem("tmpfs", {{"mode", "0755"}, {"size", "8m"}, {"nr_inodes", "1024"}},
                     MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
  UniqueFd etc_target = open_dir_beneath(root_fd, {"etc"}, true, "/etc");
  attach(etc_mount.get(), etc_target.get(), "/etc");
  const int etc = etc_mount.get();

  copy_host_file(AT_FDCWD, "/etc/ld.so.cache", etc, "ld.so.cache");
  write_file(etc, "nsswitch.conf",
             "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\n"
             "protocols: files\nservices: files\nethers: files\nrpc: files\nnetgroup: files\n",
             0644);
  write_file(etc, "hosts",
             std::string("127.0.0.1 localhost ") + kSandboxHostName + "\n::1 localhost " +
                 kSandboxHostName + "\n",
             0644);
  write_file(etc, "hostname", std::string(kSandboxHostName) + "\n", 0644);
  copy_host_file(AT_FDCWD, "/etc/localtime", etc, "localtime");
  struct stat st {};
  if (stat("/etc/ssl/certs", &st) == 0 && S_ISDIR(st.st_mode)) {
    UniqueFd certs = open_dir_beneath(etc, {"ssl", "certs"}, true, "/etc/ssl/certs");
    bind_host_read_only("/etc/ssl/certs", certs.get());
    UniqueFd ssl = open_dir_beneath(etc, {"ssl"}, false, "/etc/ssl");
    copy_host_file(AT_FDCWD, "/etc/ssl/openssl.cnf", ssl.get(), "openssl.cnf");
  }
  if (stat("/etc/alternatives", &st) == 0 && S_ISDIR(st.st_mode)) {
    UniqueFd alternatives = open_dir_beneath(etc, {"alternatives"}, true, "/etc/alternatives");
    bind_host_read_only("/etc/alternatives", alternatives.get());
  }
  return etc_mount;
}

// /etc/passwd and /etc/group: root, the role and nobody; then /etc turns read-only.
void populate_identity(const SandboxPlan& plan, int etc) {
  const IdMapping& ids = plan.ids();
  check_passwd_field(plan.role_user_name(), "role user name");
  check_passwd_field(plan.role_group_name(), "role group name");
  check_passwd_field(plan.sandbox_home(), "sandbox home");
  write_file(etc, "passwd",
             "root:x:0:0:root:/root:/bin/sh\n" + plan.role_user_name() +
                 ":x:" + std::to_string(ids.role_uid()) + ":" + std::to_string(ids.role_gid()) +
                 ":pando role:" + plan.sandbox_home() +
                 ":/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
             0644);
  write_file(etc, "group",
             "root:x:0:\n" + plan.role_group_name() + ":x:" + std::to_string(ids.role_gid()) +
                 ":\nnogroup:x:65534:\n",
             0644);

  set_mount_attrs(etc, MOUNT_ATTR_RDONLY, false, "/etc read-only");
  verify_mount_flags(etc, kReadOnlyFlags, "/etc");
}

void populate_dev(int root_fd) {
  UniqueFd dev_mount =
      new_filesystem("tmpfs", {{"mode", "0755"}, {"size", "64k"}, {"nr_inodes", "64"}},
                     MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
  UniqueFd target = open_dir_beneath(root_fd, {"dev"}, true, "/dev");
  attach(dev_mount.get(), target.get(), "/dev");
  const int dev = dev_mount.get();
  // mknod rather than binding the host nodes: the set is fixed and does not
  // depend on what the host's /dev holds.
  static constexpr struct {
    const char* name;
    unsigned major;
    unsigned minor;
  } kDevices[] = {{"null", 1, 3},   {"zero", 1, 5},    {"full", 1, 7},
                  {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};
  for (const auto& device : kDevices) {
    if (mknodat(dev, device.name, S_IFCHR | 0666, makedev(device.major, device.minor)) != 0) {
      throw_errno(std::string("mknod /dev/") + device.name);
    }
  }
  static constexpr std::pair<const char*, const char*> kLinks[] = {
      {"/proc/self/fd", "fd"},       {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"},
      {"/proc/self/fd/2", "stderr"}, {"pts/ptmx", "ptmx"},
  };
  for (const auto& [to, name] : kLinks) {
    if (symlinkat(to, dev, name) != 0) throw_errno(std::string("symlink /dev/") + name);
  }
  for (const char* dir : {"pts", "shm"}) {
    if (mkdirat(dev, dir, 0755) != 0) throw_errno(std::string("mkdir /dev/") + dir);
  }
  UniqueFd pts =
      new_filesystem("devpts", {{"newinstance", nullptr}, {"ptmxmode", "0666"}, {"mode", "0620"}},
                     MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
  UniqueFd pts_target = open_dir_beneath(dev, {"pts"}, false, "/dev/pts");
  attach(pts.get(), pts_target.get(), "/dev/pts");
  verify_mount_flags(pts.get(), ST_NOSUID | ST_NOEXEC, "/dev/pts");
  UniqueFd shm = new_filesystem("tmpfs", {{"mode", "1777"}, {"size", "25%"}},
                                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
  UniqueFd shm_target = open_dir_beneath(dev, {"shm"}, false, "/dev/shm");
  attach(shm.get(), shm_target.get(), "/dev/shm");
  verify_mount_flags(shm.get(), ST_NOSUID | ST_NODEV | ST_NOEXEC, "/dev/shm");
  set_mount_attrs(dev, MOUNT_ATTR_RDONLY, false, "/dev read-only");
  verify_mount_flags(dev, ST_RDONLY | ST_NOSUID | ST_NOEXEC, "/dev");
}

void populate_proc(int root_fd, int proc_fd) {
  UniqueFd target = open_dir_beneath(root_fd, {"proc"}, true, "/proc");
  attach(proc_fd, target.get(), "/proc");
  verify_mount_flags(proc_fd, ST_NOSUID | ST_NODEV | ST_NOEXEC, "/proc");
  for (const char* name : kProcReadOnly) {
    UniqueFd entry(openat(proc_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!entry.valid()) {
      if (errno == ENOENT) continue;
      throw_errno(std::string("open /proc/") + name);
    }
    UniqueFd clone = clone_private(proc_fd, name, AT_RECURSIVE | AT_SYMLINK_NOFOLLOW,
                                   std::string("/proc/") + name);
    if (!clone.valid()) throw_errno(std::string("open_tree /proc/") + name);
    set_mount_attrs(clone.get(), kReadOnlyAttrs | MOUNT_ATTR_NOEXEC, true,
                    std::string("/proc/") + name);
    attach(clone.get(), entry.get(), std::string("/proc/") + name);
    verify_mount_flags(clone.get(), kReadOnlyFlags | ST_NOEXEC, std::string("/proc/") + name);
  }
  for (const char* name : kProcMasked) {
    UniqueFd entry(openat(proc_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!entry.valid()) {
      if (errno == ENOENT) continue;
      throw_errno(std::string("open /proc/") + name);
    }
    struct stat st {};
    if (fstat(entry.get(), &st) != 0) throw_errno(std::string("fstat /proc/") + name);
    mask_with(root_fd, S_ISDIR(st.st_mode) ? kMaskDir : kMaskFile, entry.get(),
              std::string("/proc/") + name);
  }
}

// System directories: /usr bound read-only; /bin, /sbin, /lib* recreated as
// the symlinks they are on merged-/usr hosts, bound otherwise.
void populate_system(int root_fd) {
  UniqueFd usr = open_dir_beneath(root_fd, {"usr"}, true, "/usr");
  bind_host_read_only("/usr", usr.get());
  for (const char* name : {"bin", "sbin", "lib", "lib32", "lib64", "libx32"}) {
    const std::string host = std::string("/") + name;
    struct stat st {};
    if (lstat(host.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      throw_errno("lstat " + host);
    }
    if (S_ISLNK(st.st_mode)) {
      char link[4096];
      const ssize_t n = readlink(host.c_str(), link, sizeof(link) - 1);
      if (n < 0) throw_errno("readlink " + host);
      link[n] = '\0';
      if (symlinkat(link, root_fd, name) != 0) throw_errno("symlink " + host);
    } else if (S_ISDIR(st.st_mode)) {
      UniqueFd target = open_dir_beneath(root_fd, {name}, true, host);
      bind_host_read_only(host, target.get());
    }
  }
}

void populate_runtime_paths(const SandboxPlan& plan, const std::vector<UniqueFd>& trees,
                            int root_fd) {
  if (trees.size() != static_cast<size_t>(plan.runtime_paths_size())) {
    fail("the daemon sent " + std::to_string(trees.size()) + " runtime trees for " +
         std::to_string(plan.runtime_paths_size()) + " runtime paths");
  }
  for (int i = 0; i < plan.runtime_paths_size(); ++i) {
    const std::string& path = plan.runtime_paths(i);
    std::vector<std::string> parts = split_absolute(path, "runtime path");
    const UniqueFd& tree = trees[static_cast<size_t>(i)];
    struct stat st {};
    if (fstat(tree.get(), &st) != 0) throw_errno("fstat runtime path " + path);
    UniqueFd target;
    if (S_ISDIR(st.st_mode)) {
      target = open_dir_beneath(root_fd, parts, true, "runtime path " + path);
    } else {
      const std::string name = parts.back();
      parts.pop_back();
      UniqueFd parent = open_dir_beneath(root_fd, parts, true, "runtime path " + path);
      UniqueFd file(
          openat(parent.get(), name.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0444));
      if (!file.valid()) throw_errno("create mount point for runtime path " + path);
      target.reset(openat(parent.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
      if (!target.valid()) throw_errno("open mount point for runtime path " + path);
    }
    set_mount_attrs(tree.get(), kReadOnlyAttrs, true, "runtime path " + path);
    attach(tree.get(), target.get(), "runtime path " + path);
    verify_mount_flags(tree.get(), kReadOnlyFlags, "runtime path " + path);
  }
}

void pivot_into(int root_fd) {
  if (unlinkat(root_fd, kMaskFile, 0) != 0) throw_errno("remove mask file");
  if (unlinkat(root_fd, kMaskDir, AT_REMOVEDIR) != 0) throw_errno("remove mask dir");
  if (fchdir(root_fd) != 0) throw_errno("fchdir new root");
  // The old root ends up stacked on "."; detaching it leaves nothing of the
  // host reachable but what was bound into the new root.
  if (syscall(SYS_pivot_root, ".", ".") != 0) throw_errno("pivot_root");
  if (umount2(".", MNT_DETACH) != 0) throw_errno("detach old root");
  if (chdir("/") != 0) throw_errno("chdir /");
  set_mount_attrs(root_fd, MOUNT_ATTR_RDONLY, false, "/ read-only");
  struct statvfs st {};
  if (statvfs("/", &st) != 0) throw_errno("statvfs /");
  if ((st.f_flag & (ST_RDONLY | ST_NOSUID | ST_NODEV)) != (ST_RDONLY | ST_NOSUID | ST_NODEV)) {
    fail("new root is not read-only");
  }
}

class UmaskGuard {
 public:
  UmaskGuard() : saved_(umask(0)) {}
  ~UmaskGuard() { umask(saved_); }
  UmaskGuard(const UmaskGuard&) = delete;
  UmaskGuard& operator=(const UmaskGuard&) = delete;

 private:
  mode_t saved_;
};

}  // namespace

UniqueFd clone_runtime_tree(const std::string& path) {
  if (split_absolute(path, "runtime path").empty()) fail("runtime path / is not allowed");
  return clone_host_tree(AT_FDCWD, path.c_str(), true, "runtime path " + path);
}

BaseView build_base_view() {
  UmaskGuard umask_guard;
  // Nothing done below may propagate back to the host.
  if (mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) throw_errno("make / private");

  // The new root is attached on /tmp of this (private) mount namespace: an
  // existing root-owned directory, so nothing is created on the host; the
  // whole old tree is detached by pivot_root. Runtime paths under the host's
  // /tmp stay reachable: the daemon clones them.
  BaseView base;
  base.root = new_filesystem("tmpfs", {{"mode", "0755"}, {"size", "1m"}, {"nr_inodes", "4096"}},
                             MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
  {
    UniqueFd anchor(open("/tmp", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!anchor.valid()) throw_errno("open /tmp");
    attach(base.root.get(), anchor.get(), "new root");
  }
  const int root = base.root.get();
  {
    UniqueFd mask(openat(root, kMaskFile, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444));
    if (!mask.valid()) throw_errno("create mask file");
    if (mkdirat(root, kMaskDir, 0555) != 0) throw_errno("create mask dir");
  }

  populate_system(root);
  base.etc = populate_host_etc(root);
  populate_dev(root);
  {
    // This pid namespace's procfs.
    UniqueFd proc = new_filesystem("proc", {{"hidepid", "invisible"}},
                                   MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    populate_proc(root, proc.get());
  }
  {
    UniqueFd tmp = new_filesystem("tmpfs", {{"mode", "1777"}, {"size", "25%"}},
                                  MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    UniqueFd target = open_dir_beneath(root, {"tmp"}, true, "/tmp");
    attach(tmp.get(), target.get(), "/tmp");
    verify_mount_flags(tmp.get(), ST_NOSUID | ST_NODEV, "/tmp");
  }
  return base;
}

void complete_filesystem_view(BaseView& base, const SandboxPlan& plan, PlanTrees& trees) {
  UmaskGuard umask_guard;
  const uid_t role_uid = plan.ids().role_uid();
  const std::vector<std::string> project_parts =
      split_absolute(plan.project_root(), "project root");
  if (project_parts.empty()) fail("the project root cannot be /");
  const std::string& home = plan.sandbox_home();
  if (home.size() <= plan.project_root().size() + 1 ||
      home.compare(0, plan.project_root().size() + 1, plan.project_root() + "/") != 0) {
    fail("sandbox home " + home + " is not below the project root");
  }
  const std::vector<std::string> home_parts =
      split_absolute(home.substr(plan.project_root().size()), "sandbox home");
  CallerTrees& caller = trees.caller;
  if (!caller.project.valid() || !caller.sandbox_dir.valid() ||
      caller.auth_home.valid() != plan.has_auth_home()) {
    fail("the daemon sent the wrong set of project trees");
  }
  const int root = base.root.get();

  populate_identity(plan, base.etc.get());
  populate_runtime_paths(plan, trees.runtime, root);
  {
    UniqueFd target = open_dir_beneath(root, project_parts, true, "project root");
    attach_caller_tree(caller.project, role_uid, plan.project_writable(), target.get(),
                       plan.project_root());
  }
  {
    // Resolved inside the project mount, which the caller controls: one
    // component at a time, no symlinks, and it must be the directory the
    // daemon prepared.
    UniqueFd target =
        open_dir_beneath(caller.project.get(), home_parts, false, "sandbox home " + home);
    struct stat want {};
    struct stat have {};
    if (fstat(caller.sandbox_dir.get(), &want) != 0) throw_errno("fstat sandbox dir tree");
    if (fstat(target.get(), &have) != 0) throw_errno("fstat sandbox home");
    if (want.st_dev != have.st_dev || want.st_ino != have.st_ino) {
      fail("sandbox home " + home + " is not the directory the daemon prepared");
    }
    attach_caller_tree(caller.sandbox_dir, role_uid, true, target.get(), home);
  }
  if (plan.has_auth_home()) {
    const std::vector<std::string> parts = split_absolute(plan.auth_home_target(), "auth home");
    if (parts.empty()) fail("the auth home cannot be mounted on /");
    UniqueFd target = open_dir_beneath(root, parts, true, "auth home");
    attach_caller_tree(caller.auth_home, role_uid, false, target.get(), plan.auth_home_target());
  }
  guard_project_exits(plan, root, caller.project.get());

  pivot_into(root);
}

}  // namespace pando::sandbox
