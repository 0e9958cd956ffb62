#pragma once

#include <cstdint>

#include "proto/sandbox.pb.h"

namespace pando::sandbox {

// A role's rlimits where its config names none: the daemon's config fills them in
// (config.cc), and a plan that carries none gets them here.
inline constexpr std::uint64_t kDefaultRlimitNofile = 4096;
inline constexpr std::uint64_t kDefaultRlimitCore = 0;

// Resets what a process inherits: signal mask and dispositions, umask 022,
// rlimits from the plan (core and nofile), a new session (setsid) with no
// controlling terminal, not dumpable, and every fd above 2 closed. Throws
// Error. `keep_fd` (close-on-exec, -1 for none) survives the fd sweep:
// it reports a failed exec.
void reset_process_state(const pando::helper::sandbox::v1::SandboxPlan& plan, int keep_fd);

}  // namespace pando::sandbox
