#include "daemon/launch.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "daemon/sandbox/mounts.h"

namespace pando::daemon {

namespace {

// Pipes as large as the data path wants; fewer wakeups per MiB relayed.
constexpr int kPipeBytes = 1 << 20;
// Child-side fds are parked above this before being moved into place, so the
// dup2() calls after clone3 never overwrite a source still needed.
constexpr int kParkFloor = 64;
constexpr int kLauncherExecFd = 7;

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

// Runs in the child between clone3 and exec: async-signal-safe syscalls only.
[[noreturn]] void exec_launcher(const int (&moves)[8][2], int count) {
  for (int i = 0; i < count; ++i) {
    if (dup2(moves[i][0], moves[i][1]) < 0) _exit(127);
  }
  if (fcntl(kLauncherExecFd, F_SETFD, FD_CLOEXEC) != 0) _exit(127);
  if (syscall(SYS_close_range, kLauncherExecFd + 1, ~0U, 0) != 0) _exit(127);
  char name[] = "pando-helper-sandbox";
  char* const argv[] = {name, nullptr};
  char* const envp[] = {nullptr};
  syscall(SYS_execveat, kLauncherExecFd, "", argv, envp, AT_EMPTY_PATH);
  _exit(127);
}

}  // namespace

StartedSandbox start_sandbox(int launcher_fd, const ResolvedProject& project,
                             const DirectStdio* direct) {
  StartedSandbox started;
  UniqueFd child_stdin, child_stdout, child_stderr;
  if (direct == nullptr) {
    make_pipe(child_stdin, started.stdin_write);
    make_pipe(started.stdout_read, child_stdout);
  }
  make_pipe(started.stderr_read, child_stderr);
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) fail("socketpair");
  started.control.reset(pair[0]);
  UniqueFd child_control(pair[1]);

  UniqueFd parked[8];
  int moves[8][2];
  int count = 0;
  auto plan_move = [&](int source, int target) {
    parked[count] = park(source);
    moves[count][0] = parked[count].get();
    moves[count][1] = target;
    ++count;
  };
  plan_move(direct != nullptr ? direct->stdin_read.get() : child_stdin.get(), 0);
  plan_move(direct != nullptr ? direct->stdout_write.get() : child_stdout.get(), 1);
  plan_move(child_stderr.get(), 2);
  plan_move(child_control.get(), sandbox::kControlFd);
  // Detached copies of the caller's directories: only in this (the daemon's)
  // mount namespace can they be cloned; the launcher mounts them.
  const UniqueFd project_tree = sandbox::clone_detached_tree(project.root.get());
  const UniqueFd sandbox_tree = sandbox::clone_detached_tree(project.sandbox_dir.get());
  UniqueFd auth_tree;
  if (project.auth_home.valid()) auth_tree = sandbox::clone_detached_tree(project.auth_home.get());
  plan_move(project_tree.get(), sandbox::kProjectFd);
  plan_move(sandbox_tree.get(), sandbox::kSandboxDirFd);
  if (auth_tree.valid()) plan_move(auth_tree.get(), sandbox::kAuthHomeFd);
  plan_move(launcher_fd, kLauncherExecFd);

  int pidfd = -1;
  struct clone_args args {};
  args.flags =
      CLONE_PIDFD | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;

  // No signal handler of the daemon may run in the child before exec.
  sigset_t all, saved;
  sigfillset(&all);
  if (pthread_sigmask(SIG_SETMASK, &all, &saved) != 0) fail("pthread_sigmask");
  const long pid = syscall(SYS_clone3, &args, sizeof(args));
  if (pid == 0) exec_launcher(moves, count);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) {
    errno = clone_errno;
    fail("clone3");
  }
  started.pid = static_cast<pid_t>(pid);
  started.pidfd.reset(pidfd);
  return started;
}

}  // namespace pando::daemon
