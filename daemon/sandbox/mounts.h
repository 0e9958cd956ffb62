#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "proto/sandbox.pb.h"

namespace pando::sandbox {

// The control socket (SOCK_SEQPACKET to the daemon) of the launcher template
// and of each launcher.
inline constexpr int kControlFd = 3;
// argv[1] with which the daemon starts pando-helper-sandbox as the template.
inline constexpr char kTemplateArgument[] = "--template";
// The template's fd holding the seccomp program the daemon compiled (a sealed
// memfd, see seccomp.h).
inline constexpr int kSeccompProgramFd = 4;

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

// Daemon side: a recursive detached copy of a root-owned host path (a
// configured runtime path). Throws Error when it does not exist.
UniqueFd clone_runtime_tree(const std::string& path);

// Launcher, phase 1, before any request exists (the launcher may be started
// ahead of time): the part of the view that depends on nothing the request or
// the role decides. A tmpfs root (attached on /tmp of this private mount
// namespace until pivot_root) with read-only system binds, /etc holding the
// host-derived files, fresh /proc with masks, minimal /dev and a private /tmp.
// Must run as root as PID 1 of new mount and pid namespaces. Throws Error.
struct BaseView {
  UniqueFd root;
  UniqueFd etc;  // still writable: passwd and group come with the plan
};
BaseView build_base_view();

// What arrives with the plan, beside the stdio pipes.
struct PlanTrees {
  CallerTrees caller;
  std::vector<UniqueFd> runtime;  // one clone_runtime_tree() per plan.runtime_paths()
};

// Launcher, phase 2: the role's runtime paths, /etc/passwd and /etc/group, the
// project at its host path, the sandbox home, the auth home, hidden secret
// files, then pivot_root into the view. The caller trees must be idmapped
// (their roots appear owned by the role). Throws Error.
void complete_filesystem_view(BaseView& base, const pando::helper::sandbox::v1::SandboxPlan& plan,
                              PlanTrees& trees);

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
