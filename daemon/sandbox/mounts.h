#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/sandbox/idmap.h"
#include "proto/sandbox.pb.h"

namespace pando::sandbox {

// The control socket (SOCK_SEQPACKET to the daemon) of the launcher template
// and of each launcher.
inline constexpr int kControlFd = 3;
// argv[1] with which the daemon starts pando-helper-sandbox as the template.
inline constexpr char kTemplateArgument[] = "--template";
// The template's fds holding the seccomp programs the daemon compiled (sealed
// memfds, see seccomp.h): the one every role gets, and the group-write filter.
inline constexpr int kSeccompProgramFd = 4;
inline constexpr int kGroupWriteProgramFd = 5;

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

}  // namespace pando::sandbox
