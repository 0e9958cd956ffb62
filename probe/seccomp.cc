// pando-helper-probe: the system calls the seccomp filter refuses.

#include <errno.h>
#include <fcntl.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <termios.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "probe/probe.h"

namespace pando::probe {

namespace {

void check_seccomp_mode() {
  const std::string mode = status_field("Seccomp");
  if (mode != "2") return fail("seccomp.mode", "Seccomp: " + (mode.empty() ? "unknown" : mode));
  pass("seccomp.mode", "a filter is installed (mode 2)");
}

// PTRACE_TRACEME succeeds for any untraced process without a filter; a child
// tries it, so that this process is never traced.
void check_ptrace() {
  expect_errno_in_child(
      "seccomp.ptrace", [] { return syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0); }, EPERM);
}

// Reading one's own memory is always allowed without a filter.
void check_process_vm_readv() {
  char source[8] = "pando";
  char target[8] = {};
  iovec local{target, sizeof(target)};
  iovec remote{source, sizeof(source)};
  expect_errno("seccomp.process_vm_readv",
               syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0), EPERM);
}

// Attempts that would change this process when they succeed run in a child.
void check_mount() {
  expect_errno_in_child(
      "seccomp.mount", [] { return static_cast<long>(mount("none", "/tmp", "tmpfs", 0, nullptr)); },
      EPERM);
}

void check_new_mount_api() {
  expect_errno("seccomp.fsopen", syscall(SYS_fsopen, "tmpfs", 0), EPERM);
  expect_errno("seccomp.open_tree", syscall(SYS_open_tree, AT_FDCWD, "/tmp", 1 /* CLONE */), EPERM);
}

void check_chroot() {
  expect_errno_in_child(
      "seccomp.chroot", [] { return static_cast<long>(chroot("/tmp")); }, EPERM);
}

// An unprivileged user namespace is allowed on most kernels: only the filter
// refuses it here.
void check_unshare() {
  expect_errno_in_child(
      "seccomp.unshare_user", [] { return static_cast<long>(unshare(CLONE_NEWUSER)); }, EPERM);
}

void check_clone_namespace() {
  expect_errno_in_child(
      "seccomp.clone_newuser",
      [] {
        const long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
        if (pid == 0) _exit(0);
        if (pid > 0) waitpid(static_cast<pid_t>(pid), nullptr, 0);
        return pid;
      },
      EPERM);
}

void check_setns() {
  const int fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return skip("seccomp.setns", "/proc/self/ns/net: " + errno_name(errno));
  expect_errno_in_child(
      "seccomp.setns", [fd] { return static_cast<long>(setns(fd, 0)); }, EPERM);
  close(fd);
}

void check_clone3() {
  clone_args args{};
  args.exit_signal = SIGCHLD;
  expect_errno_in_child(
      "seccomp.clone3",
      [&args] {
        const long pid = syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0) _exit(0);
        if (pid > 0) waitpid(static_cast<pid_t>(pid), nullptr, 0);
        return pid;
      },
      ENOSYS);
}

void check_keyctl() {
  expect_errno("seccomp.keyctl",
               syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0), EPERM);
  expect_errno("seccomp.add_key",
               syscall(SYS_add_key, "user", "pando-selftest", "x", 1, KEY_SPEC_PROCESS_KEYRING),
               EPERM);
}

void check_bpf() { expect_errno("seccomp.bpf", syscall(SYS_bpf, 0, nullptr, 0), EPERM); }

void check_perf_event_open() {
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.exclude_kernel = 1;
  expect_errno("seccomp.perf_event_open", syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0), EPERM);
}

void check_userfaultfd() {
  expect_errno("seccomp.userfaultfd", syscall(SYS_userfaultfd, O_CLOEXEC), EPERM);
}

void check_io_uring() {
  char params[120] = {};
  expect_errno("seccomp.io_uring_setup", syscall(SYS_io_uring_setup, 1, params), EPERM);
}

// Without the filter, TIOCSTI on a pipe is ENOTTY.
void check_tiocsti() {
  const char c = 'x';
  expect_errno("seccomp.tiocsti", ioctl(0, TIOCSTI, &c), EPERM);
}

void check_personality() {
  expect_errno_in_child(
      "seccomp.personality", [] { return static_cast<long>(personality(PER_LINUX32)); }, EPERM);
}

void check_init_module() {
  expect_errno("seccomp.init_module", syscall(SYS_init_module, nullptr, 0, ""), EPERM);
}

void check_open_by_handle() {
  expect_errno("seccomp.open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, nullptr, 0),
               EPERM);
}

void check_openat2() {
  char how[24] = {};
  expect_errno("seccomp.openat2", syscall(SYS_openat2, AT_FDCWD, "/", how, sizeof(how)), ENOSYS);
}

// Set-id modes on a file of the role's own (in HOME, which is in the project
// on disk): refused by the filter, whatever the mount flags.
void check_setid_chmod() {
  const std::string path = home() + "/pando-selftest-setid";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  if (fd < 0)
    return fail("seccomp.setuid_chmod", "cannot create " + path + ": " + errno_name(errno));
  close(fd);
  expect_errno("seccomp.setuid_chmod", chmod(path.c_str(), 04755), EPERM);
  expect_errno("seccomp.setgid_chmod", chmod(path.c_str(), 02755), EPERM);
  unlink(path.c_str());
  const std::string created = home() + "/pando-selftest-setid-create";
  const int made = open(created.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 04755);
  if (made >= 0) close(made);
  expect_errno("seccomp.setuid_create", made, EPERM);
  unlink(created.c_str());
}

// Write for others, by mode or by a POSIX ACL (a minimal one: user::rw-, group::r--,
// other::rw-), on a file of the role's own: refused by the filter.
void check_other_write() {
  const std::string path = home() + "/pando-selftest-other-write";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fail("seccomp.other_write_chmod", "cannot create " + path + ": " + errno_name(errno));
  }
  close(fd);
  expect_errno("seccomp.other_write_chmod", chmod(path.c_str(), 0666), EPERM);
  struct AclEntry {
    uint16_t tag;
    uint16_t perm;
    uint32_t id;
  };
  struct {
    uint32_t version = 2;
    AclEntry entries[3] = {{0x01, 6, ~0u}, {0x04, 4, ~0u}, {0x20, 6, ~0u}};
  } acl;
  expect_errno("seccomp.acl",
               setxattr(path.c_str(), "system.posix_acl_access", &acl, sizeof(acl), 0), EOPNOTSUPP);
  unlink(path.c_str());
}

// i386 syscalls kill the process. A kernel without the i386 entry faults on
// int 0x80 instead (SIGSEGV): nothing to test there.
void check_i386_abi() {
  const int status = in_child([] {
    long result = 20;  // __NR_getpid on i386
    asm volatile("int $0x80" : "+a"(result) : : "memory");
    return 0;
  });
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) {
    return pass("seccomp.i386_abi", "int 0x80 killed the process (SIGSYS)");
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) {
    return skip("seccomp.i386_abi", "this kernel has no i386 syscall entry (int 0x80 faults)");
  }
  fail("seccomp.i386_abi",
       "int 0x80 did not kill the process (wait status " + std::to_string(status) + ")");
}

// x32 syscalls kill the process; a kernel without x32 answers ENOSYS.
void check_x32_abi() {
  constexpr long kX32Bit = 0x40000000;
  int status = 0;
  const int err = errno_in_child([] { return syscall(kX32Bit | SYS_getpid); }, status);
  if (err < 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) {
    return pass("seccomp.x32_abi", "an x32 syscall killed the process (SIGSYS)");
  }
  if (err == ENOSYS) return skip("seccomp.x32_abi", "this kernel has no x32 ABI (ENOSYS)");
  fail("seccomp.x32_abi",
       "an x32 syscall did not kill the process (wait status " + std::to_string(status) + ")");
}

}  // namespace

void seccomp_checks() {
  check_seccomp_mode();
  check_ptrace();
  check_process_vm_readv();
  check_mount();
  check_new_mount_api();
  check_chroot();
  check_unshare();
  check_clone_namespace();
  check_setns();
  check_clone3();
  check_keyctl();
  check_bpf();
  check_perf_event_open();
  check_userfaultfd();
  check_io_uring();
  check_tiocsti();
  check_personality();
  check_init_module();
  check_open_by_handle();
  check_openat2();
  check_setid_chmod();
  check_other_write();
  check_i386_abi();
  check_x32_abi();
}

}  // namespace pando::probe
