#pragma once

#include <sys/types.h>

#include "common/unique_fd.h"
#include "daemon/project_root.h"

namespace pando::daemon {

// The caller's own stdin/stdout pipes, when it handed them over (direct stdio).
struct DirectStdio {
  UniqueFd stdin_read;
  UniqueFd stdout_write;
};

// The parent-side ends of a freshly started pando-helper-sandbox. With direct
// stdio, stdin_write and stdout_read stay invalid.
struct StartedSandbox {
  pid_t pid = -1;
  UniqueFd pidfd;    // CLONE_PIDFD: signals and exit without pid reuse races
  UniqueFd control;  // SOCK_SEQPACKET: plan out, SandboxEvents in
  UniqueFd stdin_write;
  UniqueFd stdout_read;
  UniqueFd stderr_read;
};

// Starts the launcher binary (an O_PATH fd opened at daemon start) with
// clone3() in new mount, pid, network, IPC and UTS namespaces, its stdio on
// fresh pipes and the project fds at the numbers proto/sandbox.proto names.
// Between clone3 and execveat the child only calls async-signal-safe
// syscalls. Throws std::system_error, or sandbox::SetupError when a
// directory cannot be cloned for mounting.
StartedSandbox start_sandbox(int launcher_fd, const ResolvedProject& project,
                             const DirectStdio* direct);

}  // namespace pando::daemon
