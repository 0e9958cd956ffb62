#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "proto/error.h"

namespace pando {

// The one-line explanation for a system call that fails with ENOSYS on a
// kernel that has it: a seccomp filter of the environment (systemd's
// RestrictSUIDSGID= turns openat2 into ENOSYS, SystemCallFilter= may take
// others) removed it. A host/setup problem, never the caller's path.
inline std::string blocked_syscall_message(const std::string& call, const std::string& why) {
  return "the system call " + call + " is blocked in the daemon's environment (ENOSYS), " + why +
         ": a seccomp filter of its service manager takes it away (systemd: RestrictSUIDSGID=, "
         "SystemCallFilter=); see journalctl -u pando-helperd and the shipped unit";
}

// A system call a layer needs, which a seccomp filter around the daemon (a
// container's, a service manager's) may refuse. Each listed call is refused
// by the kernel itself when every argument has all its bits set (an unknown
// flag or an impossible size: EINVAL or E2BIG; Landlock built in but
// disabled: EOPNOTSUPP), before it acts or checks a permission, on every
// kernel version that has the call; so that form, which does nothing, tells
// a filter's refusal from the kernel's own answer.
struct ProbedSyscall {
  long nr;
  const char* name;
};
inline constexpr ProbedSyscall kOpenTreeCall{SYS_open_tree, "open_tree"};
inline constexpr ProbedSyscall kMountSetattrCall{SYS_mount_setattr, "mount_setattr"};
inline constexpr ProbedSyscall kOpenat2Call{SYS_openat2, "openat2"};
inline constexpr ProbedSyscall kClone3Call{SYS_clone3, "clone3"};
inline constexpr ProbedSyscall kUnshareCall{SYS_unshare, "unshare"};
inline constexpr ProbedSyscall kSeccompCall{SYS_seccomp, "seccomp"};
inline constexpr ProbedSyscall kLandlockCall{SYS_landlock_create_ruleset,
                                             "landlock_create_ruleset"};

// Why this process's environment refuses `call`, in one line for a status
// detail or a refusal, or nullopt when the kernel answers it (a failure of
// the call is then the kernel's word on its arguments, for the caller to
// explain): "blocked by a seccomp filter (EPERM)" for any errno the kernel
// never gives the probe (systemd-nspawn's and Docker's filters answer EPERM),
// "not supported by this kernel" for ENOSYS, which a filter can fake too
// (systemd's do) and which cannot be told apart from a kernel without the
// call. Changes errno.
inline std::optional<std::string> refused_by_environment(const ProbedSyscall& call) {
  const long all_bits = -1;
  const long result = syscall(call.nr, all_bits, all_bits, all_bits, all_bits, all_bits, all_bits);
  const int err = result == -1 ? errno : 0;
  if (err == 0 || err == EINVAL || err == E2BIG || err == EOPNOTSUPP) return std::nullopt;
  if (err == ENOSYS) {
    return std::string(call.name) +
           " is not supported by this kernel (ENOSYS), or a seccomp filter hides it";
  }
  return std::string(call.name) + " is blocked by a seccomp filter (" + strerrorname_np(err) +
         ") of the container or service manager";
}

// After `call` failed for `what`: throws ERROR_SANDBOX_UNSUPPORTED, naming the
// filter or the kernel, when the environment refuses the call itself (no
// fault of the path, filesystem or request it was given); else returns with
// errno as the call left it, for the caller's own message.
inline void throw_if_refused_by_environment(const ProbedSyscall& call, const std::string& what) {
  const int err = errno;
  if (const std::optional<std::string> why = refused_by_environment(call)) {
    throw Error(pando::helper::v1::ERROR_SANDBOX_UNSUPPORTED, what + ": " + *why);
  }
  errno = err;
}

}  // namespace pando
