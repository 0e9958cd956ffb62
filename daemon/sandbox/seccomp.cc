#include "daemon/sandbox/seccomp.h"

#include <asm/unistd.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/blocked_syscall.h"
#include "common/unique_fd.h"
#include "daemon/sandbox/syscall_numbers.h"
#include "proto/error.h"

#if !defined(__x86_64__)
#error "The seccomp policy is written for x86_64 only (syscall numbers, ABI checks)."
#endif

// libseccomp adds a rule for a number it does not know (syscall_numbers.h) as is when the
// filter has only the native architecture.

namespace pando::sandbox {
namespace {

enum class Match {
  kAlways,
  kArgHasAnyBit,  // (arg & value) != 0: one rule per bit, each a masked compare on that bit
  kArgLow32Is,    // (arg & 0xffffffff) == value: the kernel reads the argument as 32 bits
  kArgNotEither,  // arg is neither value nor value2 (value < value2)
};

struct When {
  Match match;
  unsigned arg;
  uint64_t value;
  uint64_t value2;
  const char* text;  // for the printed policy
};

constexpr When kAlways{Match::kAlways, 0, 0, 0, ""};
constexpr When arg_has_any_bit(unsigned arg, uint64_t mask, const char* text) {
  return {Match::kArgHasAnyBit, arg, mask, 0, text};
}
constexpr When arg_low32_is(unsigned arg, uint64_t value, const char* text) {
  return {Match::kArgLow32Is, arg, value, 0, text};
}
constexpr When arg_not_either(unsigned arg, uint64_t a, uint64_t b, const char* text) {
  return {Match::kArgNotEither, arg, a, b, text};
}

struct Rule {
  const char* name;
  int nr;
  int error;  // the errno the syscall fails with
  When when;
  const char* reason;
};

// clone() cannot create a time namespace: its low byte is the exit signal, where CLONE_NEWTIME
// (0x80) is signal bit 7. Signals stop at 64, so keeping the bit denies no real program.
constexpr uint64_t kCloneNewFlags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                                    CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWTIME;

// Files the workspace role makes in the project are the caller's on the host (idmapped mount),
// where the sandbox's nosuid mount no longer covers them. The kernel reads a mode as 16 bits and
// the bit test ignores the others.
constexpr uint64_t kSetIdBits = S_ISUID | S_ISGID;
constexpr When mode_has_set_id(unsigned arg) {
  return arg_has_any_bit(arg, kSetIdBits, "mode has S_ISUID or S_ISGID");
}
constexpr const char* kSetIdReason =
    "a set-id file in the project would run as the caller for any local user";

// The project root and every directory above a protected path are pinned in the session (mount
// points), so the role cannot replace them and their modes are what the caller keeps. Were one
// writable by others, any local user could swap `.git` or `.git/config` after the session.
constexpr When mode_has_other_write(unsigned arg) {
  return arg_has_any_bit(arg, S_IWOTH, "mode has S_IWOTH");
}
constexpr const char* kOtherWriteReason =
    "write for others on the caller's files lets any local user change the project later";
constexpr When mode_has_group_write(unsigned arg) {
  return arg_has_any_bit(arg, S_IWGRP, "mode has S_IWGRP");
}
constexpr const char* kGroupWriteReason =
    "only where the caller's group is not its own private group: write for its other members";
// A POSIX ACL (system.posix_acl_access) sets the same bits as chmod, and a default ACL
// (system.posix_acl_default) gives them to every file the caller makes later. The name sits in
// memory seccomp cannot read, so every write fails with the errno of a filesystem without
// extended attributes, which cp -a, tar and rsync pass over.
constexpr const char* kXattrReason =
    "a POSIX ACL grants other users what chmod may not (the attribute name is not readable)";

#define SYSCALL(name) #name, __NR_##name

// The whole policy. The default action is ALLOW; every row below fails its syscall with the
// given errno. Not listed on purpose:
// - listmount/statmount (Linux 6.8): they read mount information the role can already read in
//   /proc/self/mountinfo of its own mount namespace; reaching another namespace needs
//   CAP_SYS_ADMIN over it, which the role never has.
// - mseal, lsm_*_self_attr, getxattrat, listxattrat and the file_*attr calls: they act on the
//   caller's own memory or LSM attributes, read, or set flags that permissions already govern.
constexpr Rule kPolicy[] = {
    // Other processes of the role user.
    {SYSCALL(ptrace), EPERM, kAlways, "reads and controls other processes"},
    {SYSCALL(process_vm_readv), EPERM, kAlways, "reads another process's memory"},
    {SYSCALL(process_vm_writev), EPERM, kAlways, "writes another process's memory"},
    {SYSCALL(pidfd_getfd), EPERM, kAlways,
     "copies a file descriptor out of another process (ptrace-level access)"},

    // Mount table and root: the filesystem view is fixed before exec.
    {SYSCALL(mount), EPERM, kAlways, "changes the filesystem view"},
    {SYSCALL(umount2), EPERM, kAlways, "uncovers what the filesystem view hides"},
    {SYSCALL(pivot_root), EPERM, kAlways, "changes the root of the mount namespace"},
    {SYSCALL(chroot), EPERM, kAlways, "changes the root directory"},
    {SYSCALL(open_tree), EPERM, kAlways, "new mount API (flatpak CVE-2021-41133)"},
    {SYSCALL(open_tree_attr), EPERM, kAlways, "new mount API (Linux 6.15)"},
    {SYSCALL(move_mount), EPERM, kAlways, "new mount API (flatpak CVE-2021-41133)"},
    {SYSCALL(fsopen), EPERM, kAlways, "new mount API (flatpak CVE-2021-41133)"},
    {SYSCALL(fsconfig), EPERM, kAlways, "new mount API (flatpak CVE-2021-41133)"},
    {SYSCALL(fsmount), EPERM, kAlways, "new mount API (flatpak CVE-2021-41133)"},
    {SYSCALL(fspick), EPERM, kAlways, "new mount API (flatpak CVE-2021-41133)"},
    {SYSCALL(mount_setattr), EPERM, kAlways, "new mount API (flatpak CVE-2021-41133)"},

    // Namespaces: a new user namespace hands out capabilities over kernel code that is
    // otherwise root-only.
    {SYSCALL(clone), EPERM, arg_has_any_bit(0, kCloneNewFlags, "flags has a CLONE_NEW* bit"),
     "creates namespaces"},
    {SYSCALL(clone3), ENOSYS, kAlways,
     "its flags sit in memory seccomp cannot read; ENOSYS makes libc fall back to clone"},
    {SYSCALL(unshare), EPERM, kAlways, "creates namespaces (the role never needs unshare)"},
    {SYSCALL(setns), EPERM, kAlways, "enters other namespaces"},

    // Kernel keyrings: shared per user, not namespaced.
    {SYSCALL(keyctl), EPERM, kAlways, "kernel keyrings are not namespaced"},
    {SYSCALL(add_key), EPERM, kAlways, "kernel keyrings are not namespaced"},
    {SYSCALL(request_key), EPERM, kAlways, "kernel keyrings are not namespaced"},

    // Large kernel attack surface the tool server does not need.
    {SYSCALL(bpf), EPERM, kAlways, "eBPF: large kernel attack surface"},
    {SYSCALL(perf_event_open), EPERM, kAlways, "kernel attack surface, side channels"},
    {SYSCALL(userfaultfd), EPERM, kAlways, "stalls kernel page faults to widen race windows"},
    {SYSCALL(io_uring_setup), EPERM, kAlways,
     "io_uring: large kernel attack surface; its operations bypass seccomp"},
    {SYSCALL(io_uring_enter), EPERM, kAlways, "io_uring (see io_uring_setup)"},
    {SYSCALL(io_uring_register), EPERM, kAlways, "io_uring (see io_uring_setup)"},

    // Whole-machine administration.
    {SYSCALL(kexec_load), EPERM, kAlways, "loads a new kernel"},
    {SYSCALL(kexec_file_load), EPERM, kAlways, "loads a new kernel"},
    {SYSCALL(init_module), EPERM, kAlways, "loads kernel modules"},
    {SYSCALL(finit_module), EPERM, kAlways, "loads kernel modules"},
    {SYSCALL(delete_module), EPERM, kAlways, "unloads kernel modules"},
    {SYSCALL(iopl), EPERM, kAlways, "raw I/O port access"},
    {SYSCALL(ioperm), EPERM, kAlways, "raw I/O port access"},
    {SYSCALL(reboot), EPERM, kAlways, "reboots the machine"},
    {SYSCALL(swapon), EPERM, kAlways, "changes swap"},
    {SYSCALL(swapoff), EPERM, kAlways, "changes swap"},
    {SYSCALL(acct), EPERM, kAlways, "switches process accounting"},
    {SYSCALL(quotactl), EPERM, kAlways, "changes disk quotas"},
    {SYSCALL(quotactl_fd), EPERM, kAlways, "changes disk quotas"},
    {SYSCALL(open_by_handle_at), EPERM, kAlways,
     "opens files by handle around the mount view (Docker 'shocker')"},
    {SYSCALL(name_to_handle_at), EPERM, kAlways, "file handles, used with open_by_handle_at"},
    {SYSCALL(lookup_dcookie), EPERM, kAlways, "exposes kernel paths (gone since Linux 6.10)"},
    {SYSCALL(syslog), EPERM, kAlways, "reads and clears the kernel log"},
    {SYSCALL(vhangup), EPERM, kAlways, "hangs up the terminal"},

    // Set-id files and directories (including a set-gid directory). open and openat are checked
    // whatever the flags: libc passes mode 0 without O_CREAT or O_TMPFILE.
    {SYSCALL(chmod), EPERM, mode_has_set_id(1), kSetIdReason},
    {SYSCALL(fchmod), EPERM, mode_has_set_id(1), kSetIdReason},
    {SYSCALL(fchmodat), EPERM, mode_has_set_id(2), kSetIdReason},
    {SYSCALL(fchmodat2), EPERM, mode_has_set_id(2), kSetIdReason},
    {SYSCALL(open), EPERM, mode_has_set_id(2), kSetIdReason},
    {SYSCALL(openat), EPERM, mode_has_set_id(3), kSetIdReason},
    {SYSCALL(creat), EPERM, mode_has_set_id(1), kSetIdReason},
    {SYSCALL(mkdir), EPERM, mode_has_set_id(1), kSetIdReason},
    {SYSCALL(mkdirat), EPERM, mode_has_set_id(2), kSetIdReason},
    {SYSCALL(mknod), EPERM, mode_has_set_id(1), kSetIdReason},
    {SYSCALL(mknodat), EPERM, mode_has_set_id(2), kSetIdReason},
    {SYSCALL(openat2), ENOSYS, kAlways,
     "its mode sits in memory seccomp cannot read; ENOSYS makes callers fall back to openat"},

    // Write for other users on what the caller keeps. Modes given when a file is made pass
    // through the umask, which the role sets itself: see SECURITY.md. Group write: the second
    // filter below, where the caller's group is not its own.
    {SYSCALL(chmod), EPERM, mode_has_other_write(1), kOtherWriteReason},
    {SYSCALL(fchmod), EPERM, mode_has_other_write(1), kOtherWriteReason},
    {SYSCALL(fchmodat), EPERM, mode_has_other_write(2), kOtherWriteReason},
    {SYSCALL(fchmodat2), EPERM, mode_has_other_write(2), kOtherWriteReason},
    {SYSCALL(setxattr), EOPNOTSUPP, kAlways, kXattrReason},
    {SYSCALL(lsetxattr), EOPNOTSUPP, kAlways, kXattrReason},
    {SYSCALL(fsetxattr), EOPNOTSUPP, kAlways, kXattrReason},
    {SYSCALL(setxattrat), EOPNOTSUPP, kAlways, kXattrReason},
    {SYSCALL(removexattr), EOPNOTSUPP, kAlways, kXattrReason},
    {SYSCALL(lremovexattr), EOPNOTSUPP, kAlways, kXattrReason},
    {SYSCALL(fremovexattr), EOPNOTSUPP, kAlways, kXattrReason},
    {SYSCALL(removexattrat), EOPNOTSUPP, kAlways, kXattrReason},

    // Terminal input injection (bubblewrap CVE-2017-5226). The kernel reads the request as 32
    // bits, so the compare ignores the high half (flatpak CVE-2019-10063).
    {SYSCALL(ioctl), EPERM, arg_low32_is(1, TIOCSTI, "request is TIOCSTI (low 32 bits)"),
     "pushes input into the terminal"},
    {SYSCALL(ioctl), EPERM, arg_low32_is(1, TIOCLINUX, "request is TIOCLINUX (low 32 bits)"),
     "console selection pastes input into the terminal"},
    // The caller's terminal may be the role's own stdio (direct stdio): a line discipline
    // (N_NULL silences it) or exclusive mode (no more opens, /dev/tty included) would outlast
    // the session when the client cannot put them back (SIGKILL).
    {SYSCALL(ioctl), EPERM, arg_low32_is(1, TIOCSETD, "request is TIOCSETD (low 32 bits)"),
     "changes the terminal's line discipline"},
    {SYSCALL(ioctl), EPERM, arg_low32_is(1, TIOCEXCL, "request is TIOCEXCL (low 32 bits)"),
     "puts the terminal in exclusive mode"},

    // Execution domains and flags that weaken the address space (ADDR_NO_RANDOMIZE,
    // READ_IMPLIES_EXEC, MMAP_PAGE_ZERO...). PER_LINUX and the query stay allowed so that
    // sanitizer runtimes and setarch-style resets work.
    {SYSCALL(personality), EPERM,
     arg_not_either(0, 0, 0xffffffff, "persona is neither 0 (PER_LINUX) nor 0xffffffff (query)"),
     "execution domains and address-space flags"},
};

// A second filter, stacked on the first where the caller's gid is not its user-private group (a
// shared primary group such as `users`, or a client run under sg): the idmap maps that gid to
// the role's, so group write on the project root or `.git` would reach the group's other members
// as S_IWOTH reaches everyone. A file of any other group the role cannot chmod at all (the
// kernel refuses a change to an inode whose group the idmap does not map). With a private group
// group write stays allowed: where the umask is 002 most files carry it, and chmod +x restates
// it.
constexpr Rule kGroupWritePolicy[] = {
    {SYSCALL(chmod), EPERM, mode_has_group_write(1), kGroupWriteReason},
    {SYSCALL(fchmod), EPERM, mode_has_group_write(1), kGroupWriteReason},
    {SYSCALL(fchmodat), EPERM, mode_has_group_write(2), kGroupWriteReason},
    {SYSCALL(fchmodat2), EPERM, mode_has_group_write(2), kGroupWriteReason},
};

#undef SYSCALL

// Other ABIs: the x86_64 filter never sees their syscall numbers, so it kills them.
struct AbiRule {
  const char* name;
  const char* reason;
};
constexpr AbiRule kAbiPolicy[] = {
    {"i386 ABI (int 0x80)",
     "numbered differently from x86_64, so the rows above would not match; bad-arch action"},
    {"x32 ABI (nr >= 0x40000000)",
     "same audit arch as x86_64, so libseccomp's x86_64 filter sends syscall numbers >= "
     "0x40000000 to the bad-arch action (checked by seccomp_test)"},
};

struct FilterDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using Filter = std::unique_ptr<void, FilterDeleter>;

[[noreturn]] void throw_seccomp(const std::string& what, int rc) {
  throw Error(pando::helper::v1::ERROR_LAUNCH_FAILED,
              "seccomp: " + what + ": " + std::strerror(-rc));
}

void add(const Filter& filter, const Rule& rule, const std::vector<scmp_arg_cmp>& compares) {
  const int rc = seccomp_rule_add_array(filter.get(), SCMP_ACT_ERRNO(rule.error), rule.nr,
                                        static_cast<unsigned>(compares.size()), compares.data());
  if (rc != 0) throw_seccomp(std::string("adding a rule for ") + rule.name, rc);
}

scmp_arg_cmp masked_eq(unsigned arg, uint64_t mask, uint64_t value) {
  return scmp_arg_cmp{arg, SCMP_CMP_MASKED_EQ, mask, value};
}

// libseccomp compares an argument at most once per rule, so a range [lo, hi] becomes one rule
// per aligned power-of-two block, each a masked compare on the block's fixed high bits.
void add_range(const Filter& filter, const Rule& rule, unsigned arg, uint64_t lo, uint64_t hi) {
  while (lo <= hi) {
    uint64_t size = 1;
    while (size <= std::numeric_limits<uint64_t>::max() / 2 && lo % (size * 2) == 0 &&
           size * 2 - 1 <= hi - lo) {
      size *= 2;
    }
    add(filter, rule, {masked_eq(arg, ~(size - 1), lo)});
    if (hi - lo < size) break;
    lo += size;
  }
}

void add_rule(const Filter& filter, const Rule& rule) {
  const When& when = rule.when;
  switch (when.match) {
    case Match::kAlways:
      add(filter, rule, {});
      return;
    case Match::kArgHasAnyBit:
      for (unsigned bit = 0; bit < 64; ++bit) {
        const uint64_t flag = uint64_t{1} << bit;
        if ((when.value & flag) != 0) add(filter, rule, {masked_eq(when.arg, flag, flag)});
      }
      return;
    case Match::kArgLow32Is:
      add(filter, rule, {masked_eq(when.arg, 0xffffffff, when.value)});
      return;
    case Match::kArgNotEither:
      if (when.value > 0) {
        add(filter, rule, {scmp_arg_cmp{when.arg, SCMP_CMP_LT, when.value, 0}});
      }
      if (when.value2 - when.value > 1) {
        add_range(filter, rule, when.arg, when.value + 1, when.value2 - 1);
      }
      if (when.value2 < std::numeric_limits<uint64_t>::max()) {
        add(filter, rule, {scmp_arg_cmp{when.arg, SCMP_CMP_GT, when.value2, 0}});
      }
      return;
  }
}

// What a compiled program is sealed against: it never changes once exported.
constexpr int kProgramSeals = F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK;

// Compiles `rules` into a sealed memfd. A syscall of another ABI kills the process in either
// program.
template <size_t N>
UniqueFd compile_rules(const Rule (&rules)[N]) {
  if (seccomp_arch_native() != SCMP_ARCH_X86_64) {
    throw Error(pando::helper::v1::ERROR_SANDBOX_UNSUPPORTED,
                "seccomp: the policy is written for x86_64 only");
  }

  Filter filter(seccomp_init(SCMP_ACT_ALLOW));
  if (!filter) throw Error(pando::helper::v1::ERROR_LAUNCH_FAILED, "seccomp_init failed");
  int rc = seccomp_attr_set(filter.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (rc != 0) {
    // libseccomp asks seccomp() which actions the kernel has: where a filter around the daemon
    // refuses seccomp(), it takes this one for missing, and no role could install a filter
    // either. The daemon does not start, and says why.
    throw_if_refused_by_environment(kSeccompCall, "seccomp");
    throw_seccomp("setting the bad-arch action", rc);
  }
  rc = seccomp_attr_set(filter.get(), SCMP_FLTATR_API_SYSRAWRC, 1);
  if (rc != 0) throw_seccomp("asking for kernel error codes", rc);

  for (const Rule& rule : rules) add_rule(filter, rule);

  // libseccomp 2.5 exports only to a file descriptor (seccomp_export_bpf_mem is 2.6).
  UniqueFd memfd(memfd_create("pando-seccomp-bpf", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!memfd.valid()) throw_errno("memfd_create for the seccomp program");
  rc = seccomp_export_bpf(filter.get(), memfd.get());
  if (rc != 0) throw_seccomp("exporting the filter", rc);
  if (fcntl(memfd.get(), F_ADD_SEALS, kProgramSeals | F_SEAL_SEAL) != 0) {
    throw_errno("sealing the seccomp program");
  }
  return memfd;
}

}  // namespace

UniqueFd compile_seccomp_program() { return compile_rules(kPolicy); }

UniqueFd compile_group_write_program() { return compile_rules(kGroupWritePolicy); }

SeccompProgram read_seccomp_program(int fd) {
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) throw_errno("reading the seals of the seccomp program");
  if ((seals & kProgramSeals) != kProgramSeals) {
    throw Error(pando::helper::v1::ERROR_LAUNCH_FAILED,
                "seccomp: the compiled program is not sealed against changes");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) throw_errno("fstat of the seccomp program");
  const auto bytes = static_cast<size_t>(st.st_size);
  if (bytes == 0 || bytes % sizeof(sock_filter) != 0 ||
      bytes / sizeof(sock_filter) > BPF_MAXINSNS) {
    throw Error(pando::helper::v1::ERROR_LAUNCH_FAILED,
                "seccomp: the exported filter has " + std::to_string(bytes) + " bytes");
  }
  std::vector<sock_filter> instructions(bytes / sizeof(sock_filter));
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = pread(fd, reinterpret_cast<char*>(instructions.data()) + done, bytes - done,
                            static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno("reading the seccomp program");
    if (n == 0) {
      throw Error(pando::helper::v1::ERROR_LAUNCH_FAILED,
                  "seccomp: the exported filter is shorter than its size");
    }
    done += static_cast<size_t>(n);
  }
  return SeccompProgram(std::move(instructions));
}

SeccompProgram build_seccomp_program() {
  const UniqueFd compiled = compile_seccomp_program();
  return read_seccomp_program(compiled.get());
}

SeccompProgram build_group_write_program() {
  const UniqueFd compiled = compile_group_write_program();
  return read_seccomp_program(compiled.get());
}

void install_seccomp_program(const SeccompProgram& program) {
  // Checked here rather than set: the order of the launch steps is main.cc's business, and a
  // filter loaded without it by a process that still has CAP_SYS_ADMIN would hide a wrong order.
  const int nnp = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
  if (nnp < 0) throw_errno("prctl(PR_GET_NO_NEW_PRIVS)");
  if (nnp != 1) {
    throw Error(pando::helper::v1::ERROR_LAUNCH_FAILED, "seccomp: PR_SET_NO_NEW_PRIVS is not set");
  }
  // The kernel only reads the program. Flags 0 is what seccomp_load() passed for this filter
  // (no TSYNC, LOG, SPEC_ALLOW or NEW_LISTENER attribute is set): the launcher is
  // single-threaded, denials are not logged, and the kernel keeps its default speculation
  // mitigations for the role.
  const sock_fprog fprog{static_cast<unsigned short>(program.instructions().size()),
                         const_cast<sock_filter*>(program.instructions().data())};
  if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) != 0) {
    throw_errno("seccomp(SECCOMP_SET_MODE_FILTER)");
  }
}

std::vector<SeccompPolicyEntry> seccomp_policy() {
  std::vector<SeccompPolicyEntry> entries;
  const auto add_rows = [&entries](const auto& rules, bool group_write) {
    for (const Rule& rule : rules) {
      std::string action = strerrorname_np(rule.error);
      if (rule.when.match != Match::kAlways) action += std::string(" if ") + rule.when.text;
      entries.push_back({rule.name, rule.nr, action, rule.reason, group_write});
    }
  };
  add_rows(kPolicy, false);
  add_rows(kGroupWritePolicy, true);
  for (const AbiRule& abi : kAbiPolicy) {
    entries.push_back({abi.name, -1, "KILL_PROCESS", abi.reason, false});
  }
  return entries;
}

std::string seccomp_status_detail() {
  std::set<std::string> refused;
  std::set<std::string> by_argument;
  for (const Rule& rule : kPolicy) {
    refused.insert(rule.name);
    if (rule.when.match != Match::kAlways) by_argument.insert(rule.name);
  }
  return "deny-list filter, " + std::to_string(refused.size()) + " syscalls refused (" +
         std::to_string(by_argument.size()) + " by argument), " +
         std::to_string(std::size(kAbiPolicy)) +
         " non-native ABIs killed; group write refused where it would reach other users";
}

}  // namespace pando::sandbox
