#pragma once

#include "proto/sandbox.pb.h"

namespace pando::sandbox {

// Resets what a process inherits: signal mask and dispositions, umask 022,
// rlimits from the plan (core and nofile), a new session (setsid) with no
// controlling terminal, not dumpable, and every fd above 2 closed. Throws
// Error. `keep_fd` (close-on-exec, -1 for none) survives the fd sweep:
// it reports a failed exec.
void reset_process_state(const pando::helper::sandbox::v1::SandboxPlan& plan, int keep_fd);

}  // namespace pando::sandbox
