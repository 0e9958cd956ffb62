#pragma once

#include <string>

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

}  // namespace pando
