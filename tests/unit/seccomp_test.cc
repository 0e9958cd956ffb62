#include "daemon/sandbox/seccomp.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/sandbox/syscall_numbers.h"
#include "proto/error.h"

extern char** environ;

namespace pando::sandbox {
namespace {

// Exit codes of a child beyond errno values (which stay below 200).
constexpr int kSucceeded = 200;      // the syscall under test returned >= 0
constexpr int kInstallFailed = 201;  // install_seccomp_program() threw
constexpr int kCheckFailed = 202;    // an ordinary operation failed under the filter
constexpr long kBad = -1;            // invalid fd, pointer, flags and length at once

std::string exited(int code) { return "exit " + std::to_string(code); }
std::string killed(int signal) { return "signal " + std::to_string(signal); }

std::string describe(int status) {
  if (WIFEXITED(status)) return exited(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return killed(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// Built once in the test runner and installed in forked children, as the launcher does.
const SeccompProgram& policy_program() {
  static const SeccompProgram program = build_seccomp_program();
  return program;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

const SeccompProgram& group_write_program() {
  static const SeccompProgram program = build_group_write_program();
  return program;
}

// Each check runs in a forked child, so the filter never reaches the test runner. The child
// leaves its terminal (vhangup, TIOCSTI must have none to act on if the filter were missing)
// and dumps no core when killed by SIGSYS. `also` is stacked on the policy, as a role whose
// group write would reach other users gets it.
std::string run_child(const std::function<int()>& body, bool install = true,
                      const SeccompProgram* also = nullptr) {
  const SeccompProgram& program = policy_program();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    const rlimit no_core{0, 0};
    if (setsid() < 0 || setrlimit(RLIMIT_CORE, &no_core) < 0) _exit(kCheckFailed);
    if (install) {
      if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) _exit(kInstallFailed);
      try {
        install_seccomp_program(program);
        if (also != nullptr) install_seccomp_program(*also);
      } catch (const std::exception&) {
        _exit(kInstallFailed);
      }
    }
    _exit(body());
  }
  return describe(wait_for(pid));
}

int errno_of(long ret) { return ret >= 0 ? kSucceeded : errno; }

int raw(long nr, long a0 = kBad, long a1 = kBad, long a2 = kBad, long a3 = kBad, long a4 = kBad,
        long a5 = kBad) {
  return errno_of(syscall(nr, a0, a1, a2, a3, a4, a5));
}

int int80_getpid() {
  // Without the i386 ABI the fault must kill, not reach a sanitizer's SIGSEGV handler.
  signal(SIGSEGV, SIG_DFL);
  long ret = 20;  // getpid in the i386 table
  asm volatile("int $0x80" : "+a"(ret) : : "r8", "r9", "r10", "r11", "memory", "cc");
  return ret > 0 ? 0 : kCheckFailed;
}

// Some kernels run without the i386 ABI (ia32_emulation=0, some VMs): int $0x80 then raises a
// general protection fault (SIGSEGV) before seccomp is consulted.
bool i386_abi_enabled() { return run_child(int80_getpid, /*install=*/false) == exited(0); }

bool is_conditional(const SeccompPolicyEntry& entry) {
  return entry.action.find(" if ") != std::string::npos;
}

TEST(SeccompTest, InstallsAndShowsInProcStatus) {
  EXPECT_EQ(run_child([] {
              std::ifstream status("/proc/self/status");
              std::string line;
              bool filtered = false;
              while (std::getline(status, line)) filtered |= line == "Seccomp:\t2";
              return filtered ? 0 : kCheckFailed;
            }),
            exited(0));
}

TEST(SeccompTest, RefusesWithoutNoNewPrivs) {
  EXPECT_EQ(run_child(
                [] {
                  try {
                    install_seccomp_program(policy_program());
                  } catch (const Error&) {
                    return 0;
                  }
                  return kSucceeded;
                },
                /*install=*/false),
            exited(0));
}

bool same_bytes(const std::vector<sock_filter>& a, const std::vector<sock_filter>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
}

bool process_is_filtered() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Seccomp:\t", 0) == 0) return line != "Seccomp:\t0";
  }
  return true;
}

// The daemon builds once and each role process installs it; the program must not depend on
// when it was built, and building must not filter the builder.
TEST(SeccompTest, BuildIsDeterministicAndLeavesTheBuilderUnfiltered) {
  const SeccompProgram first = build_seccomp_program();
  const SeccompProgram second = build_seccomp_program();
  EXPECT_GT(first.instructions().size(), 100u);
  EXPECT_TRUE(same_bytes(first.instructions(), second.instructions()));
  EXPECT_FALSE(process_is_filtered());
}

// The daemon compiles into a sealed memfd; the launcher template reads only a program that can
// no longer change.
TEST(SeccompTest, CompiledProgramIsSealedAndReadBackExactly) {
  const pando::UniqueFd compiled = compile_seccomp_program();
  ASSERT_TRUE(compiled.valid());
  const int seals = fcntl(compiled.get(), F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL),
            F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  EXPECT_LT(write(compiled.get(), "x", 1), 0) << "a sealed program accepted a write";
  EXPECT_TRUE(same_bytes(read_seccomp_program(compiled.get()).instructions(),
                         build_seccomp_program().instructions()));
}

TEST(SeccompTest, ReadRefusesAnUnsealedOrMisshapenProgram) {
  const SeccompProgram program = build_seccomp_program();
  const auto& bytes = program.instructions();
  auto memfd_with = [](const void* data, size_t size, unsigned seals) {
    pando::UniqueFd fd(memfd_create("test-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(write(fd.get(), data, size), static_cast<ssize_t>(size));
    if (seals != 0) {
      EXPECT_EQ(fcntl(fd.get(), F_ADD_SEALS, seals), 0);
    }
    return fd;
  };
  const unsigned sealed = F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK;
  const size_t size = bytes.size() * sizeof(sock_filter);
  auto refused = [](int fd) {
    try {
      read_seccomp_program(fd);
    } catch (const Error& e) {
      return e.code() == pando::helper::v1::ERROR_LAUNCH_FAILED;
    }
    return false;
  };
  EXPECT_TRUE(refused(memfd_with(bytes.data(), size, 0).get())) << "unsealed";
  EXPECT_TRUE(refused(memfd_with(bytes.data(), size, F_SEAL_GROW | F_SEAL_SHRINK).get()))
      << "still writable";
  EXPECT_TRUE(refused(memfd_with(bytes.data(), size - 1, sealed).get()))
      << "not whole instructions";
  EXPECT_TRUE(refused(memfd_with(bytes.data(), 0, sealed).get())) << "empty";
  EXPECT_FALSE(refused(memfd_with(bytes.data(), size, sealed).get()));
}

TEST(SeccompTest, ProgramBuiltBeforeForkDeniesAndAllowsInTheChild) {
  const SeccompProgram program = build_seccomp_program();
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) _exit(kInstallFailed);
    try {
      install_seccomp_program(program);
    } catch (const std::exception&) {
      _exit(kInstallFailed);
    }
    if (raw(__NR_mount) != EPERM) _exit(1);
    if (raw(__NR_getppid, 0, 0, 0, 0, 0, 0) != kSucceeded) _exit(2);
    _exit(process_is_filtered() ? 0 : 3);
  }
  EXPECT_EQ(describe(wait_for(pid)), exited(0));
}

TEST(SeccompTest, InstallReportsAKernelRefusal) {
  EXPECT_EQ(run_child(
                [] {
                  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return kInstallFailed;
                  try {
                    install_seccomp_program(SeccompProgram({}));  // the kernel wants >= 1
                  } catch (const Error& e) {
                    return std::string(e.what()).find(std::strerror(EINVAL)) != std::string::npos
                               ? 0
                               : kCheckFailed;
                  }
                  return kSucceeded;
                },
                /*install=*/false),
            exited(0));
}

TEST(SeccompTest, PolicyListsEverySyscallTheSandboxMustDeny) {
  std::map<std::string, std::string> actions;
  for (const auto& entry : seccomp_policy()) {
    if (!entry.group_write) actions[entry.syscall] = entry.action;
  }
  for (const char* name : {"ptrace",
                           "process_vm_readv",
                           "process_vm_writev",
                           "mount",
                           "umount2",
                           "pivot_root",
                           "chroot",
                           "open_tree",
                           "move_mount",
                           "fsopen",
                           "fsconfig",
                           "fsmount",
                           "fspick",
                           "mount_setattr",
                           "setns",
                           "unshare",
                           "keyctl",
                           "add_key",
                           "request_key",
                           "bpf",
                           "perf_event_open",
                           "userfaultfd",
                           "kexec_load",
                           "kexec_file_load",
                           "init_module",
                           "finit_module",
                           "delete_module",
                           "iopl",
                           "ioperm",
                           "reboot",
                           "swapon",
                           "swapoff",
                           "acct",
                           "quotactl",
                           "quotactl_fd",
                           "open_by_handle_at",
                           "name_to_handle_at",
                           "lookup_dcookie",
                           "syslog",
                           "vhangup"}) {
    EXPECT_EQ(actions[name], "EPERM") << name;
  }
  for (const char* name : {"open", "openat", "creat", "mkdir", "mkdirat", "mknod", "mknodat"}) {
    EXPECT_EQ(actions[name], "EPERM if mode has S_ISUID or S_ISGID") << name;
  }
  // The chmod calls have two rows each: set-id bits, then write for others.
  // The chmod calls have two rows each: set-id bits, then write for others; the group-write
  // filter has one row for each and nothing else.
  std::multimap<std::string, std::string> chmod_rows;
  std::multimap<std::string, std::string> group_write_rows;
  for (const auto& entry : seccomp_policy()) {
    if (entry.group_write) {
      group_write_rows.emplace(entry.syscall, entry.action);
    } else if (entry.syscall.find("chmod") != std::string::npos) {
      chmod_rows.emplace(entry.syscall, entry.action);
    }
  }
  std::multimap<std::string, std::string> expected_chmod_rows;
  std::multimap<std::string, std::string> expected_group_write_rows;
  for (const char* name : {"chmod", "fchmod", "fchmodat", "fchmodat2"}) {
    expected_chmod_rows.emplace(name, "EPERM if mode has S_ISUID or S_ISGID");
    expected_chmod_rows.emplace(name, "EPERM if mode has S_IWOTH");
    expected_group_write_rows.emplace(name, "EPERM if mode has S_IWGRP");
  }
  EXPECT_EQ(chmod_rows, expected_chmod_rows);
  EXPECT_EQ(group_write_rows, expected_group_write_rows);
  for (const char* name : {"setxattr", "lsetxattr", "fsetxattr", "setxattrat", "removexattr",
                           "lremovexattr", "fremovexattr", "removexattrat"}) {
    EXPECT_EQ(actions[name], "EOPNOTSUPP") << name;
  }
  EXPECT_EQ(actions["clone3"], "ENOSYS");
  EXPECT_EQ(actions["openat2"], "ENOSYS");
  EXPECT_EQ(actions["i386 ABI (int 0x80)"], "KILL_PROCESS");
  EXPECT_EQ(actions["x32 ABI (nr >= 0x40000000)"], "KILL_PROCESS");
}

// Unconditional rows are called with all-invalid arguments: the filter must answer before the
// kernel would (EINVAL, EFAULT, EBADF, ENOSYS as root without the filter).
TEST(SeccompTest, EveryUnconditionalRowFailsWithItsErrno) {
  int checked = 0;
  for (const auto& entry : seccomp_policy()) {
    if (entry.number < 0 || is_conditional(entry)) continue;
    SCOPED_TRACE(entry.syscall);
    const std::map<std::string, int> errnos{
        {"EPERM", EPERM}, {"ENOSYS", ENOSYS}, {"EOPNOTSUPP", EOPNOTSUPP}};
    ASSERT_TRUE(errnos.count(entry.action)) << entry.action;
    const int expected = errnos.at(entry.action);
    EXPECT_EQ(run_child([&] { return raw(entry.number); }), exited(expected));
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

// `security status` shows the policy the launcher installs, not a description kept apart.
TEST(SeccompTest, StatusDetailCountsThePolicy) {
  std::set<std::string> refused;
  std::set<std::string> by_argument;
  int abis = 0;
  for (const auto& entry : seccomp_policy()) {
    if (entry.number < 0) {
      ++abis;
      continue;
    }
    refused.insert(entry.syscall);
    if (is_conditional(entry)) by_argument.insert(entry.syscall);
  }
  EXPECT_EQ(seccomp_status_detail(),
            "deny-list filter, " + std::to_string(refused.size()) + " syscalls refused (" +
                std::to_string(by_argument.size()) + " by argument), " + std::to_string(abis) +
                " non-native ABIs killed; group write refused where it "
                "would reach other users");
}

// Rows that look at an argument each have their own test below.
TEST(SeccompTest, ConditionalRowsAreTheTestedOnes) {
  std::multiset<std::string> conditional;
  for (const auto& entry : seccomp_policy()) {
    if (is_conditional(entry) && !entry.group_write) conditional.insert(entry.syscall);
  }
  EXPECT_EQ(
      conditional,
      (std::multiset<std::string>{
          "clone",   "ioctl",    "ioctl",     "ioctl", "ioctl",  "personality", "chmod",
          "fchmod",  "fchmodat", "fchmodat2", "open",  "openat", "creat",       "mkdir",
          "mkdirat", "mknod",    "mknodat",   "chmod", "fchmod", "fchmodat",    "fchmodat2"}));
}

// The mode's argument index in each call that takes one; paths and fds are invalid, so a call
// the filter lets through fails in the kernel (EFAULT, EBADF) and makes nothing.
struct ModeCall {
  const char* name;
  std::function<int(long mode)> call;
};
const std::vector<ModeCall>& mode_calls() {
  static const std::vector<ModeCall> calls = {
      {"chmod", [](long mode) { return raw(__NR_chmod, kBad, mode); }},
      {"fchmod", [](long mode) { return raw(__NR_fchmod, kBad, mode); }},
      {"fchmodat", [](long mode) { return raw(__NR_fchmodat, kBad, kBad, mode, 0); }},
      {"open", [](long mode) { return raw(__NR_open, kBad, O_CREAT | O_WRONLY, mode); }},
      {"openat", [](long mode) { return raw(__NR_openat, kBad, kBad, O_CREAT | O_WRONLY, mode); }},
      {"creat", [](long mode) { return raw(__NR_creat, kBad, mode); }},
      {"mkdir", [](long mode) { return raw(__NR_mkdir, kBad, mode); }},
      {"mkdirat", [](long mode) { return raw(__NR_mkdirat, kBad, kBad, mode); }},
      {"mknod", [](long mode) { return raw(__NR_mknod, kBad, S_IFREG | mode, 0); }},
      {"mknodat", [](long mode) { return raw(__NR_mknodat, kBad, kBad, S_IFREG | mode, 0); }},
  };
  return calls;
}

// Files the role makes in the project belong to the caller on the host: a set-id bit there would
// run any local user's command as the caller.
TEST(SeccompTest, SetIdModesAreDeniedWhateverTheHighBits) {
  for (const ModeCall& mode_call : mode_calls()) {
    SCOPED_TRACE(mode_call.name);
    for (const uint64_t mode :
         {uint64_t{S_ISUID | 0755}, uint64_t{S_ISGID | 0755}, uint64_t{S_ISUID | S_ISGID | 0755},
          uint64_t{S_ISUID}, uint64_t{S_ISGID | 0777 | S_ISVTX}, (uint64_t{1} << 32) | S_ISUID,
          uint64_t{0xffffffff00000000} | S_ISGID | 0644}) {
      SCOPED_TRACE(mode);
      EXPECT_EQ(run_child([&] { return mode_call.call(static_cast<long>(mode)); }), exited(EPERM));
    }
    // Other modes reach the kernel, which answers for the invalid path or fd.
    for (const uint64_t mode : {uint64_t{0}, uint64_t{0755}, uint64_t{0775 | S_ISVTX},
                                (uint64_t{1} << 32) | 0755, uint64_t{0xffffffff00000000}}) {
      SCOPED_TRACE(mode);
      const std::string unfiltered =
          run_child([&] { return mode_call.call(static_cast<long>(mode)); }, /*install=*/false);
      EXPECT_NE(unfiltered, exited(EPERM));
      EXPECT_EQ(run_child([&] { return mode_call.call(static_cast<long>(mode)); }), unfiltered);
    }
  }
}

// The chmod calls set the modes of what the caller keeps (the project root and `.git` cannot be
// replaced in the session): write for others is denied, group write and every mode given when a
// file is made (which the umask trims) reach the kernel.
TEST(SeccompTest, OtherWriteIsDeniedToChmodOnly) {
  for (const ModeCall& mode_call : mode_calls()) {
    SCOPED_TRACE(mode_call.name);
    const bool is_chmod = std::string(mode_call.name).find("chmod") != std::string::npos;
    for (const uint64_t mode : {uint64_t{S_IWOTH}, uint64_t{0757}, uint64_t{0777 | S_ISVTX},
                                (uint64_t{1} << 32) | 0666, uint64_t{0xffffffff00000000} | 0002}) {
      SCOPED_TRACE(mode);
      const std::string unfiltered =
          run_child([&] { return mode_call.call(static_cast<long>(mode)); }, /*install=*/false);
      EXPECT_NE(unfiltered, exited(EPERM));
      EXPECT_EQ(run_child([&] { return mode_call.call(static_cast<long>(mode)); }),
                is_chmod ? exited(EPERM) : unfiltered);
    }
    for (const uint64_t mode : {uint64_t{0775}, uint64_t{0664}, uint64_t{0750 | S_ISVTX}}) {
      SCOPED_TRACE(mode);
      const std::string unfiltered =
          run_child([&] { return mode_call.call(static_cast<long>(mode)); }, /*install=*/false);
      EXPECT_EQ(run_child([&] { return mode_call.call(static_cast<long>(mode)); }), unfiltered);
    }
  }
  const auto fchmodat2 = [](long mode) { return raw(__NR_fchmodat2, kBad, kBad, mode, 0); };
  EXPECT_EQ(run_child([&] { return fchmodat2(0757); }), exited(EPERM));
}

// Stacked where group write would reach other users (project_exits.h): the chmod calls cannot
// set S_IWGRP; without it, and for the calls that make a file, group write reaches the kernel.
TEST(SeccompTest, GroupWriteFilterDeniesGroupWriteToChmodOnly) {
  for (const ModeCall& mode_call : mode_calls()) {
    SCOPED_TRACE(mode_call.name);
    const bool is_chmod = std::string(mode_call.name).find("chmod") != std::string::npos;
    for (const uint64_t mode :
         {uint64_t{S_IWGRP}, uint64_t{0775}, uint64_t{0664}, (uint64_t{1} << 32) | 0620}) {
      SCOPED_TRACE(mode);
      const auto call = [&] { return mode_call.call(static_cast<long>(mode)); };
      const std::string unfiltered = run_child(call, /*install=*/false);
      EXPECT_NE(unfiltered, exited(EPERM));
      EXPECT_EQ(run_child(call), unfiltered);
      EXPECT_EQ(run_child(call, true, &group_write_program()),
                is_chmod ? exited(EPERM) : unfiltered);
    }
    const auto plain = [&] { return mode_call.call(0755); };
    EXPECT_EQ(run_child(plain, true, &group_write_program()), run_child(plain, false));
  }
  const auto fchmodat2 = [](long mode) { return raw(__NR_fchmodat2, kBad, kBad, mode, 0); };
  EXPECT_EQ(run_child([&] { return fchmodat2(0775); }, true, &group_write_program()),
            exited(EPERM));
}

// fchmodat2 (Linux 6.6) is denied by number, also where the kernel lacks it.
TEST(SeccompTest, Fchmodat2SetIdModesAreDenied) {
  const auto fchmodat2 = [](long mode) { return raw(__NR_fchmodat2, kBad, kBad, mode, 0); };
  EXPECT_EQ(run_child([&] { return fchmodat2(S_ISUID | 0755); }), exited(EPERM));
  EXPECT_EQ(run_child([&] { return fchmodat2(S_ISGID | 0755); }), exited(EPERM));
  const std::string unfiltered = run_child([&] { return fchmodat2(0755); }, /*install=*/false);
  if (unfiltered == exited(ENOSYS)) {
    GTEST_SKIP() << "this kernel has no fchmodat2 (Linux 6.6): a plain mode cannot be tried";
  }
  EXPECT_EQ(run_child([&] { return fchmodat2(0755); }), unfiltered);
}

// openat2's mode sits in a struct seccomp cannot read: ENOSYS makes callers fall back to openat.
TEST(SeccompTest, Openat2FailsWithEnosys) {
  EXPECT_EQ(run_child([] {
              open_how how{};
              how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
              return errno_of(syscall(__NR_openat2, AT_FDCWD, "/", &how, sizeof(how)));
            }),
            exited(ENOSYS));
}

TEST(SeccompTest, CloneWithAnyNamespaceFlagIsDenied) {
  for (const long flag : {CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
                          CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWTIME}) {
    SCOPED_TRACE(flag);
    // A thread without CLONE_SIGHAND is invalid, so an unfiltered call fails without forking.
    EXPECT_EQ(run_child([&] { return raw(__NR_clone, flag | CLONE_THREAD, 0, 0, 0, 0); }),
              exited(EPERM));
  }
  // The fork-like call a program would make.
  EXPECT_EQ(run_child([] {
              const long ret = syscall(__NR_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
              if (ret == 0) _exit(0);
              if (ret > 0) wait_for(static_cast<pid_t>(ret));
              return errno_of(ret);
            }),
            exited(EPERM));
}

TEST(SeccompTest, Clone3FailsWithEnosys) {
  EXPECT_EQ(run_child([] {
              clone_args args{};
              args.exit_signal = SIGCHLD;
              const long ret = syscall(__NR_clone3, &args, sizeof(args));
              if (ret == 0) _exit(0);
              if (ret > 0) wait_for(static_cast<pid_t>(ret));
              return errno_of(ret);
            }),
            exited(ENOSYS));
}

void* return_argument(void* arg) { return arg; }

TEST(SeccompTest, ForkThreadsAndSpawnStillWork) {
  EXPECT_EQ(run_child([] {
              const pid_t pid = fork();
              if (pid == 0) _exit(7);
              return pid > 0 && describe(wait_for(pid)) == exited(7) ? 0 : kCheckFailed;
            }),
            exited(0));
  // glibc tries clone3 first and falls back to clone on ENOSYS.
  EXPECT_EQ(run_child([] {
              pthread_t thread;
              int marker = 0;
              void* result = nullptr;
              if (pthread_create(&thread, nullptr, return_argument, &marker) != 0) {
                return kCheckFailed;
              }
              if (pthread_join(thread, &result) != 0) return kCheckFailed;
              return result == &marker ? 0 : kCheckFailed;
            }),
            exited(0));
  EXPECT_EQ(run_child([] {
              pid_t pid = 0;
              char* argv[] = {const_cast<char*>("true"), nullptr};
              if (posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ) != 0) {
                return kCheckFailed;
              }
              return describe(wait_for(pid)) == exited(0) ? 0 : kCheckFailed;
            }),
            exited(0));
}

// fd -1: without the filter the request reaches no terminal and fails with EBADF.
TEST(SeccompTest, TerminalInjectionIoctlsAreDeniedWhateverTheHighBits) {
  for (const long request : {TIOCSTI, TIOCLINUX, TIOCSETD, TIOCEXCL}) {
    for (const uint64_t high : {uint64_t{0}, uint64_t{1} << 32, uint64_t{0xffffffff00000000}}) {
      const long value = static_cast<long>(high | static_cast<uint64_t>(request));
      SCOPED_TRACE(value);
      EXPECT_EQ(run_child([&] { return raw(__NR_ioctl, -1, value, 0); }), exited(EPERM));
    }
  }
  // Neighbouring requests still reach the kernel.
  for (const long request : {TCGETS, FIONREAD, TIOCSTI + 1, TIOCLINUX + 1, TIOCGETD, TIOCNXCL}) {
    SCOPED_TRACE(request);
    EXPECT_EQ(run_child([&] { return raw(__NR_ioctl, -1, request, 0); }), exited(EBADF));
  }
}

TEST(SeccompTest, PersonalityAllowsOnlyLinuxAndQuery) {
  for (const uint64_t allowed : {uint64_t{0}, uint64_t{0xffffffff}}) {
    SCOPED_TRACE(allowed);
    EXPECT_EQ(run_child([&] { return raw(__NR_personality, static_cast<long>(allowed)); }),
              exited(kSucceeded));
  }
  for (const uint64_t denied :
       {uint64_t{1}, uint64_t{0x0008} /* PER_LINUX32 */, uint64_t{0x0040000} /* NO_RANDOMIZE */,
        uint64_t{0x0400000} /* READ_IMPLIES_EXEC */, uint64_t{0x7fffffff}, uint64_t{0x80000000},
        uint64_t{0xfffffffe}, uint64_t{1} << 32, (uint64_t{1} << 32) | 0x0008,
        uint64_t{0xffffffffffffffff}}) {
    SCOPED_TRACE(denied);
    EXPECT_EQ(run_child([&] { return raw(__NR_personality, static_cast<long>(denied)); }),
              exited(EPERM));
  }
}

TEST(SeccompTest, Int80NeverSurvives) {
  const std::string expected = i386_abi_enabled() ? killed(SIGSYS) : killed(SIGSEGV);
  EXPECT_EQ(run_child(int80_getpid), expected);
}

TEST(SeccompTest, Int80IsKilledBySigsys) {
  if (!i386_abi_enabled()) {
    GTEST_SKIP() << "this kernel runs without the i386 syscall ABI: int $0x80 faults (SIGSEGV) "
                    "before seccomp sees it";
  }
  EXPECT_EQ(run_child(int80_getpid), killed(SIGSYS));
}

struct LoadedFilter {
  std::vector<sock_filter> program;  // empty if it could not be read
  uint64_t flags = ~uint64_t{0};     // the flags the kernel keeps (SECCOMP_FILTER_FLAG_LOG)
};

// The filter as the kernel holds it, read back through ptrace from a child that installed
// `program`.
LoadedFilter loaded_filter(const SeccompProgram& program) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return {};
  if (pid == 0) {
    if (ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) < 0) _exit(kCheckFailed);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) _exit(kInstallFailed);
    try {
      install_seccomp_program(program);
    } catch (const std::exception&) {
      _exit(kInstallFailed);
    }
    raise(SIGSTOP);
    _exit(0);
  }
  LoadedFilter loaded;
  int status = 0;
  if (waitpid(pid, &status, 0) == pid && WIFSTOPPED(status)) {
    const long count = ptrace(PTRACE_SECCOMP_GET_FILTER, pid, 0, nullptr);
    if (count > 0) {
      loaded.program.resize(static_cast<size_t>(count));
      if (ptrace(PTRACE_SECCOMP_GET_FILTER, pid, 0, loaded.program.data()) != count) {
        loaded.program.clear();
      }
    }
    __ptrace_seccomp_metadata metadata{};
    if (ptrace(PTRACE_SECCOMP_GET_METADATA, pid, sizeof(metadata), &metadata) ==
        static_cast<long>(sizeof(metadata))) {
      loaded.flags = metadata.flags;
    }
  }
  kill(pid, SIGKILL);
  wait_for(pid);
  return loaded;
}

// Runs a classic BPF seccomp program on one syscall, for the instructions libseccomp emits.
// Returns nullopt on an instruction it does not know or a jump out of the program.
std::optional<uint32_t> evaluate(const std::vector<sock_filter>& program,
                                 const seccomp_data& data) {
  uint32_t a = 0;
  for (size_t pc = 0; pc < program.size(); ++pc) {
    const sock_filter& insn = program[pc];
    switch (insn.code) {
      case BPF_LD | BPF_W | BPF_ABS:
        if (insn.k % 4 != 0 || insn.k + 4 > sizeof(data)) return std::nullopt;
        std::memcpy(&a, reinterpret_cast<const char*>(&data) + insn.k, 4);
        break;
      case BPF_ALU | BPF_AND | BPF_K:
        a &= insn.k;
        break;
      case BPF_JMP | BPF_JA:
        pc += insn.k;
        break;
      case BPF_JMP | BPF_JEQ | BPF_K:
        pc += a == insn.k ? insn.jt : insn.jf;
        break;
      case BPF_JMP | BPF_JGT | BPF_K:
        pc += a > insn.k ? insn.jt : insn.jf;
        break;
      case BPF_JMP | BPF_JGE | BPF_K:
        pc += a >= insn.k ? insn.jt : insn.jf;
        break;
      case BPF_JMP | BPF_JSET | BPF_K:
        pc += (a & insn.k) != 0 ? insn.jt : insn.jf;
        break;
      case BPF_RET | BPF_K:
        return insn.k;
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

// Holds on kernels without the i386 ABI too, where int $0x80 never reaches seccomp.
TEST(SeccompTest, LoadedFilterKillsForeignArchitectures) {
  const std::vector<sock_filter> program = loaded_filter(policy_program()).program;
  ASSERT_FALSE(program.empty());
  const auto action = [&](uint32_t arch, int nr) {
    seccomp_data data{};
    data.arch = arch;
    data.nr = nr;
    return evaluate(program, data);
  };
  constexpr uint32_t kNotSeen = 0xdeadbeef;
  for (const int nr : {0, 20 /* i386 getpid */, 21 /* i386 mount */, 120 /* i386 clone */}) {
    SCOPED_TRACE(nr);
    EXPECT_EQ(action(AUDIT_ARCH_I386, nr).value_or(kNotSeen), SECCOMP_RET_KILL_PROCESS);
    EXPECT_EQ(action(AUDIT_ARCH_AARCH64, nr).value_or(kNotSeen), SECCOMP_RET_KILL_PROCESS);
    EXPECT_EQ(action(AUDIT_ARCH_X86_64, 0x40000000 | nr).value_or(kNotSeen),
              SECCOMP_RET_KILL_PROCESS);
  }
  EXPECT_EQ(action(AUDIT_ARCH_X86_64, __NR_getpid).value_or(kNotSeen), SECCOMP_RET_ALLOW);
  EXPECT_EQ(action(AUDIT_ARCH_X86_64, __NR_mount).value_or(kNotSeen), SECCOMP_RET_ERRNO | EPERM);
}

// The kernel keeps what was built, instruction for instruction, and no flag: the program is
// installed as libseccomp's seccomp_load() installed it (flags 0, so no SECCOMP_FILTER_FLAG_LOG).
TEST(SeccompTest, KernelHoldsTheBuiltProgramWithoutFlags) {
  const LoadedFilter loaded = loaded_filter(policy_program());
  ASSERT_FALSE(loaded.program.empty());
  EXPECT_TRUE(same_bytes(loaded.program, policy_program().instructions()));
  EXPECT_EQ(loaded.flags, 0u);
}

TEST(SeccompTest, X32SyscallIsKilledBySigsys) {
  constexpr long kX32SyscallBit = 0x40000000;
  EXPECT_EQ(run_child([] { return raw(kX32SyscallBit | __NR_getpid); }), killed(SIGSYS));
}

TEST(SeccompTest, OrdinarySyscallsStillWork) {
  EXPECT_EQ(run_child([] {
              const int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
              char buffer[64];
              if (fd < 0 || read(fd, buffer, sizeof(buffer)) <= 0 || close(fd) < 0) return 1;
              int fds[2];
              if (pipe2(fds, O_CLOEXEC) < 0 || write(fds[1], "x", 1) != 1) return 2;
              if (read(fds[0], buffer, 1) != 1 || buffer[0] != 'x') return 3;
              int unused = 0;
              if (ioctl(fds[0], FIONREAD, &unused) < 0) return 4;
              void* page =
                  mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
              if (page == MAP_FAILED || munmap(page, 4096) < 0) return 5;
              const int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
              if (sock < 0 || close(sock) < 0) return 6;
              int pair[2];
              if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0) return 7;
              if (getpid() <= 0) return 8;
              return 0;
            }),
            exited(0));
}

struct ProbeRun {
  std::string status;
  std::string output;
};

ProbeRun run_probe(const std::vector<std::string>& args) {
  const SeccompProgram& program = policy_program();
  int out[2];
  if (pipe2(out, O_CLOEXEC) < 0) return {std::string("pipe: ") + std::strerror(errno), ""};
  ProbeRun run;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return {std::string("fork: ") + std::strerror(errno), ""};
  if (pid == 0) {
    const rlimit no_core{0, 0};
    if (setsid() < 0 || setrlimit(RLIMIT_CORE, &no_core) < 0) _exit(kCheckFailed);
    if (dup2(out[1], STDOUT_FILENO) < 0) _exit(kCheckFailed);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) _exit(kInstallFailed);
    try {
      install_seccomp_program(program);
    } catch (const std::exception&) {
      _exit(kInstallFailed);
    }
    std::vector<char*> argv{const_cast<char*>(PANDO_SANDBOX_PROBE)};
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(PANDO_SANDBOX_PROBE, argv.data());
    _exit(kCheckFailed);
  }
  close(out[1]);
  char buffer[4096];
  ssize_t n;
  while ((n = read(out[0], buffer, sizeof(buffer))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    run.output.append(buffer, static_cast<size_t>(n));
  }
  close(out[0]);
  run.status = describe(wait_for(pid));
  return run;
}

TEST(SeccompTest, ProbeUnderFilterReportsEveryRow) {
  const ProbeRun run = run_probe({"denied-syscalls"});
  ASSERT_EQ(run.status, exited(0)) << run.output;

  std::map<std::string, std::string> results;  // check -> result
  std::istringstream lines(run.output);
  std::string check;
  std::string result;
  while (lines >> check >> result) results[check] = result;

  std::set<std::string> explained;
  for (const auto& entry : seccomp_policy()) {
    if (entry.number < 0) continue;
    SCOPED_TRACE(entry.syscall);
    const std::string expected = "errno=" + entry.action.substr(0, entry.action.find(' '));
    int lines_for_row = 0;
    for (const auto& [name, value] : results) {
      if (name != entry.syscall && name.rfind(entry.syscall + "-", 0) != 0) continue;
      EXPECT_EQ(value, expected) << name;
      explained.insert(name);
      ++lines_for_row;
    }
    EXPECT_GT(lines_for_row, 0) << "the probe does not try " << entry.syscall;
  }
  for (const auto& [name, value] : results) {
    if (name.rfind("allow-", 0) == 0) {
      EXPECT_EQ(value, "ok") << name;
      explained.insert(name);
    }
    EXPECT_TRUE(explained.count(name)) << "probe line for no policy row: " << name;
  }
  for (const char* check : {"clone-newuser", "unshare-newuser", "ioctl-tiocsti",
                            "ioctl-tiocsti-high", "personality-linux32", "allow-thread"}) {
    EXPECT_TRUE(results.count(check)) << check;
  }
}

// A temporary directory, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/pandotest-seccomp-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The real calls on real files, as root (whom the kernel would let set both bits): set-id modes
// fail and leave nothing set-id behind, plain modes work.
TEST(SeccompTest, ProbeMakesNoSetIdFile) {
  const ScratchDir dir;
  ASSERT_FALSE(dir.path().empty()) << std::strerror(errno);
  const bool has_fchmodat2 = run_child([] { return raw(__NR_fchmodat2, kBad, kBad, 0755, 0); },
                                       /*install=*/false) != exited(ENOSYS);
  const ProbeRun run = run_probe({"set-id", dir.path()});
  ASSERT_EQ(run.status, exited(0)) << run.output;

  std::map<std::string, std::string> results;
  std::istringstream lines(run.output);
  std::string check;
  std::string result;
  while (lines >> check >> result) results[check] = result;

  std::map<std::string, std::string> expected;
  for (const char* call : {"chmod", "fchmod", "fchmodat", "fchmodat2", "chmod-dir", "open",
                           "openat", "creat", "mkdir", "mkdirat", "mknod", "mknodat"}) {
    const bool missing = std::string(call) == "fchmodat2" && !has_fchmodat2;
    expected[std::string(call) + "-setuid"] = "errno=EPERM";
    expected[std::string(call) + "-setgid"] = "errno=EPERM";
    expected[std::string(call) + "-plain"] = missing ? "errno=ENOSYS" : "ok";
  }
  expected["openat2"] = "errno=ENOSYS";
  EXPECT_EQ(results, expected) << run.output;

  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    struct stat st {};
    ASSERT_EQ(lstat(entry.path().c_str(), &st), 0) << entry.path();
    EXPECT_EQ(st.st_mode & (S_ISUID | S_ISGID), 0u) << entry.path();
    ++entries;
  }
  // The files the chmod calls act on (5 calls, 3 variants) and the plain makes (7 calls).
  EXPECT_EQ(entries, 5 * 3 + 7);
}

TEST(SeccompTest, ProbeDiesOnOtherAbis) {
  const std::string int80 = i386_abi_enabled() ? killed(SIGSYS) : killed(SIGSEGV);
  const ProbeRun i386 = run_probe({"int80"});
  EXPECT_EQ(i386.status, int80) << i386.output;
  EXPECT_EQ(i386.output, "");
  const ProbeRun x32 = run_probe({"x32"});
  EXPECT_EQ(x32.status, killed(SIGSYS)) << x32.output;
  EXPECT_EQ(x32.output, "");
}

TEST(SeccompTest, ProbeStatusShowsTheFilter) {
  const ProbeRun run = run_probe({"status"});
  ASSERT_EQ(run.status, exited(0));
  EXPECT_NE(run.output.find("NoNewPrivs:\t1\n"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("Seccomp:\t2\n"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("CapEff:\t"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace pando::sandbox
