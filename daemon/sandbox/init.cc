#include "daemon/sandbox/init.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "proto/sandbox.pb.h"

namespace pando::sandbox {

namespace {

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};

sigset_t init_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kForwarded) sigaddset(&set, sig);
  sigaddset(&set, SIGCHLD);
  return set;
}

[[noreturn]] void report_and_exit(int control_fd, int wait_status) noexcept {
  pando::helper::sandbox::v1::SandboxEvent event;
  auto* exited = event.mutable_role_exited();
  if (WIFSIGNALED(wait_status)) {
    exited->set_signal(WTERMSIG(wait_status));
  } else {
    exited->set_exit_code(WEXITSTATUS(wait_status));
  }
  const std::string bytes = event.SerializeAsString();
  // If the daemon is gone there is nobody to tell; exiting is all that is left.
  (void)send(control_fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  _exit(0);
}

}  // namespace

void block_init_signals() noexcept {
  const sigset_t set = init_signals();
  sigprocmask(SIG_BLOCK, &set, nullptr);
}

void run_init(pid_t role_pid, int control_fd) noexcept {
  const sigset_t set = init_signals();
  const int sfd = signalfd(-1, &set, SFD_CLOEXEC);
  if (sfd < 0) _exit(125);
  for (;;) {
    struct signalfd_siginfo info {};
    const ssize_t n = read(sfd, &info, sizeof(info));
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(info))) _exit(125);
    if (info.ssi_signo != SIGCHLD) {
      kill(role_pid, static_cast<int>(info.ssi_signo));
      continue;
    }
    // Signals coalesce: reap everything that is ready.
    for (;;) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      if (pid == role_pid) report_and_exit(control_fd, status);
    }
  }
}

}  // namespace pando::sandbox
