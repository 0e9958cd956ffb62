// pando-helper-sandbox: started once by pando-helperd, as root, as the launcher
// template. It reads what every session shares (the seccomp program the daemon
// compiled) and then, for each request of the daemon, forks a copy of itself as
// PID 1 of new mount, pid, network, IPC and UTS namespaces: that session's
// launcher, which prepares ahead of the request, waits for the plan, applies
// the confinement layers in the order below and then stays behind as the
// session's init.
// SECURITY.md lists the same order.

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/capability.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/fd_passing.h"
#include "common/unique_fd.h"
#include "daemon/sandbox/credentials.h"
#include "daemon/sandbox/init.h"
#include "daemon/sandbox/landlock.h"
#include "daemon/sandbox/mounts.h"
#include "daemon/sandbox/namespaces.h"
#include "daemon/sandbox/process_state.h"
#include "daemon/sandbox/seccomp.h"
#include "proto/error.h"
#include "proto/sandbox.pb.h"

namespace {

namespace sb = pando::sandbox;
namespace v1 = pando::helper::v1;
using pando::UniqueFd;
using pando::helper::sandbox::v1::SandboxEvent;
using pando::helper::sandbox::v1::SandboxPlan;

constexpr size_t kMaxPlanBytes = 1 << 20;
// What a launcher's argv[1] reads (in place of the template's, same length).
constexpr char kLauncherArgument[] = "--launcher";
// stdio, the caller's trees and the runtime paths (the daemon caps those).
constexpr size_t kMaxPlanFds = 64;

void send_event(const SandboxEvent& event) {
  const std::string bytes = event.SerializeAsString();
  (void)send(sb::kControlFd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
}

void report_setup_failure(v1::ErrorCode code, const std::string& message) {
  SandboxEvent event;
  event.mutable_setup_failed()->set_code(code);
  event.mutable_setup_failed()->set_message(message);
  send_event(event);
}

// The plan and, attached with SCM_RIGHTS in this order, the role's stdin,
// stdout and stderr, the project, the sandbox dir, the auth home (when the plan
// has one), one tree per runtime path and the session's cgroup v1 `tasks` files.
struct ReceivedPlan {
  SandboxPlan plan;
  UniqueFd stdio[3];
  sb::PlanTrees trees;
  std::vector<UniqueFd> cgroup_tasks;
};

ReceivedPlan receive_plan() {
  // Peek at the datagram's size first: a plan is a few KiB, and clearing a
  // maximal buffer would cost every launch.
  ssize_t size;
  do {
    size = recv(sb::kControlFd, nullptr, 0, MSG_PEEK | MSG_TRUNC);
  } while (size < 0 && errno == EINTR);
  if (size < 0) pando::throw_errno("receiving the plan");
  if (size == 0 || static_cast<size_t>(size) > kMaxPlanBytes) {
    throw pando::Error(v1::ERROR_LAUNCH_FAILED, "the daemon sent no valid plan");
  }
  std::vector<char> buffer(static_cast<size_t>(size));
  std::vector<UniqueFd> fds;
  bool truncated = false;
  const ssize_t n = pando::receive_with_fds(sb::kControlFd, buffer.data(), buffer.size(),
                                            kMaxPlanFds, 0, fds, truncated);
  if (n < 0) pando::throw_errno("receiving the plan");
  ReceivedPlan received;
  if (n != size || truncated || !received.plan.ParseFromArray(buffer.data(), static_cast<int>(n))) {
    throw pando::Error(v1::ERROR_LAUNCH_FAILED, "the daemon sent no valid plan");
  }
  const SandboxPlan& plan = received.plan;
  const size_t expected =
      5 + (plan.has_auth_home() ? 1 : 0) + plan.runtime_paths_size() + plan.cgroup_tasks_files();
  if (fds.size() != expected) {
    throw pando::Error(v1::ERROR_LAUNCH_FAILED, "the daemon sent " + std::to_string(fds.size()) +
                                                    " fds, not " + std::to_string(expected));
  }
  auto next = fds.begin();
  for (UniqueFd& fd : received.stdio) fd = std::move(*next++);
  received.trees.caller.project = std::move(*next++);
  received.trees.caller.sandbox_dir = std::move(*next++);
  if (plan.has_auth_home()) received.trees.caller.auth_home = std::move(*next++);
  for (int i = 0; i < plan.runtime_paths_size(); ++i) {
    received.trees.runtime.push_back(std::move(*next++));
  }
  while (next != fds.end()) received.cgroup_tasks.push_back(std::move(*next++));
  return received;
}

// The role's stdio become fds 0-2 of the launcher, which the role inherits.
void install_stdio(UniqueFd (&stdio)[3]) {
  for (int fd = 0; fd <= 2; ++fd) {
    if (dup2(stdio[fd].get(), fd) < 0) pando::throw_errno("dup2 role stdio");
    stdio[fd].reset();
  }
}

std::vector<char*> to_argv(google::protobuf::RepeatedPtrField<std::string>* items) {
  std::vector<char*> out;
  for (auto& item : *items) out.push_back(item.data());
  out.push_back(nullptr);
  return out;
}

// Hands a pre-exec failure to init; the role's exit code 127 stands in when
// even that fails.
[[noreturn]] void fail_role(int error_fd, const std::string& line) noexcept {
  if (write(error_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(127);
  _exit(127);
}

// The role process: credentials, process state, Landlock, seccomp, exec.
// A failure is written to `error_fd` (close-on-exec, so a successful exec
// leaves it empty) for init to report.
[[noreturn]] void become_role(SandboxPlan& plan, const sb::SeccompProgram& seccomp,
                              const sb::SeccompProgram* group_write, int error_fd) noexcept {
  try {
    sb::drop_to_role_user(plan.ids());
    if (chdir(plan.project_root().c_str()) != 0) pando::throw_errno("chdir to the project root");
    sb::reset_process_state(plan, error_fd);
    sb::apply_landlock(plan);
    sb::install_seccomp_program(seccomp);
    if (group_write != nullptr) sb::install_seccomp_program(*group_write);
  } catch (const pando::Error& e) {
    fail_role(error_fd, std::to_string(e.code()) + " " + e.what());
  }
  std::vector<char*> argv = to_argv(plan.mutable_argv());
  std::vector<char*> envp = to_argv(plan.mutable_env());
  execve(argv[0], argv.data(), envp.data());
  fail_role(error_fd, std::to_string(v1::ERROR_LAUNCH_FAILED) + " cannot execute " + plan.argv(0) +
                          ": " + std::strerror(errno));
}

bool has_effective_capability(cap_value_t capability) {
  cap_t caps = cap_get_proc();
  if (caps == nullptr) pando::throw_errno("cap_get_proc");
  cap_flag_value_t value = CAP_CLEAR;
  const int result = cap_get_flag(caps, capability, CAP_EFFECTIVE, &value);
  cap_free(caps);
  if (result != 0) pando::throw_errno("cap_get_flag");
  return value == CAP_SET;
}

// Work done ahead of a request must not take CPU from requests being served:
// the template and the launchers it forks run at SCHED_IDLE (a launcher from
// birth, so the daemon's lift when it takes one always comes later), a
// launcher until its plan arrives, then at the normal policy, which the role
// inherits. While a client waits on the template, the daemon lifts it too.
void set_scheduling(int policy) {
  sched_param param{};
  if (sched_setscheduler(0, policy, &param) != 0) pando::throw_errno("sched_setscheduler");
}

struct RoleStart {
  SandboxPlan* plan;
  const sb::SeccompProgram* seccomp;
  const sb::SeccompProgram* group_write;  // null where group write reaches nobody else
  const int* error_pipe;
};

// Not instrumented by AddressSanitizer (sanitizer builds only): its runtime
// cannot follow the switch to a stack it did not allocate and would print a
// warning into the role's stderr before the call to become_role().
__attribute__((no_sanitize("address"))) int role_main(void* arg) noexcept {
  auto* start = static_cast<RoleStart*>(arg);
  close(start->error_pipe[0]);
  become_role(*start->plan, *start->seccomp, start->group_write, start->error_pipe[1]);
}

// Starts the role process the way posix_spawn does: it runs on its own stack
// in our memory (CLONE_VM) while we sleep until it has exec'd or exited
// (CLONE_VFORK), so no page table and no page is copied (1.7 ms less per
// launch than fork() here). What it changes before exec stays its own:
// credentials, securebits, no_new_privs, Landlock and seccomp are per task;
// its fd table, fs state (cwd, umask), signal handlers and rlimits are copies
// (no CLONE_FILES, CLONE_FS, CLONE_SIGHAND, CLONE_THREAD). The one shared
// per-memory setting, dumpable, is 0 for both. A failure leaves only the heap
// it allocated behind.
pid_t spawn_role(SandboxPlan& plan, const sb::SeccompProgram& seccomp,
                 const sb::SeccompProgram* group_write, const int (&error_pipe)[2]) {
  constexpr size_t kStackBytes = 256 * 1024;
  void* stack = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) pando::throw_errno("mmap role stack");
  RoleStart start{&plan, &seccomp, group_write, error_pipe};
  const pid_t pid = clone(role_main, static_cast<char*>(stack) + kStackBytes,
                          CLONE_VM | CLONE_VFORK | SIGCHLD, &start);
  const int clone_errno = errno;
  munmap(stack, kStackBytes);
  if (pid < 0) {
    errno = clone_errno;
    pando::throw_errno("clone role");
  }
  return pid;
}

// Reads what the role process wrote to its error pipe before exec; empty
// when exec succeeded.
void check_role_started(int error_read_fd) {
  char buffer[1024];
  ssize_t n;
  do {
    n = read(error_read_fd, buffer, sizeof(buffer) - 1);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return;
  buffer[n] = '\0';
  char* message = nullptr;
  const long code = std::strtol(buffer, &message, 10);
  if (message != nullptr && *message == ' ') ++message;
  throw pando::Error(static_cast<v1::ErrorCode>(code), message != nullptr ? message : "");
}

// What the template prepares once for every launcher it starts.
struct Prepared {
  // Without CAP_SYS_NICE (a unit that does not grant it) SCHED_IDLE could not
  // be left again, and the role must never inherit it: launchers then prepare
  // at the normal policy.
  bool idle_while_waiting = false;
  std::optional<sb::SeccompProgram> seccomp;
  std::optional<sb::SeccompProgram> group_write;  // with seccomp, or neither
  // Why there is no program: each launcher reports it as its setup failure.
  v1::ErrorCode seccomp_error_code = v1::ERROR_LAUNCH_FAILED;
  std::string seccomp_error;
};

Prepared prepare_for_launchers() {
  Prepared prepared;
  try {
    prepared.idle_while_waiting = has_effective_capability(CAP_SYS_NICE);
    if (prepared.idle_while_waiting) set_scheduling(SCHED_IDLE);
    prepared.seccomp.emplace(sb::read_seccomp_program(sb::kSeccompProgramFd));
    prepared.group_write.emplace(sb::read_seccomp_program(sb::kGroupWriteProgramFd));
  } catch (const pando::Error& e) {
    prepared.seccomp_error_code = e.code();
    prepared.seccomp_error = e.what();
  }
  close(sb::kSeccompProgramFd);
  close(sb::kGroupWriteProgramFd);
  return prepared;
}

// One session's launcher, PID 1 of its namespaces with its control socket on
// fd 3 and /dev/null as fds 0-2. Everything up to receive_plan() depends on no
// request: it runs ahead of time and then waits for the plan.
[[noreturn]] void run_launcher(const Prepared& prepared) noexcept {
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  pid_t role_pid = -1;
  SandboxPlan plan;
  try {
    if (!prepared.seccomp || !prepared.group_write) {
      throw pando::Error(prepared.seccomp_error_code, prepared.seccomp_error);
    }
    sb::set_up_namespaces();
    sb::BaseView view = sb::build_base_view();
    ReceivedPlan received = receive_plan();
    // Nothing of the plan is acted on outside the session's cgroups: on v2
    // the daemon moved us before sending it, on v1 we move ourselves now.
    sb::join_session_cgroups(received.cgroup_tasks);
    if (prepared.idle_while_waiting) set_scheduling(SCHED_OTHER);
    plan = std::move(received.plan);
    sb::enter_cgroup_namespace();
    install_stdio(received.stdio);
    sb::complete_filesystem_view(view, plan, received.trees);
    received.trees = {};
    view = {};

    int error_pipe[2];
    if (pipe2(error_pipe, O_CLOEXEC) != 0) pando::throw_errno("pipe2");
    sb::block_init_signals();
    role_pid =
        spawn_role(plan, *prepared.seccomp,
                   plan.caller_group_private() ? nullptr : &*prepared.group_write, error_pipe);
    close(error_pipe[1]);
    check_role_started(error_pipe[0]);
    close(error_pipe[0]);

    // Init keeps nothing of the session's stdio (so EOF follows the role's
    // tree alone) and no privilege it does not need.
    const int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0) pando::throw_errno("open /dev/null");
    for (int fd = 0; fd <= 2; ++fd) {
      if (dup2(devnull, fd) < 0) pando::throw_errno("dup2 /dev/null");
    }
    close(devnull);
    sb::drop_to_role_user(plan.ids());
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  } catch (const pando::Error& e) {
    report_setup_failure(e.code(), e.what());
    _exit(1);
  } catch (const std::exception& e) {
    report_setup_failure(v1::ERROR_LAUNCH_FAILED, e.what());
    _exit(1);
  }
  SandboxEvent started;
  started.mutable_started()->set_role_pid(role_pid);
  send_event(started);
  sb::run_init(role_pid, sb::kControlFd);
}

// In the copy fork_into_new_namespaces() made: `control` becomes fd 3, in
// place of the template's own control socket, and no other fd of the
// template survives. `argv1` is the copy's argv[1], the template's
// kTemplateArgument, overwritten so that ps shows launchers as launchers.
[[noreturn]] void become_launcher(UniqueFd control, const Prepared& prepared,
                                  char* argv1) noexcept {
  if (getpid() != 1 || dup2(control.get(), sb::kControlFd) < 0 ||
      syscall(SYS_close_range, sb::kControlFd + 1, ~0U, 0) != 0) {
    _exit(127);
  }
  control.release();  // closed by close_range
  static_assert(sizeof(kLauncherArgument) == sizeof(sb::kTemplateArgument));
  std::memcpy(argv1, kLauncherArgument, sizeof(kLauncherArgument));
  run_launcher(prepared);
}

// The daemon asks for each launcher with a one-byte datagram carrying the new
// launcher's control socket (SCM_RIGHTS) and gets back the launcher's pid, or
// -errno, as an int32 with the launcher's pidfd attached. Returns when the
// daemon is gone. `argv1`: see become_launcher().
int serve_as_template(char* argv1) {
  const Prepared prepared = prepare_for_launchers();
  for (;;) {
    char request = 0;
    std::vector<UniqueFd> fds;
    bool truncated = false;
    const ssize_t n =
        pando::receive_with_fds(sb::kControlFd, &request, sizeof(request), 1, 0, fds, truncated);
    if (n == 0) return 0;
    if (n < 0) return 1;
    std::int32_t answer = -EINVAL;
    UniqueFd pidfd;
    if (fds.size() == 1 && !truncated) {
      int raw_pidfd = -1;
      const pid_t pid = sb::fork_into_new_namespaces(&raw_pidfd);
      if (pid == 0) become_launcher(std::move(fds[0]), prepared, argv1);
      answer = pid > 0 ? pid : -errno;
      if (pid > 0) pidfd.reset(raw_pidfd);
    }
    std::vector<int> attached;
    if (pidfd.valid()) attached.push_back(pidfd.get());
    if (pando::send_with_fds(sb::kControlFd, &answer, sizeof(answer), attached) !=
        static_cast<ssize_t>(sizeof(answer))) {
      return 1;
    }
  }
}

}  // namespace

// The daemon starts this binary once, as the launcher template: argv[1] is
// kTemplateArgument, fds 0-2 are /dev/null, fd 3 is its control socket and fd
// 4 the seccomp program.
// Run any other way, refuse. The template itself never mounts anything: only
// its copies do, each in the new namespaces it was forked into.
bool started_by_the_daemon(int argc, char** argv) {
  if (argc != 2 || std::strcmp(argv[1], sb::kTemplateArgument) != 0) return false;
  int type = 0;
  socklen_t length = sizeof(type);
  return getsockopt(sb::kControlFd, SOL_SOCKET, SO_TYPE, &type, &length) == 0 &&
         type == SOCK_SEQPACKET;
}

int main(int argc, char** argv) {
  if (!started_by_the_daemon(argc, argv)) {
    static constexpr char kMessage[] =
        "pando-helper-sandbox: started by pando-helperd only (as its launcher template)\n";
    (void)!write(2, kMessage, sizeof(kMessage) - 1);
    return 64;
  }
  // Not dumpable while root state and host fds are around; copies inherit it.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  return serve_as_template(argv[1]);
}
