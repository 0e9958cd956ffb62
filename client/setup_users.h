#pragma once

#include <ostream>
#include <string>

namespace pando::client {

struct SetupUsersOptions {
  std::string core_user = "pando-core";
  std::string workspace_user = "pando-workspace";
  std::string group = "pando";
  bool create_group = false;
};

// `pando-helper security setup-users`: makes sure both role users exist as
// locked system users (system uid, own primary group of the same name, no
// login shell, no usable password, no home). Creates what is missing, leaves
// correct users untouched, and refuses users that exist with any other
// property rather than changing them. With create_group, also makes sure the
// system group `group` exists. Must run as root.
//
// Returns the process exit code: 0 done (also when nothing changed), 1 refused
// or a tool failed, 2 usage error or not root. Progress goes to `out`, the
// reason for a non-zero code to `err`, one line each.
int run_setup_users(const SetupUsersOptions& options, std::ostream& out, std::ostream& err);

}  // namespace pando::client
