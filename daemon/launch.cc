#include "daemon/launch.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "common/fd_passing.h"
#include "daemon/sandbox/mounts.h"

namespace pando::daemon {

namespace {

// Pipes as large as the data path wants; fewer wakeups per MiB relayed.
constexpr int kPipeBytes = 1 << 20;
// Child-side fds are parked above this before being moved into place, so the
// dup2() calls after clone never overwrite a source still needed.
constexpr int kParkFloor = 64;
constexpr int kLauncherExecFd = 4;

[[noreturn]] void fail(const char* what) {
  throw std::system_error(errno, std::generic_category(), what);
}

UniqueFd park(int fd) {
  const int parked = fcntl(fd, F_DUPFD_CLOEXEC, kParkFloor);
  if (parked < 0) fail("F_DUPFD_CLOEXEC");
  return UniqueFd(parked);
}

void make_pipe(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) fail("pipe2");
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  // Best effort: an unprivileged limit or memory pressure only costs speed.
  fcntl(fds[0], F_SETPIPE_SZ, kPipeBytes);
}

constexpr int kMoves = 5;

struct LauncherExec {
  const int (*moves)[2];
  char* mount_namespace;
};

// Runs in the child between clone and exec, in the daemon's memory:
// async-signal-safe syscalls only, writing nothing but its own stack and
// errno (which the daemon reads only when clone itself fails).
int exec_launcher(void* arg) {
  const auto* exec = static_cast<const LauncherExec*>(arg);
  for (int i = 0; i < kMoves; ++i) {
    if (dup2(exec->moves[i][0], exec->moves[i][1]) < 0) _exit(127);
  }
  if (fcntl(kLauncherExecFd, F_SETFD, FD_CLOEXEC) != 0) _exit(127);
  if (syscall(SYS_close_range, kLauncherExecFd + 1, ~0U, 0) != 0) _exit(127);
  char name[] = "pando-helper-sandbox";
  char* const argv[] = {name, exec->mount_namespace, nullptr};
  char* const envp[] = {nullptr};
  syscall(SYS_execveat, kLauncherExecFd, "", argv, envp, AT_EMPTY_PATH);
  _exit(127);
}

// The child's stack. One suffices: with CLONE_VFORK the daemon sleeps until
// the child has exec'd (or exited), and the daemon starts launchers from one
// thread only.
alignas(16) char launcher_stack[64 * 1024];

}  // namespace

StartedSandbox start_sandbox(int launcher_fd, int devnull_fd) {
  StartedSandbox started;
  // The launcher refuses to run in the mount namespace it was started from.
  struct stat own {};
  if (stat("/proc/self/ns/mnt", &own) != 0) fail("stat /proc/self/ns/mnt");
  std::string mount_namespace = std::to_string(own.st_ino);
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) fail("socketpair");
  started.control.reset(pair[0]);
  UniqueFd child_control(pair[1]);

  const UniqueFd parked[kMoves] = {park(devnull_fd), park(devnull_fd), park(devnull_fd),
                                   park(child_control.get()), park(launcher_fd)};
  const int moves[kMoves][2] = {{parked[0].get(), 0},
                                {parked[1].get(), 1},
                                {parked[2].get(), 2},
                                {parked[3].get(), sandbox::kControlFd},
                                {parked[4].get(), kLauncherExecFd}};

  // Like posix_spawn: the child borrows our memory until it execs
  // (CLONE_VM|CLONE_VFORK), so the daemon's page tables are not copied for a
  // process that replaces them at once. The legacy clone() call, because
  // glibc offers clone3 no wrapper that runs the child on another stack.
  int pidfd = -1;
  LauncherExec exec{moves, mount_namespace.data()};
  const int flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | CLONE_NEWNS | CLONE_NEWPID |
                    CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD;

  // No signal handler of the daemon may run in the child before exec.
  sigset_t all, saved;
  sigfillset(&all);
  if (pthread_sigmask(SIG_SETMASK, &all, &saved) != 0) fail("pthread_sigmask");
  const pid_t pid =
      clone(exec_launcher, launcher_stack + sizeof(launcher_stack), flags, &exec, &pidfd);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) {
    errno = clone_errno;
    fail("clone");
  }
  started.pid = static_cast<pid_t>(pid);
  started.pidfd.reset(pidfd);
  started.started_at = std::chrono::steady_clock::now();
  return started;
}

SessionStdio make_session_stdio(DirectStdio* direct) {
  SessionStdio stdio;
  if (direct != nullptr) {
    stdio.child[0] = std::move(direct->stdin_read);
    stdio.child[1] = std::move(direct->stdout_write);
  } else {
    make_pipe(stdio.child[0], stdio.stdin_write);
    make_pipe(stdio.stdout_read, stdio.child[1]);
  }
  make_pipe(stdio.stderr_read, stdio.child[2]);
  return stdio;
}

void send_plan(int control_fd, const std::string& plan, const std::vector<int>& fds) {
  const ssize_t n = send_with_fds(control_fd, plan.data(), plan.size(), fds);
  if (n < 0) fail("sending the plan");
  if (static_cast<size_t>(n) != plan.size()) {
    errno = EMSGSIZE;
    fail("sending the plan");
  }
}

}  // namespace pando::daemon
