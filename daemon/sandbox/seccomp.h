#pragma once

#include <linux/filter.h>

#include <string>
#include <utility>
#include <vector>

#include "common/unique_fd.h"

namespace pando::sandbox {

// The seccomp filter (policy table in seccomp.cc, listed in SECURITY.md) compiled to classic
// BPF, ready for the kernel. It depends on nothing in a request: the daemon compiles it once at
// start and hands it to the launcher template, whose launchers inherit it.
class SeccompProgram {
 public:
  explicit SeccompProgram(std::vector<sock_filter> instructions)
      : instructions_(std::move(instructions)) {}

  const std::vector<sock_filter>& instructions() const { return instructions_; }

 private:
  std::vector<sock_filter> instructions_;
};

// The daemon, once: compiles the policy with libseccomp into a memfd sealed against any change
// (write, grow, shrink, new seals). Leaves the calling process's own filter alone. Throws
// Error.
UniqueFd compile_seccomp_program();
// The same for the group-write filter, which a role stacks on the first where the caller's group
// is not its user-private group (seccomp.cc, kGroupWritePolicy).
UniqueFd compile_group_write_program();

// The launcher template: reads a program from such a memfd, after checking its seals and size.
// Throws Error.
SeccompProgram read_seccomp_program(int fd);

// Both steps in one process.
SeccompProgram build_seccomp_program();
SeccompProgram build_group_write_program();

// Installs `program` on the calling thread with the raw seccomp() syscall: no libseccomp, no
// allocation, no kernel feature probes. Needs PR_SET_NO_NEW_PRIVS already set. Last step before
// exec. Throws Error.
void install_seccomp_program(const SeccompProgram& program);

// One row of the seccomp policy, for `security status` and SECURITY.md.
struct SeccompPolicyEntry {
  std::string syscall;  // syscall name, or the ABI a row is about ("i386 ABI (int 0x80)")
  int number;           // x86_64 syscall number, -1 for the ABI rows
  std::string action;   // "EPERM", "ENOSYS" or "KILL_PROCESS", then " if <condition>" when
                        // the rule looks at an argument
  std::string reason;
  bool group_write = false;  // a row of the group-write filter, not of the one every role gets
};

// The policy build_seccomp_program() compiles (every syscall not listed is allowed), then the
// rows of the group-write filter.
std::vector<SeccompPolicyEntry> seccomp_policy();

// The seccomp layer's line in `security status`, counted from seccomp_policy().
std::string seccomp_status_detail();

}  // namespace pando::sandbox
