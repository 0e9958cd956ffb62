#pragma once

// The daemon's part of a launch, in the order of SECURITY.md's "In the daemon"
// steps (the socket, the handshake and request validation, steps 1-3, are the
// Session's and the protocol core's). Every function throws pando::Error with
// the code the client is shown; the Session catches it once and rejects.
// Three pieces because a launch crosses threads: the caller checks run on the
// event loop, everything that touches the caller's files on a thread of its
// own, and the launcher is started and given its plan on the event loop again.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/cgroups.h"
#include "daemon/launch.h"
#include "daemon/peer_identity.h"
#include "daemon/project_watch.h"
#include "daemon/sandbox/mounts.h"
#include "proto/request_validation.h"
#include "proto/sandbox.pb.h"

namespace pando::daemon {

class Daemon;

// The fds that came with the request (direct stdio): exactly two, each an
// anonymous pipe, a terminal that is not a pseudo-terminal master, or
// /dev/null, stdin readable and stdout writable, else ERROR_BAD_STDIO_FDS.
// Empty `fds`: nullopt (the relay carries stdio).
std::optional<DirectStdio> take_direct_stdio(std::vector<UniqueFd>& fds);

// Step 4, on the event loop: the daemon is not stopping, the caller is not
// root, the session limits leave room. Reserves the session (the caller
// releases it with Daemon::release_session).
void admit_caller(Daemon& daemon, const PeerIdentity& peer);

// Steps 5-7, on a thread of its own (Daemon::run_off_loop): everything of a
// launch that touches a filesystem, which a hung one can block in the kernel.
struct PreparedLaunch {
  pando::helper::sandbox::v1::SandboxPlan plan;
  sandbox::PlanTrees trees;    // idmapped clones of the caller's directories, runtime paths
  std::string auth_home_note;  // why an existing auth home was not used, for the log
  UniqueFd host_root;          // the project as resolved, on its host mount (O_PATH)
  UniqueFd scan_root;          // a clone of it without submounts: what the session sees
  std::string caller_home;
  ProjectScan scan;  // what step 10's reading of the project found and cost
};
PreparedLaunch prepare_launch(Daemon& daemon, const PeerIdentity& peer,
                              const wire::ValidRequest& request, bool selftest);

// Before step 10, on a thread of its own, where the daemon keeps an index of the project
// (ProjectWatch::keeps_index): brings it up to date, so that the walk window lasts only as long
// as reading what changed since (the first launch of a project reads it whole here).
void index_project(Daemon& daemon, const PeerIdentity& peer, PreparedLaunch& prepared);

// Step 10's reading of the project, inside the walk window, on a thread of its own: what the
// role may not read or change (SECURITY.md, step 12) goes into the plan. The writable role's
// repositories are asked of the caller's own git. Throws pando::Error.
void find_project_exits(Daemon& daemon, const PeerIdentity& peer, PreparedLaunch& prepared);

// What steps 8-10 hand to the session, filled in as they go: whatever a
// failed step leaves here (a cgroup, a launcher) is the session's to undo.
struct LaunchedSandbox {
  std::unique_ptr<SessionCgroup> cgroup;
  StartedSandbox sandbox;
  SessionStdio stdio;  // once the plan is sent, only the daemon's ends
};

// Steps 8-10, on the event loop: the session's cgroup, a launcher, the
// launcher placed in the cgroup, then the plan and its fds sent to it.
void start_launch(Daemon& daemon, const std::string& session_id, const PeerIdentity& peer,
                  const std::string& role, PreparedLaunch& prepared, DirectStdio* direct,
                  LaunchedSandbox& out);

}  // namespace pando::daemon
