#pragma once

// Account lookups without glibc's NSS: the daemon and the client are static
// executables, and a static glibc can only reach NSS by dlopen()ing the
// libnss_* modules of its own version, which the host need not have.
//
// One parser for passwd(5), group(5) and shadow(5) text, used for the local
// files and for getent(1) output alike.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pando::accounts {

struct User {
  std::string name;
  std::string password;  // the passwd field, "x" when shadowed
  uid_t uid;
  gid_t gid;
  std::string home;
  std::string shell;
};

struct Group {
  std::string name;
  gid_t gid;
  std::vector<std::string> members;  // the fourth field, by name
};

// The first well-formed line of `text` for that name or id. Comments, blank
// lines, NIS compat lines ('+'/'-', only meaningful to nss_compat, never
// written by useradd) and lines that do not parse are skipped.
std::optional<User> find_user_by_name(std::string_view passwd, std::string_view name);
std::optional<User> find_user_by_id(std::string_view passwd, uid_t uid);
std::optional<Group> find_group_by_name(std::string_view group, std::string_view name);
std::optional<Group> find_group_by_id(std::string_view group, gid_t gid);
// The password field of the first shadow(5) line for `name` that has one.
// Only the password matters, so a line glibc would reject still counts: it
// must not hide a usable password.
std::optional<std::string> find_shadow_password(std::string_view shadow, std::string_view name);

// useradd's user-private-group convention (USERGROUPS_ENAB): the group has the
// user's name and lists nobody else as a member, so group write on a file of
// that group is the user's alone. Account tools never give another account
// such a group as its primary group; a host that does is not covered.
bool is_private_group_of(const Group& group, std::string_view user_name);

// The whole file, or nullopt when it does not exist. Throws pando::Error
// (ERROR_INTERNAL) when it exists but cannot be read.
std::optional<std::string> read_account_file(const std::string& path);

struct Sources {
  std::string passwd = "/etc/passwd";
  std::string group = "/etc/group";
  // getent(1) for accounts only other NSS sources know (LDAP, sssd,
  // systemd's nss module): the first of these that exists.
  std::vector<std::string> getent = {"/usr/bin/getent", "/bin/getent"};
  // getent is killed after this long (an unreachable directory server).
  std::chrono::milliseconds getent_timeout{5000};
};

// The account from the local file first; when it is not there (or the file
// cannot be read), from `getent passwd|group KEY`, run by absolute path with
// an empty environment, whose answer must be for the key asked. nullopt when
// neither has it, or getent failed or ran out of time. Never throws for a
// missing account; a name getent could mistake for an option or an id is
// only looked up locally.
std::optional<User> user_by_name(std::string_view name, const Sources& sources = {});
std::optional<User> user_by_id(uid_t uid, const Sources& sources = {});
std::optional<Group> group_by_name(std::string_view name, const Sources& sources = {});
std::optional<Group> group_by_id(gid_t gid, const Sources& sources = {});

}  // namespace pando::accounts
