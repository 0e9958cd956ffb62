#pragma once

#include <string>

#include "daemon/config.h"
#include "daemon/peer_identity.h"
#include "daemon/project_root.h"
#include "proto/helper.pb.h"
#include "proto/request_validation.h"
#include "proto/sandbox.pb.h"

namespace pando::daemon {

// Where the caller's ~/.pando-ai appears inside the sandbox.
inline constexpr const char* kAuthHomeTarget = "/pando-auth";
// The only PATH a role ever gets.
inline constexpr const char* kSandboxPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Everything the launcher needs, from root-owned config and kernel-given
// identity only: the request contributes the role and the project path.
// Throws pando::Error (ERROR_ROLE_NOT_CONFIGURED) when the role user is unusable.
pando::helper::sandbox::v1::SandboxPlan build_plan(pando::helper::v1::Role role,
                                                   const RoleConfig& role_config,
                                                   const PeerIdentity& peer,
                                                   const ResolvedProject& project,
                                                   const DaemonConfig& config);

// argv with every "{project_root}" replaced.
std::vector<std::string> substitute_argv(const RoleConfig& role_config,
                                         const std::string& project_root);

}  // namespace pando::daemon
