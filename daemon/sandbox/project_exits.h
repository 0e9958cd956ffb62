#pragma once

// What a session leaves in the project outlives it, and the caller's own tools
// read it later (SECURITY.md, "Persistence through the project"). Before the
// role exists, the launcher
//   1. walks the whole project as root, read-only, never following a symlink,
//      masking files that match the role's hidden_files patterns, and refuses
//      the launch when the walk cannot be complete (an unreadable directory,
//      more than project_scan_max_entries entries or deeper than
//      project_scan_max_depth): a role cannot steer the walk by hiding a
//      secret behind a mode or a budget;
//   2. for the writable role, pins what the caller's git obeys (config,
//      config.worktree, hooks/, info/, commondir of every git dir found, with
//      modules/*/ and worktrees/*/, following .git files into the project),
//      .pando-sandbox (the other role's directory) and the role's
//      read_only_paths: each is bound onto itself read-only, and it and every
//      directory above it in the project becomes a mount point, which cannot
//      be renamed, removed or replaced from inside.

#include "proto/sandbox.pb.h"

namespace pando::sandbox {

// `root_fd` is the new root (its mask file is used), `project_fd` the project
// mount attached in it, with the sandbox home already attached below it.
// Throws Error: ERROR_PROJECT_SCAN_INCOMPLETE, ERROR_PROTECTED_PATH_UNSUPPORTED.
void guard_project_exits(const pando::helper::sandbox::v1::SandboxPlan& plan, int root_fd,
                         int project_fd);

}  // namespace pando::sandbox
