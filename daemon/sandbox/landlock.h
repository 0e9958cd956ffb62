#pragma once

#include <string>

#include "proto/sandbox.pb.h"

namespace pando::sandbox {

// The best Landlock ABI this kernel offers (0: none).
int landlock_abi_version();

// One line for `security status`: "ABI 7: fs, net tcp, scope", or why Landlock
// is unavailable.
std::string landlock_status_detail();

// Restricts the calling thread (and its future children) with Landlock:
// read+execute on system paths, read-write (workspace) or read-only (core) on
// the project, read-write on the sandbox home and /tmp (FIFOs and sockets only
// in the private /tmp and /dev/shm); with ABI >= 4
// no TCP bind/connect; with ABI >= 6 abstract unix sockets and signals scoped.
// Paths are as seen after pivot_root. Returns the ABI used (0 when the kernel
// has none, which throws Error instead when plan.require_landlock()).
int apply_landlock(const pando::helper::sandbox::v1::SandboxPlan& plan);

// For pando-helper-git-query, which reads the caller's files as the caller: read and execute
// anywhere, write nowhere but /dev/null, no TCP, the same scopes. Best effort, like a session
// without require_landlock: returns 0 on a kernel without Landlock. Needs no_new_privs.
int apply_read_only_landlock();

}  // namespace pando::sandbox
