#pragma once

#include <sys/types.h>

#include <string>

#include "common/unique_fd.h"
#include "proto/sandbox.pb.h"

namespace pando::sandbox {

// Well-known fds of pando-helper-sandbox (see proto/sandbox.proto).
inline constexpr int kControlFd = 3;
inline constexpr int kProjectFd = 4;
inline constexpr int kSandboxDirFd = 5;
inline constexpr int kAuthHomeFd = 6;

// What the daemon passes as fds 4, 5 and 6: a detached copy of the mount of
// `dir_fd` (open_tree(OPEN_TREE_CLONE) without AT_RECURSIVE, so mounts the
// caller stacked inside the project are not carried into the sandbox). It must
// be made in the daemon's mount namespace, before clone3(CLONE_NEWNS): the
// kernel refuses to clone a mount of another namespace, so the launcher cannot
// do it from a plain O_PATH fd. Throws SetupError.
UniqueFd clone_detached_tree(int dir_fd);

// Builds the session's filesystem view and pivot_roots into it: a tmpfs root,
// read-only system binds, a minimal /etc, the project (idmapped caller->role)
// at its host path, the role's sandbox dir, the auth home, hidden secret
// files, fresh /proc, minimal /dev, private /tmp. Must run as root in the new
// mount and pid namespaces (as PID 1 of the latter). fds 4, 5 and 6 must be
// detached trees from clone_detached_tree(); once this returns they refer to
// mounts inside the new view. Throws SetupError (ERROR_IDMAP_UNSUPPORTED naming
// the filesystem when the project cannot be idmapped).
void build_filesystem_view(const pando::helper::sandbox::v1::SandboxPlan& plan);

struct IdmapCheck {
  bool supported;
  std::string detail;  // the filesystem's name; the reason when unsupported
};

// Whether the directory `dir_fd` (an O_PATH fd of the caller's mount
// namespace) can be idmapped caller->role: makes a detached copy, idmaps it and
// drops it, attaching nothing. Call it single-threaded or from one thread: the
// short-lived user-namespace child it clones only blocks in read() and exits.
// Its exit signal is 0, so a SIGCHLD handler neither fires nor reaps it
// (waitpid without __WALL ignores it). Throws SetupError on other failures.
IdmapCheck check_idmap_support(int dir_fd, uid_t caller_uid, gid_t caller_gid, uid_t role_uid,
                               gid_t role_gid);

}  // namespace pando::sandbox
