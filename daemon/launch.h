#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace pando::daemon {

// The caller's own stdin/stdout pipes, when it handed them over (direct stdio).
struct DirectStdio {
  UniqueFd stdin_read;
  UniqueFd stdout_write;
};

// A session's launcher: a copy of the launcher template in new mount, pid,
// network, IPC and UTS namespaces, a child of the daemon, with /dev/null as
// fds 0-2 and its control socket as fd 3. Until it gets a plan it only
// prepares what depends on no request, then waits.
struct StartedSandbox {
  pid_t pid = -1;
  UniqueFd pidfd;    // signals and exit without pid reuse races
  UniqueFd control;  // SOCK_SEQPACKET: plan out, SandboxEvents in
  std::chrono::steady_clock::time_point started_at;
};

// pando-helper-sandbox started once from the launcher binary (an O_PATH fd
// opened at daemon start), which forks every session's launcher on request:
// a launcher costs a clone(), not an exec, and inherits the seccomp program
// compiled once (see daemon/sandbox/main.cc). One thread at a time.
class LauncherTemplate {
 public:
  // Compiles the seccomp program for all launchers and starts the template.
  // Throws pando::Error when either fails.
  explicit LauncherTemplate(int launcher_fd);
  // Kills and reaps the template (its launchers are the daemon's children).
  ~LauncherTemplate();
  LauncherTemplate(const LauncherTemplate&) = delete;
  LauncherTemplate& operator=(const LauncherTemplate&) = delete;

  // A new launcher. A template that died is restarted once. Throws
  // pando::Error (ERROR_LAUNCH_FAILED).
  StartedSandbox start_sandbox();

 private:
  void start();
  void stop() noexcept;
  // The launcher's pid and pidfd, or nullopt when the template is gone.
  std::optional<StartedSandbox> ask();

  int launcher_fd_;
  UniqueFd devnull_;          // the template's fds 0-2, and so every launcher's
  UniqueFd seccomp_program_;  // sealed memfd, the template's fd 4
  UniqueFd pidfd_;
  UniqueFd control_;
};

// SIGKILL through the pidfd, then reap (the process must be our child).
// Returns false, without waiting, when the signal could not be sent.
bool kill_and_reap(int pidfd) noexcept;

// The role's stdio: `child` become its fds 0-2; the daemon keeps the other
// ends (with direct stdio, stdin_write and stdout_read stay invalid: the role
// holds the caller's own pipes).
struct SessionStdio {
  UniqueFd child[3];
  UniqueFd stdin_write;
  UniqueFd stdout_read;
  UniqueFd stderr_read;
};
// Takes the caller's pipes out of `direct` when given. Throws pando::Error.
SessionStdio make_session_stdio(DirectStdio* direct);

// Sends the serialized plan with `fds` attached (SCM_RIGHTS), in the order
// daemon/sandbox/main.cc expects. Throws pando::Error (ERROR_LAUNCH_FAILED).
void send_plan(int control_fd, const std::string& plan, const std::vector<int>& fds);

}  // namespace pando::daemon
