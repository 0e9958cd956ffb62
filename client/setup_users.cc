#include "client/setup_users.h"

#ifdef __linux__
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "common/accounts.h"
#include "proto/error.h"
#endif

namespace pando::client {

#ifdef __linux__
namespace {

using pando::helper::v1::ERROR_INTERNAL;

constexpr const char* kUseradd = "/usr/sbin/useradd";
constexpr const char* kUsermod = "/usr/sbin/usermod";
constexpr const char* kGroupadd = "/usr/sbin/groupadd";
constexpr const char* kLoginDefs = "/etc/login.defs";
constexpr const char* kNoLoginShell = "/usr/sbin/nologin";
constexpr const char* kNoHome = "/nonexistent";
constexpr std::array<const char*, 4> kNoLoginShells = {"/usr/sbin/nologin", "/sbin/nologin",
                                                       "/bin/false", "/usr/bin/false"};

struct IdRange {
  unsigned long min;
  unsigned long max;
};

using detail::AccountFiles;
using Account = detail::LocalAccount;

// useradd and groupadd exit with this when the name is taken (E_NAME_IN_USE).
constexpr int kNameInUse = 9;

// The system ranges useradd/groupadd --system allocate from, so that the
// check agrees with what they create.
IdRange read_system_range(const char* min_key, const char* max_key) {
  IdRange range{100, 999};
  std::ifstream defs(kLoginDefs);
  std::string line;
  while (std::getline(defs, line)) {
    std::istringstream words(line.substr(0, line.find('#')));
    std::string key, value;
    if (!(words >> key >> value)) continue;
    if (key != min_key && key != max_key) continue;
    char* end = nullptr;
    errno = 0;
    const unsigned long number = std::strtoul(value.c_str(), &end, 10);
    if (errno != 0 || end == value.c_str() || *end != '\0') continue;
    (key == min_key ? range.min : range.max) = number;
  }
  return range;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 32) return false;
  if (!(name[0] == '_' || (name[0] >= 'a' && name[0] <= 'z'))) return false;
  for (const char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

bool locked(const std::string& password) {
  return !password.empty() && (password[0] == '!' || password[0] == '*');
}

// Every property that would make the account usable for anything but the
// role, or empty when there is none.
std::vector<std::string> problems_of(const Account& account, const IdRange& range) {
  std::vector<std::string> problems;
  if (account.uid == 0 || account.uid < range.min || account.uid > range.max) {
    problems.push_back("uid " + std::to_string(account.uid) + " outside the system range " +
                       std::to_string(range.min) + ".." + std::to_string(range.max));
  }
  bool no_login = false;
  for (const char* shell : kNoLoginShells) no_login = no_login || account.shell == shell;
  if (!no_login) problems.push_back("login shell '" + account.shell + "'");
  const std::string& password = account.shadow ? *account.shadow : account.passwd;
  if (!locked(password)) problems.push_back("a usable password (not locked with '!' or '*')");
  struct stat st {};
  if (!account.home.empty() && stat(account.home.c_str(), &st) == 0) {
    problems.push_back("an existing home directory " + account.home);
  }
  return problems;
}

std::string join(const std::vector<std::string>& parts) {
  std::string joined;
  for (const std::string& part : parts) joined += (joined.empty() ? "" : ", ") + part;
  return joined;
}

// Runs an absolute-path tool without a shell and with a fixed environment.
// Returns its exit status, or -1 when it could not run or was killed; every
// failure is also reported on `err`.
int run_tool(const char* path, const std::vector<std::string>& args, std::ostream& out,
             std::ostream& err) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path));
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  char path_env[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char locale_env[] = "LC_ALL=C";
  char* envp[] = {path_env, locale_env, nullptr};

  out.flush();
  err.flush();
  const pid_t pid = fork();
  if (pid < 0) {
    err << "fork: " << std::strerror(errno) << "\n";
    return -1;
  }
  if (pid == 0) {
    execve(path, argv.data(), envp);
    _exit(127);
  }
  int status = 0;
  pid_t waited;
  while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (waited < 0) {
    err << "waitpid: " << std::strerror(errno) << "\n";
    return -1;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  std::string command = path;
  for (const std::string& arg : args) command += " " + arg;
  if (WIFEXITED(status)) {
    err << command << ": exited with status " << WEXITSTATUS(status) << "\n";
    return WEXITSTATUS(status);
  }
  err << command << ": killed by signal " << WTERMSIG(status) << "\n";
  return -1;
}

// Called when useradd/groupadd report a name in use that the local files do
// not have: it comes from another NSS source (LDAP, NIS, sssd...), whose
// accounts this command neither creates nor vouches for.
void explain_name_in_use(const std::string& name, const std::string& file, std::ostream& err) {
  err << name << ": refused: the name is in use, but not in " << file
      << " (an account from another source such as LDAP?); choose another name\n";
}

struct Role {
  const std::string& user;
  const char* label;
};

// The command line's names: 0 when usable, else 2 with the reason on `err`.
int check_options(const SetupUsersOptions& options, const std::array<Role, 2>& roles,
                  std::ostream& err) {
  for (const Role& role : roles) {
    if (!valid_name(role.user)) {
      err << "invalid user name '" << role.user << "' (lowercase letters, digits, '_', '-')\n";
      return 2;
    }
  }
  if (options.core_user == options.workspace_user) {
    err << "the core and workspace roles need two different users\n";
    return 2;
  }
  if (options.create_group && !valid_name(options.group)) {
    err << "invalid group name '" << options.group << "'\n";
    return 2;
  }
  if (geteuid() != 0) {
    err << "security setup-users must run as root (it creates system users)\n";
    return 2;
  }
  return 0;
}

// Which role users are missing; nullopt when an existing account (or a lone
// group of a missing user's name) is refused, each reason on `err`.
std::optional<std::array<bool, 2>> find_missing(const std::array<Role, 2>& roles,
                                                const AccountFiles& files, const IdRange& uids,
                                                std::ostream& err) {
  std::array<bool, 2> missing{};
  bool refused = false;
  for (size_t i = 0; i < roles.size(); ++i) {
    const std::string& name = roles[i].user;
    const std::optional<Account> account = detail::find_local_user(files, name);
    if (!account) {
      missing[i] = true;
      if (detail::local_group_exists(files, name)) {
        err << name << ": refused: a group '" << name
            << "' exists without that user; remove the group or create the user yourself\n";
        refused = true;
      }
      continue;
    }
    const std::vector<std::string> problems = problems_of(*account, uids);
    if (!problems.empty()) {
      err << name << ": refused: the existing user has " << join(problems)
          << "; fix or remove it, then run again\n";
      refused = true;
    }
  }
  if (refused) return std::nullopt;
  return missing;
}

int create_group(const std::string& group, const AccountFiles& files, std::ostream& out,
                 std::ostream& err) {
  if (detail::local_group_exists(files, group)) {
    out << group << ": group already exists, unchanged\n";
    return 0;
  }
  const int status = run_tool(kGroupadd, {"--system", group}, out, err);
  if (status == kNameInUse) explain_name_in_use(group, files.group, err);
  if (status != 0) return 1;
  out << group << ": system group created\n";
  return 0;
}

// Creates the role's user, locks it, and checks the result as an existing one would be.
int create_user(const Role& role, const AccountFiles& files, const IdRange& uids, std::ostream& out,
                std::ostream& err) {
  const std::string& name = role.user;
  const std::string comment = std::string("Pando ") + role.label + " role";
  const int status = run_tool(kUseradd,
                              {"--system", "--user-group", "--no-create-home", "--home-dir",
                               kNoHome, "--shell", kNoLoginShell, "--comment", comment, name},
                              out, err);
  if (status == kNameInUse) explain_name_in_use(name, files.passwd + " or " + files.group, err);
  if (status != 0) return 1;
  std::optional<Account> account = detail::find_local_user(files, name);
  if (account && !locked(account->shadow ? *account->shadow : account->passwd)) {
    if (run_tool(kUsermod, {"--lock", name}, out, err) != 0) return 1;
    account = detail::find_local_user(files, name);
  }
  if (!account) {
    err << name << ": useradd succeeded but the user cannot be found\n";
    return 1;
  }
  const std::vector<std::string> problems = problems_of(*account, uids);
  if (!problems.empty()) {
    err << name << ": created, but it has " << join(problems) << "\n";
    return 1;
  }
  out << name << ": created system user (uid " << account->uid << ")\n";
  return 0;
}

int setup_users(const SetupUsersOptions& options, std::ostream& out, std::ostream& err) {
  const std::array<Role, 2> roles = {Role{options.core_user, "core"},
                                     Role{options.workspace_user, "workspace"}};
  if (const int status = check_options(options, roles, err); status != 0) return status;
  const AccountFiles files;
  const IdRange uids = read_system_range("SYS_UID_MIN", "SYS_UID_MAX");
  const std::optional<std::array<bool, 2>> missing = find_missing(roles, files, uids, err);
  if (!missing) return 1;
  if (options.create_group && create_group(options.group, files, out, err) != 0) return 1;
  for (size_t i = 0; i < roles.size(); ++i) {
    if (!(*missing)[i]) {
      out << roles[i].user << ": already set up, unchanged\n";
      continue;
    }
    if (create_user(roles[i], files, uids, out, err) != 0) return 1;
  }
  return 0;
}

}  // namespace

namespace detail {

// useradd, usermod and groupadd (shadow-utils) manage exactly these files, so
// they, not NSS, are the authority for the accounts this command creates and
// checks: an account from another NSS source (LDAP, NIS, sssd) with a role's
// name is not a local system user, and must not be taken for one.
std::optional<LocalAccount> find_local_user(const AccountFiles& files, const std::string& name) {
  const std::optional<std::string> passwd = accounts::read_account_file(files.passwd);
  if (!passwd) throw Error(ERROR_INTERNAL, files.passwd + ": " + std::strerror(ENOENT));
  const std::optional<accounts::User> user = accounts::find_user_by_name(*passwd, name);
  if (!user) return std::nullopt;
  LocalAccount account{user->uid, user->shell, user->home, user->password, std::nullopt};
  if (const std::optional<std::string> shadow = accounts::read_account_file(files.shadow)) {
    account.shadow = accounts::find_shadow_password(*shadow, name);
  }
  return account;
}

bool local_group_exists(const AccountFiles& files, const std::string& name) {
  const std::optional<std::string> group = accounts::read_account_file(files.group);
  if (!group) throw Error(ERROR_INTERNAL, files.group + ": " + std::strerror(ENOENT));
  return accounts::find_group_by_name(*group, name).has_value();
}

}  // namespace detail

int run_setup_users(const SetupUsersOptions& options, std::ostream& out, std::ostream& err) {
  try {
    return setup_users(options, out, err);
  } catch (const Error& e) {
    err << e.what() << "\n";
    return 1;
  }
}

#else

// macOS: create each missing user with dscl (UniqueID and PrimaryGroupID below 500, UserShell
// /usr/bin/false, NFSHomeDirectory /var/empty, Password "*", IsHidden 1), same checks as Linux.
int run_setup_users(const SetupUsersOptions&, std::ostream&, std::ostream& err) {
  err << "security setup-users is not implemented on this platform yet\n";
  return 2;
}

#endif

}  // namespace pando::client
