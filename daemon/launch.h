#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace pando::daemon {

// The caller's own stdin/stdout pipes, when it handed them over (direct stdio).
struct DirectStdio {
  UniqueFd stdin_read;
  UniqueFd stdout_write;
};

// A pando-helper-sandbox process started with clone() in new mount, pid,
// network, IPC and UTS namespaces, with /dev/null as fds 0-2 and its control
// socket as fd 3. Until it gets a plan it only prepares what depends on no
// request, then waits.
struct StartedSandbox {
  pid_t pid = -1;
  UniqueFd pidfd;    // CLONE_PIDFD: signals and exit without pid reuse races
  UniqueFd control;  // SOCK_SEQPACKET: plan out, SandboxEvents in
  std::chrono::steady_clock::time_point started_at;
};

// Starts the launcher binary (an O_PATH fd opened at daemon start). Between
// clone and execveat the child only calls async-signal-safe syscalls. Not
// thread-safe (one stack serves every child).
// Throws std::system_error.
StartedSandbox start_sandbox(int launcher_fd, int devnull_fd);

// The role's stdio: `child` become its fds 0-2; the daemon keeps the other
// ends (with direct stdio, stdin_write and stdout_read stay invalid: the role
// holds the caller's own pipes).
struct SessionStdio {
  UniqueFd child[3];
  UniqueFd stdin_write;
  UniqueFd stdout_read;
  UniqueFd stderr_read;
};
// Takes the caller's pipes out of `direct` when given. Throws std::system_error.
SessionStdio make_session_stdio(DirectStdio* direct);

// Sends the serialized plan with `fds` attached (SCM_RIGHTS), in the order
// daemon/sandbox/main.cc expects. Throws std::system_error.
void send_plan(int control_fd, const std::string& plan, const std::vector<int>& fds);

}  // namespace pando::daemon
