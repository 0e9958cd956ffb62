#pragma once

#include <sys/types.h>

#include <optional>
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

// Exposed for tests: how setup-users reads the local account files.
namespace detail {

struct AccountFiles {
  std::string passwd = "/etc/passwd";
  std::string group = "/etc/group";
  std::string shadow = "/etc/shadow";
};

struct LocalAccount {
  uid_t uid;
  std::string shell;
  std::string home;
  std::string passwd;                 // the passwd field, "x" when shadowed
  std::optional<std::string> shadow;  // the shadow password field, if any
};

// The first well-formed entry for `name` in files.passwd, with its password
// field from files.shadow when that file has an entry for it (a missing shadow
// file counts as no entry). Lines that do not parse, and NIS '+'/'-' lines, are
// skipped. Throws pando::Error when a file is missing or cannot be read.
std::optional<LocalAccount> find_local_user(const AccountFiles& files, const std::string& name);

// Whether files.group has a well-formed entry named `name`. Throws like
// find_local_user.
bool local_group_exists(const AccountFiles& files, const std::string& name);

}  // namespace detail

}  // namespace pando::client
