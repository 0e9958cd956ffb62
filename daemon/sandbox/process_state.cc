#include "daemon/sandbox/process_state.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "proto/error.h"

namespace pando::sandbox {
namespace {

void reset_signals() {
  sigset_t empty;
  if (sigemptyset(&empty) != 0) throw_errno("reset_process_state: sigemptyset");
  if (sigprocmask(SIG_SETMASK, &empty, nullptr) != 0) {
    throw_errno("reset_process_state: sigprocmask");
  }
  sigset_t now;
  if (sigprocmask(SIG_SETMASK, nullptr, &now) != 0) {
    throw_errno("reset_process_state: sigprocmask");
  }
  if (!sigisemptyset(&now)) {
    throw Error(pando::helper::v1::ERROR_LAUNCH_FAILED,
                "reset_process_state: signals still blocked");
  }

  // SIG_IGN survives execve, so every disposition is reset, not only handlers.
  // glibc reserves 32..SIGRTMIN-1 for itself, refuses to change them and never
  // ignores them; execve resets their handlers.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  if (sigemptyset(&dfl.sa_mask) != 0) throw_errno("reset_process_state: sigemptyset");
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    if (sig >= 32 && sig < SIGRTMIN) continue;
    if (sigaction(sig, &dfl, nullptr) != 0) {
      throw_errno("reset_process_state: sigaction(" + std::to_string(sig) + ")");
    }
  }
}

void set_limit(int resource, const char* name, rlim_t value) {
  const struct rlimit limit = {value, value};
  if (setrlimit(resource, &limit) != 0) {
    throw_errno(std::string("reset_process_state: setrlimit(") + name + ", " +
                std::to_string(value) + ")");
  }
}

int close_fd_range(unsigned int first, unsigned int last) {
  // glibc 2.34+ has the wrapper; the raw syscall keeps older build hosts working.
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  return close_range(first, last, 0);
#else
  return static_cast<int>(syscall(SYS_close_range, first, last, 0U));
#endif
}

// Closes every fd above 2 except keep_fd, which must be close-on-exec so that
// it cannot reach the role binary either (runc CVE-2024-21626).
void close_inherited_fds(int keep_fd) {
  if (keep_fd > 2) {
    const int flags = fcntl(keep_fd, F_GETFD);
    if (flags < 0) throw_errno("reset_process_state: fcntl(keep_fd)");
    if ((flags & FD_CLOEXEC) == 0) {
      throw Error(pando::helper::v1::ERROR_LAUNCH_FAILED,
                  "reset_process_state: the kept fd is not close-on-exec");
    }
    const auto keep = static_cast<unsigned int>(keep_fd);
    if (keep > 3 && close_fd_range(3, keep - 1) != 0) {
      throw_errno("reset_process_state: close_range(3, " + std::to_string(keep - 1) + ")");
    }
    if (close_fd_range(keep + 1, ~0U) != 0) {
      throw_errno("reset_process_state: close_range(" + std::to_string(keep + 1) + ", ~0U)");
    }
    return;
  }
  if (close_fd_range(3, ~0U) != 0) throw_errno("reset_process_state: close_range(3, ~0U)");
}

}  // namespace

void reset_process_state(const pando::helper::sandbox::v1::SandboxPlan& plan, int keep_fd) {
  reset_signals();

  umask(022);

  set_limit(RLIMIT_CORE, "RLIMIT_CORE",
            plan.rlimit_core() != 0 ? static_cast<rlim_t>(plan.rlimit_core()) : kDefaultRlimitCore);
  set_limit(
      RLIMIT_NOFILE, "RLIMIT_NOFILE",
      plan.rlimit_nofile() != 0 ? static_cast<rlim_t>(plan.rlimit_nofile()) : kDefaultRlimitNofile);

  // A new session without a controlling terminal: the role cannot reach the
  // caller's terminal (TIOCSTI and friends, CVE-2017-5226).
  if (setsid() < 0) throw_errno("reset_process_state: setsid");

  // Not dumpable while the launcher's state is still in memory: no ptrace
  // attach, no core, /proc/<pid> owned by root. execve of the role binary makes
  // it dumpable again, which is expected (the role then holds nothing of ours).
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) throw_errno("reset_process_state: PR_SET_DUMPABLE");
  if (prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) {
    throw Error(pando::helper::v1::ERROR_LAUNCH_FAILED,
                "reset_process_state: still dumpable after PR_SET_DUMPABLE 0");
  }

  // The kernel clears the parent-death signal on credential changes, so this
  // must come after drop_to_role_user. If init is already gone, the pid
  // namespace is being torn down and the kernel kills us anyway.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    throw_errno("reset_process_state: PR_SET_PDEATHSIG");
  }

  close_inherited_fds(keep_fd);
}

}  // namespace pando::sandbox
