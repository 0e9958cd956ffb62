#pragma once

#include <string>
#include <vector>

namespace pando::sandbox {

// Installs the seccomp filter (policy table in seccomp.cc, listed in
// SECURITY.md). Needs PR_SET_NO_NEW_PRIVS already set. Last step before exec.
// Throws SetupError.
void install_seccomp_filter();

// One row of the seccomp policy, for `security status` and SECURITY.md.
struct SeccompPolicyEntry {
  std::string syscall;  // syscall name, or the ABI a row is about ("i386 ABI (int 0x80)")
  int number;           // x86_64 syscall number, -1 for the ABI rows
  std::string action;   // "EPERM", "ENOSYS" or "KILL_PROCESS", then " if <condition>" when
                        // the rule looks at an argument
  std::string reason;
};

// The policy install_seccomp_filter() installs: every syscall not listed is allowed.
std::vector<SeccompPolicyEntry> seccomp_policy();

}  // namespace pando::sandbox
