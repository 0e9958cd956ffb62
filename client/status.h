#pragma once

#include <string>

namespace pando::client {

// `pando-helper security status`: whether the daemon answers, its version and
// which confinement layers this host supports (idmapped mounts for
// `project_root` when given). Returns 0, or kExitUnavailable/kExitProtocol.
int run_status(const std::string& socket, const std::string& project_root);

}  // namespace pando::client
