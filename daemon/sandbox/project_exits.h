#pragma once

// What a session leaves in the project outlives it, and the caller's own tools read it later
// (SECURITY.md, "Persistence through the project"). The daemon decides what the role may not
// read or change (daemon/project_exits.cc) and sends it with the plan; before the role exists,
// the launcher
//   1. makes, as the caller, what is missing of it (a mount cannot pin a name that does not
//      exist, and the role could make it first);
//   2. covers each file of plan.masks with an empty read-only file;
//   3. binds each path of plan.pins onto itself, read-only or not: a mount point cannot be
//      renamed, removed or replaced from inside.
// Every path is opened below the project without following a symbolic link.

#include "proto/sandbox.pb.h"

namespace pando::sandbox {

// `root_fd` is the new root (its mask file is used), `project_fd` the project mount attached
// in it, with the sandbox home already attached below it. Throws Error:
// ERROR_PROTECTED_PATH_UNSUPPORTED (naming what to change), ERROR_PROJECT_SCAN_INCOMPLETE
// (the project changed since the daemon read it).
void guard_project_exits(const pando::helper::sandbox::v1::SandboxPlan& plan, int root_fd,
                         int project_fd);

}  // namespace pando::sandbox
