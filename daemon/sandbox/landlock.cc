#include "daemon/sandbox/landlock.h"

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/blocked_syscall.h"
#include "common/unique_fd.h"
#include "proto/error.h"

// Debian 12's <linux/landlock.h> stops at ABI 2; the kernel may offer more.
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)  // ABI 3
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)  // ABI 5
#endif
#ifndef LANDLOCK_ACCESS_NET_BIND_TCP
#define LANDLOCK_ACCESS_NET_BIND_TCP (1ULL << 0)  // ABI 4
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)  // ABI 6
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif

namespace pando::sandbox {
namespace {

using pando::helper::v1::ERROR_LAUNCH_FAILED;
using pando::helper::v1::ERROR_SANDBOX_UNSUPPORTED;

// The newest ABI whose rights this file knows; newer kernels accept it as is.
constexpr int kNewestKnownAbi = 7;

constexpr uint64_t kFsExecute = LANDLOCK_ACCESS_FS_EXECUTE;
constexpr uint64_t kFsWriteFile = LANDLOCK_ACCESS_FS_WRITE_FILE;
constexpr uint64_t kFsReadFile = LANDLOCK_ACCESS_FS_READ_FILE;
constexpr uint64_t kFsReadDir = LANDLOCK_ACCESS_FS_READ_DIR;
constexpr uint64_t kFsMakeChar = LANDLOCK_ACCESS_FS_MAKE_CHAR;
constexpr uint64_t kFsMakeSock = LANDLOCK_ACCESS_FS_MAKE_SOCK;
constexpr uint64_t kFsMakeFifo = LANDLOCK_ACCESS_FS_MAKE_FIFO;
constexpr uint64_t kFsMakeBlock = LANDLOCK_ACCESS_FS_MAKE_BLOCK;
constexpr uint64_t kFsTruncate = LANDLOCK_ACCESS_FS_TRUNCATE;
constexpr uint64_t kFsIoctlDev = LANDLOCK_ACCESS_FS_IOCTL_DEV;

// Filesystem rights each ABI handles (cumulative).
constexpr uint64_t kFsAbi1 = (1ULL << 13) - 1;  // EXECUTE .. MAKE_SYM
constexpr uint64_t kFsAbi2 = kFsAbi1 | LANDLOCK_ACCESS_FS_REFER;
constexpr uint64_t kFsAbi3 = kFsAbi2 | kFsTruncate;
constexpr uint64_t kFsAbi5 = kFsAbi3 | kFsIoctlDev;

// The only rights the kernel accepts in a rule whose target is not a directory.
constexpr uint64_t kFileOnlyRights =
    kFsExecute | kFsWriteFile | kFsReadFile | kFsTruncate | kFsIoctlDev;

// What each kind of path may do. Every grant is masked with the rights the
// running ABI handles, and reduced to kFileOnlyRights on a non-directory.
//
//   kind       rights
//   ReadExec   EXECUTE READ_FILE READ_DIR
//   ReadOnly   READ_FILE READ_DIR
//   List       READ_DIR
//   Device     READ_FILE WRITE_FILE
//   Terminal   READ_FILE WRITE_FILE READ_DIR IOCTL_DEV
//   ReadWrite  every handled right except MAKE_CHAR MAKE_BLOCK IOCTL_DEV
//              (no device nodes or device ioctls in writable trees)
//   OnDisk     ReadWrite except MAKE_FIFO MAKE_SOCK: what the role makes in
//              the project (its sandbox home included) is the caller's on the
//              host, where a FIFO hangs the tools that open it, and a bound
//              socket is reachable by every process that can open its path,
//              whatever its network namespace: another session of the caller
//              (the sandbox home is shared by every session of the role, and
//              the other role reads it) could connect and receive fds, the
//              caller's terminal among them. Only the session's private /tmp
//              and /dev/shm take FIFOs and sockets.
//
//   path                                   kind
//   /                                      List (the view's own minimal root;
//                                          rights add up, so every directory
//                                          below is listable, no file readable)
//   /usr /bin /sbin /lib /lib64 /lib32
//   /libx32 /etc /opt, runtime_paths       ReadExec
//   /proc /dev                             ReadOnly
//   /dev/{null,zero,full,random,urandom}   Device
//   /dev/tty /dev/ptmx /dev/pts            Terminal (no controlling tty after
//                                          setsid; ptys the role opens itself)
//   /dev/shm /tmp                          ReadWrite (OnDisk where they hold
//                                          the project: rights add up along
//                                          the path)
//   sandbox_home                           OnDisk
//   auth_home_target (if has_auth_home)    ReadExec: its mount is read-only,
//                                          and a rule follows the directory
//                                          wherever it is reached, so a
//                                          writable grant here would also
//                                          hold inside a project that
//                                          contains the caller's home
//   project_root                           OnDisk if project_writable,
//                                          else ReadExec
//
// Network (ABI >= 4): BIND_TCP and CONNECT_TCP handled with no rule, so every
// TCP bind/connect is denied. Scopes (ABI >= 6): abstract unix sockets and
// signals limited to the role's own Landlock domain.
enum class Kind { kList, kReadExec, kReadOnly, kDevice, kTerminal, kReadWrite, kOnDisk };

uint64_t rights_of(Kind kind, uint64_t handled_fs) {
  switch (kind) {
    case Kind::kList:
      return kFsReadDir;
    case Kind::kReadExec:
      return kFsExecute | kFsReadFile | kFsReadDir;
    case Kind::kReadOnly:
      return kFsReadFile | kFsReadDir;
    case Kind::kDevice:
      return kFsReadFile | kFsWriteFile;
    case Kind::kTerminal:
      return kFsReadFile | kFsWriteFile | kFsReadDir | kFsIoctlDev;
    case Kind::kReadWrite:
      return handled_fs & ~(kFsMakeChar | kFsMakeBlock | kFsIoctlDev);
    case Kind::kOnDisk:
      return rights_of(Kind::kReadWrite, handled_fs) & ~(kFsMakeFifo | kFsMakeSock);
  }
  return 0;
}

struct PathRule {
  const char* path;
  Kind kind;
};

constexpr PathRule kSystemRules[] = {
    // The root of the view: tools that walk from / (and MCP servers given / as
    // their allowed root) list it first.
    {"/", Kind::kList},
    // System trees.
    {"/usr", Kind::kReadExec},
    {"/bin", Kind::kReadExec},
    {"/sbin", Kind::kReadExec},
    {"/lib", Kind::kReadExec},
    {"/lib64", Kind::kReadExec},
    {"/lib32", Kind::kReadExec},
    {"/libx32", Kind::kReadExec},
    {"/etc", Kind::kReadExec},
    {"/opt", Kind::kReadExec},
    {"/proc", Kind::kReadOnly},
    // Devices.
    {"/dev", Kind::kReadOnly},
    {"/dev/null", Kind::kDevice},
    {"/dev/zero", Kind::kDevice},
    {"/dev/full", Kind::kDevice},
    {"/dev/random", Kind::kDevice},
    {"/dev/urandom", Kind::kDevice},
    {"/dev/tty", Kind::kTerminal},
    {"/dev/ptmx", Kind::kTerminal},
    {"/dev/pts", Kind::kTerminal},
    {"/dev/shm", Kind::kReadWrite},
    // Scratch space.
    {"/tmp", Kind::kReadWrite},
};

// The kernel headers only know the first member; later ABIs append fields and
// the kernel tells the layouts apart by the size passed.
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;  // ABI >= 4
  uint64_t scoped;              // ABI >= 6
};

size_t ruleset_attr_size(int abi) {
  if (abi >= 6) return sizeof(RulesetAttr);
  if (abi >= 4) return offsetof(RulesetAttr, scoped);
  return offsetof(RulesetAttr, handled_access_net);
}

uint64_t handled_fs_for(int abi) {
  if (abi >= 5) return kFsAbi5;
  if (abi >= 3) return kFsAbi3;
  if (abi >= 2) return kFsAbi2;
  return kFsAbi1;
}

int query_abi(int* error) {
  const long abi =
      syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 0) {
    *error = errno;
    return 0;
  }
  return static_cast<int>(abi);
}

// Whether `path` is `tree` or below it; both absolute and normalized.
bool holds(const std::string& tree, const std::string& path) {
  return path.compare(0, tree.size(), tree) == 0 &&
         (path.size() == tree.size() || path[tree.size()] == '/');
}

void add_path_rule(int ruleset, const std::string& path, Kind kind, uint64_t handled_fs) {
  if (path.empty()) return;
  if (path.front() != '/') {
    throw Error(ERROR_LAUNCH_FAILED, "apply_landlock: path is not absolute: " + path);
  }
  UniqueFd fd(open(path.c_str(), O_PATH | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return;
    throw_errno("apply_landlock: open " + path);
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) throw_errno("apply_landlock: fstat " + path);

  uint64_t access = rights_of(kind, handled_fs) & handled_fs;
  if (!S_ISDIR(st.st_mode)) access &= kFileOnlyRights;
  if (access == 0) return;

  struct landlock_path_beneath_attr attr {};
  attr.allowed_access = access;
  attr.parent_fd = fd.get();
  if (syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &attr, 0) != 0) {
    throw_errno("apply_landlock: landlock_add_rule " + path);
  }
}

// Why the version query failed with `error`. The kernel itself answers it
// with ENOSYS (no Landlock) or EOPNOTSUPP (disabled) only; anything else is a
// seccomp filter around this process (systemd-nspawn's answers EPERM).
std::string landlock_unavailable_reason(int error) {
  if (error == EOPNOTSUPP) return "built in but disabled (boot with lsm=...,landlock)";
  return refused_by_environment(kLandlockCall)
      .value_or(std::string("landlock_create_ruleset: ") + std::strerror(error));
}

}  // namespace

int landlock_abi_version() {
  int error = 0;
  return query_abi(&error);
}

std::string landlock_status_detail() {
  int error = 0;
  const int abi = query_abi(&error);
  if (abi == 0) return "unavailable: " + landlock_unavailable_reason(error);
  std::string detail = "ABI " + std::to_string(abi) + ": fs";
  if (abi >= 4) detail += ", net tcp";
  if (abi >= 6) detail += ", scope";
  return detail;
}

namespace {

// A ruleset that handles every right this kernel's ABI (up to kNewestKnownAbi) knows, TCP
// included, with the abstract-socket and signal scopes; `abi` and `fs` get what it handles.
// Needs no_new_privs.
UniqueFd new_ruleset(int kernel_abi, int& abi, uint64_t& fs) {
  if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) {
    throw Error(ERROR_LAUNCH_FAILED, "apply_landlock: no_new_privs must be set first");
  }
  abi = std::min(kernel_abi, kNewestKnownAbi);
  RulesetAttr attr{};
  attr.handled_access_fs = handled_fs_for(abi);
  if (abi >= 4) {
    attr.handled_access_net = LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP;
  }
  if (abi >= 6) attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
  const long ruleset_fd = syscall(SYS_landlock_create_ruleset, &attr, ruleset_attr_size(abi), 0U);
  if (ruleset_fd < 0) throw_errno("apply_landlock: landlock_create_ruleset");
  fs = attr.handled_access_fs;
  return UniqueFd(static_cast<int>(ruleset_fd));
}

void restrict_self(const UniqueFd& ruleset) {
  if (syscall(SYS_landlock_restrict_self, ruleset.get(), 0U) != 0) {
    throw_errno("apply_landlock: landlock_restrict_self");
  }
}

}  // namespace

// landlock_restrict_self() needs no_new_privs (or CAP_SYS_ADMIN, which the
// role no longer has): call this after drop_to_role_user(), which sets it.
int apply_landlock(const pando::helper::sandbox::v1::SandboxPlan& plan) {
  int error = 0;
  const int kernel_abi = query_abi(&error);
  if (kernel_abi == 0) {
    if (plan.require_landlock()) {
      throw Error(ERROR_SANDBOX_UNSUPPORTED,
                  "Landlock is required by the configuration but unavailable: " +
                      landlock_unavailable_reason(error));
    }
    return 0;
  }
  int abi = 0;
  uint64_t fs = 0;
  const UniqueFd ruleset = new_ruleset(kernel_abi, abi, fs);
  // Rights add up along the path: a writable tree that holds the project (a project below
  // /tmp) must not grant what the project itself may not have. The read-only project holds the
  // role's writable home.
  const auto writable = [&plan](const std::string& path) {
    return holds(path, plan.project_root()) ? Kind::kOnDisk : Kind::kReadWrite;
  };
  for (const PathRule& rule : kSystemRules) {
    add_path_rule(ruleset.get(), rule.path,
                  rule.kind == Kind::kReadWrite ? writable(rule.path) : rule.kind, fs);
  }
  for (const std::string& path : plan.runtime_paths()) {
    add_path_rule(ruleset.get(), path, Kind::kReadExec, fs);
  }
  add_path_rule(ruleset.get(), plan.project_root(),
                plan.project_writable() ? Kind::kOnDisk : Kind::kReadExec, fs);
  add_path_rule(ruleset.get(), plan.sandbox_home(), Kind::kOnDisk, fs);
  if (plan.has_auth_home()) {
    add_path_rule(ruleset.get(), plan.auth_home_target(), Kind::kReadExec, fs);
  }
  restrict_self(ruleset);
  return abi;
}

int apply_read_only_landlock() {
  const int kernel_abi = landlock_abi_version();
  if (kernel_abi == 0) return 0;
  int abi = 0;
  uint64_t fs = 0;
  const UniqueFd ruleset = new_ruleset(kernel_abi, abi, fs);
  add_path_rule(ruleset.get(), "/", Kind::kReadExec, fs);
  add_path_rule(ruleset.get(), "/dev/null", Kind::kDevice, fs);
  restrict_self(ruleset);
  return abi;
}

}  // namespace pando::sandbox
