#pragma once

// The daemon's side of the filesystem view: the caller's directories as
// detached, idmapped copies (caller -> role), made in the daemon's mount
// namespace and handed to the launcher, and whether a filesystem allows it.

#include <sys/types.h>

#include <string>

#include "common/unique_fd.h"

namespace pando::sandbox {

// Daemon side. The caller's directories as the launcher mounts them: detached
// copies of the mounts of the O_PATH fds (open_tree(OPEN_TREE_CLONE) without
// AT_RECURSIVE, so mounts the caller stacked inside are not carried in),
// idmapped caller->role through `userns_fd`, nosuid, nodev, and read-only
// unless writable (the sandbox dir always is; the auth home never). Only the
// daemon's mount namespace can clone them: the kernel refuses to clone a
// mount of another namespace. Throws Error (ERROR_IDMAP_UNSUPPORTED
// naming the filesystem when it cannot be idmapped; never a plain bind).
struct CallerTrees {
  UniqueFd project;
  UniqueFd sandbox_dir;  // <project>/.pando-sandbox/<role>
  UniqueFd auth_home;    // the caller's ~/.pando-ai; invalid when there is none
};
// `project_root` names the project in errors.
CallerTrees clone_caller_trees(const std::string& project_root, int project_fd, int sandbox_dir_fd,
                               int auth_home_fd, int userns_fd, bool project_writable);

// Daemon side: a user namespace whose only mapping is caller -> role (uid and
// gid), for MOUNT_ATTR_IDMAP. No process stays in it. Refuses id 0. Throws
// Error.
UniqueFd make_idmap_userns(uid_t caller_uid, gid_t caller_gid, uid_t role_uid, gid_t role_gid);

struct IdmapCheck {
  bool supported;
  std::string detail;  // the filesystem's name; the reason when unsupported
};

// Whether the directory `dir_fd` (an O_PATH fd of the caller's mount
// namespace) can be idmapped caller->role: makes a detached copy, idmaps it and
// drops it, attaching nothing. Call it single-threaded or from one thread: the
// short-lived user-namespace child it clones only blocks in read() and exits.
// Its exit signal is 0, so a SIGCHLD handler neither fires nor reaps it
// (waitpid without __WALL ignores it). Throws Error on other failures.
IdmapCheck check_idmap_support(int dir_fd, uid_t caller_uid, gid_t caller_gid, uid_t role_uid,
                               gid_t role_gid);

}  // namespace pando::sandbox
