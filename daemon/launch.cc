#include "daemon/launch.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/blocked_syscall.h"
#include "common/fd_passing.h"
#include "common/json_log.h"
#include "daemon/sandbox/mounts.h"
#include "daemon/sandbox/seccomp.h"
#include "proto/error.h"

namespace pando::daemon {

namespace {

// Pipes as large as the data path wants; fewer wakeups per MiB relayed.
constexpr int kPipeBytes = 1 << 20;
// Child-side fds are parked above this before being moved into place, so the
// dup2() calls after clone never overwrite a source still needed.
constexpr int kParkFloor = 64;
// Above every fd the template keeps (mounts.h); close-on-exec.
constexpr int kLauncherExecFd = sandbox::kGroupWriteProgramFd + 1;

[[noreturn]] void fail(const char* what) { throw_errno(what, helper::v1::ERROR_LAUNCH_FAILED); }

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

constexpr int kMoves = 7;
// The daemon waits this long for the template to answer (it answers right
// after its clone()).
constexpr int kTemplateReplyMillis = 10000;

struct TemplateExec {
  const int (*moves)[2];
};

// Runs in the child between clone and exec, in the daemon's memory:
// async-signal-safe syscalls only, writing nothing but its own stack and
// errno (which the daemon reads only when clone itself fails).
int exec_template(void* arg) {
  const auto* exec = static_cast<const TemplateExec*>(arg);
  for (int i = 0; i < kMoves; ++i) {
    if (dup2(exec->moves[i][0], exec->moves[i][1]) < 0) _exit(127);
  }
  if (fcntl(kLauncherExecFd, F_SETFD, FD_CLOEXEC) != 0) _exit(127);
  if (syscall(SYS_close_range, kLauncherExecFd + 1, ~0U, 0) != 0) _exit(127);
  char name[] = "pando-helper-sandbox";
  char argument[sizeof(sandbox::kTemplateArgument)];
  std::memcpy(argument, sandbox::kTemplateArgument, sizeof(argument));
  char* const argv[] = {name, argument, nullptr};
  char* const envp[] = {nullptr};
  syscall(SYS_execveat, kLauncherExecFd, "", argv, envp, AT_EMPTY_PATH);
  _exit(127);
}

// The child's stack. One suffices: with CLONE_VFORK the daemon sleeps until
// the child has exec'd (or exited), and the daemon starts the template from
// one thread only.
alignas(16) char template_stack[64 * 1024];

}  // namespace

bool kill_and_reap(int pidfd) noexcept {
  // ESRCH: it is dead already, a zombie to reap. Any other failure leaves a
  // process that would not die: waiting for it would hang.
  if (syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0) != 0 && errno != ESRCH) {
    return false;
  }
  siginfo_t info{};
  while (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED) != 0 &&
         errno == EINTR) {
  }
  return true;
}

LauncherTemplate::LauncherTemplate(int launcher_fd)
    : launcher_fd_(launcher_fd),
      devnull_(open("/dev/null", O_RDWR | O_CLOEXEC)),
      seccomp_program_(sandbox::compile_seccomp_program()),
      group_write_program_(sandbox::compile_group_write_program()) {
  if (!devnull_.valid()) fail("/dev/null");
  start();
}

LauncherTemplate::~LauncherTemplate() { stop(); }

void LauncherTemplate::start() {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) fail("socketpair");
  UniqueFd control(pair[0]);
  UniqueFd child_control(pair[1]);

  const UniqueFd parked[kMoves] = {
      park(devnull_.get()),      park(devnull_.get()),         park(devnull_.get()),
      park(child_control.get()), park(seccomp_program_.get()), park(group_write_program_.get()),
      park(launcher_fd_)};
  const int moves[kMoves][2] = {{parked[0].get(), 0},
                                {parked[1].get(), 1},
                                {parked[2].get(), 2},
                                {parked[3].get(), sandbox::kControlFd},
                                {parked[4].get(), sandbox::kSeccompProgramFd},
                                {parked[5].get(), sandbox::kGroupWriteProgramFd},
                                {parked[6].get(), kLauncherExecFd}};

  // Like posix_spawn: the child borrows our memory until it execs
  // (CLONE_VM|CLONE_VFORK), so the daemon's page tables are not copied for a
  // process that replaces them at once. The legacy clone() call, because
  // glibc offers clone3 no wrapper that runs the child on another stack.
  int pidfd = -1;
  TemplateExec exec{moves};
  const int flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD;

  // No signal handler of the daemon may run in the child before exec.
  sigset_t all, saved;
  sigfillset(&all);
  if (const int err = pthread_sigmask(SIG_SETMASK, &all, &saved); err != 0) {
    errno = err;  // pthread_sigmask returns its error, errno is untouched
    fail("pthread_sigmask");
  }
  const pid_t pid =
      clone(exec_template, template_stack + sizeof(template_stack), flags, &exec, &pidfd);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) {
    errno = clone_errno;
    fail("clone");
  }
  pid_ = pid;
  pidfd_.reset(pidfd);
  control_ = std::move(control);
  const timeval timeout{kTemplateReplyMillis / 1000, 0};
  if (setsockopt(control_.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)) != 0) {
    fail("SO_RCVTIMEO");
  }
}

// The template prepares launchers ahead of requests at SCHED_IDLE
// (daemon/sandbox/main.cc), so that it never takes a CPU from a launch under
// way; a launch that waits for it must not wait behind every other task.
class LauncherTemplate::Hurry {
 public:
  explicit Hurry(LauncherTemplate& launchers) : launchers_(launchers) {
    const sched_param param{};
    if (sched_getscheduler(launchers.pid_) == SCHED_IDLE &&
        sched_setscheduler(launchers.pid_, SCHED_OTHER, &param) == 0) {
      hurried_ = launchers.pid_;
    }
  }
  ~Hurry() {
    const sched_param param{};
    if (hurried_ > 0 && launchers_.pid_ == hurried_) {
      (void)sched_setscheduler(hurried_, SCHED_IDLE, &param);
    }
  }
  Hurry(const Hurry&) = delete;
  Hurry& operator=(const Hurry&) = delete;

 private:
  LauncherTemplate& launchers_;
  pid_t hurried_ = -1;
};

// SIGKILL before closing its socket: on EOF the template would exit
// normally, and a sanitizer build's exit-time work (LeakSanitizer starts a
// tracer task) could then be cut short by the kill and leave that task behind.
void LauncherTemplate::stop(Answers answers) noexcept {
  {
    // A launcher the template made but the daemon never took is the daemon's
    // child all the same (CLONE_PARENT): it is killed and reaped here rather
    // than left to outlive the daemon. Answers already sent stay readable
    // after the template is gone.
    std::optional<Hurry> hurry;
    if (answers == Answers::kWait && !requested_.empty() && control_.valid()) hurry.emplace(*this);
    while (!requested_.empty() && control_.valid()) {
      StartedSandbox answered;
      const size_t due = requested_.size();
      try {
        const int flags = answers == Answers::kWait ? 0 : MSG_DONTWAIT;
        if (receive_answer(flags, answered) != Answer::kLauncher) break;
      } catch (const std::exception&) {
        // A failed clone() took its request: later answers may still come.
        // Any other failure would only repeat.
        if (requested_.size() == due) break;
        continue;
      }
      kill_and_reap(answered.pidfd.get());
    }
  }
  requested_.clear();
  pid_ = -1;
  if (pidfd_.valid()) kill_and_reap(pidfd_.get());
  pidfd_.reset();
  control_.reset();
}

void LauncherTemplate::restart(std::string_view reason) {
  log::warn("launcher_template_restarted", {{"reason", reason}});
  stop();
  start();
}

bool LauncherTemplate::send_request() {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) fail("socketpair");
  Request request{UniqueFd(pair[0]), std::chrono::steady_clock::now()};
  UniqueFd launcher_control(pair[1]);
  const char asking = 'L';
  const int attached[] = {launcher_control.get()};
  if (send_with_fds(control_.get(), &asking, sizeof(asking), attached) != 1) {
    if (errno == EPIPE || errno == ECONNRESET) return false;
    fail("asking the launcher template");
  }
  requested_.push_back(std::move(request));
  return true;
}

LauncherTemplate::Answer LauncherTemplate::receive_answer(int flags, StartedSandbox& out) {
  std::int32_t answer = 0;
  std::vector<UniqueFd> fds;
  bool truncated = false;
  const ssize_t n =
      receive_with_fds(control_.get(), &answer, sizeof(answer), 1, flags, fds, truncated);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    if ((flags & MSG_DONTWAIT) != 0) return Answer::kNotYet;
    // The wait timed out: a late answer must not be taken for the next
    // request's.
    stop(Answers::kTaken);
    errno = ETIMEDOUT;
  }
  if (n == 0 || (n < 0 && errno == ECONNRESET)) return Answer::kTemplateGone;
  if (n < 0) fail("waiting for the launcher template");
  Request request = std::move(requested_.front());
  requested_.pop_front();
  if (n == sizeof(answer) && !truncated && answer < 0 && fds.empty()) {
    errno = -answer;
    // The template runs under the daemon's own seccomp filters: probed here alike.
    throw_if_refused_by_environment(kClone3Call, "the launcher template's clone3 of a session");
    fail("the launcher template's clone()");
  }
  if (n != sizeof(answer) || truncated || answer <= 0 || fds.size() != 1) {
    // Not its protocol: start over with a fresh one next time.
    stop(Answers::kTaken);
    errno = EPROTO;
    fail("the launcher template's answer");
  }
  out.pid = static_cast<pid_t>(answer);
  out.pidfd = std::move(fds[0]);
  out.control = std::move(request.control);
  out.started_at = request.at;
  return Answer::kLauncher;
}

void LauncherTemplate::request_sandbox() {
  if (control_.valid() && send_request()) return;
  restart(control_.valid() ? "it exited" : "it was stopped");
  if (!send_request()) {
    errno = ECHILD;
    fail("the launcher template exited");
  }
}

std::optional<StartedSandbox> LauncherTemplate::take_answered() {
  if (requested_.empty() || !control_.valid()) return std::nullopt;
  StartedSandbox answered;
  switch (receive_answer(MSG_DONTWAIT, answered)) {
    case Answer::kLauncher:
      return answered;
    case Answer::kTemplateGone:
      stop();  // the next request starts a fresh one
      return std::nullopt;
    case Answer::kNotYet:
      return std::nullopt;
  }
  return std::nullopt;
}

StartedSandbox LauncherTemplate::start_sandbox() {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt > 0 || !control_.valid()) {
      // Gone (killed, or a failed restart): once more with a fresh template.
      restart(control_.valid() ? "it exited" : "it was stopped");
    }
    if (requested_.empty() && !send_request()) continue;
    const Hurry hurry(*this);
    StartedSandbox started;
    if (receive_answer(0, started) == Answer::kLauncher) return started;
  }
  errno = ECHILD;
  fail("the launcher template exited");
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
