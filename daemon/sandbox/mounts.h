#pragma once

#include "proto/sandbox.pb.h"

namespace pando::sandbox {

// Well-known fds of pando-helper-sandbox (see proto/sandbox.proto).
inline constexpr int kControlFd = 3;
inline constexpr int kProjectFd = 4;
inline constexpr int kSandboxDirFd = 5;
inline constexpr int kAuthHomeFd = 6;

// Builds the session's filesystem view and pivot_roots into it: a tmpfs root,
// read-only system binds, a minimal /etc, the project (idmapped caller->role)
// at its host path, the role's sandbox dir, the auth home, hidden secret
// files, fresh /proc, minimal /dev, private /tmp. Must run as root in the new
// mount and pid namespaces. Throws SetupError (ERROR_IDMAP_UNSUPPORTED naming
// the filesystem when the project cannot be idmapped).
void build_filesystem_view(const pando::helper::sandbox::v1::SandboxPlan& plan);

}  // namespace pando::sandbox
