#pragma once

#include <sys/types.h>

namespace pando::sandbox {

// PID 1 of the session's pid namespace. Forwards SIGINT, SIGTERM, SIGHUP,
// SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH to the role process, reaps every
// orphan, and when the role process exits reports its status on
// `control_fd` and returns; the kernel then kills whatever is left in the
// namespace. Expects those signals and SIGCHLD to be blocked already (they
// are, from before the role was forked, so none is lost).
[[noreturn]] void run_init(pid_t role_pid, int control_fd) noexcept;

// The signals run_init() needs blocked before the role is forked.
void block_init_signals() noexcept;

}  // namespace pando::sandbox
