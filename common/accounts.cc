#include "common/accounts.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <limits>
#include <utility>

#include "common/child_output.h"
#include "common/json_log.h"
#include "common/unique_fd.h"
#include "proto/error.h"

namespace pando::accounts {

namespace {

using pando::helper::v1::ERROR_INTERNAL;

// More than any real entry (a group with thousands of members is far less);
// an answer beyond it is not read to its end.
constexpr size_t kMaxGetentOutput = 1 << 20;

using Fields = std::vector<std::string_view>;

Fields split(std::string_view line, char separator) {
  Fields fields;
  for (;;) {
    const size_t at = line.find(separator);
    fields.push_back(line.substr(0, at));
    if (at == std::string_view::npos) return fields;
    line.remove_prefix(at + 1);
  }
}

// A decimal uid/gid as the account tools write it: no sign, no blanks, and
// not (uid_t)-1, which means "no id" to the kernel.
std::optional<uid_t> parse_id(std::string_view text) {
  unsigned long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() ||
      value >= std::numeric_limits<uid_t>::max()) {
    return std::nullopt;
  }
  return static_cast<uid_t>(value);
}

// The fields of the first line with `min_fields` to `max_fields` fields that
// `matches` accepts.
template <typename Matches>
std::optional<Fields> find_entry(std::string_view contents, size_t min_fields, size_t max_fields,
                                 const Matches& matches) {
  for (std::string_view line : split(contents, '\n')) {
    if (line.empty() || line[0] == '#' || line[0] == '+' || line[0] == '-') continue;
    Fields fields = split(line, ':');
    if (fields.size() < min_fields || fields.size() > max_fields) continue;
    if (matches(fields)) return fields;
  }
  return std::nullopt;
}

// name:password:uid:gid:gecos:home:shell
constexpr size_t kUserFields = 7;
// name:password:gid:members
constexpr size_t kGroupFields = 4;

bool valid_user(const Fields& fields) { return parse_id(fields[2]) && parse_id(fields[3]); }
bool valid_group(const Fields& fields) { return parse_id(fields[2]).has_value(); }

std::optional<User> to_user(const std::optional<Fields>& fields) {
  if (!fields) return std::nullopt;
  const Fields& f = *fields;
  return User{std::string(f[0]), std::string(f[1]), *parse_id(f[2]),
              *parse_id(f[3]),   std::string(f[5]), std::string(f[6])};
}

std::optional<Group> to_group(const std::optional<Fields>& fields) {
  if (!fields) return std::nullopt;
  Group group{std::string((*fields)[0]), *parse_id((*fields)[2]), {}};
  for (std::string_view member : split((*fields)[3], ',')) {
    if (!member.empty()) group.members.emplace_back(member);
  }
  return group;
}

// The local file, or nothing when it cannot be read: nss_files, too, only
// makes the lookup go on to the next source then.
std::string read_or_empty(const std::string& path) {
  try {
    return read_account_file(path).value_or("");
  } catch (const Error&) {
    return "";
  }
}

// No passwd or group line can hold such a name, so getent is not asked.
bool lookup_key(std::string_view name) {
  return !name.empty() && name.find_first_of(std::string_view(":\n\0", 3)) == name.npos;
}

void warn_failed(std::string_view database, std::string_view key, std::string_view reason) {
  log::warn("account_lookup_failed", {{"database", database}, {"key", key}, {"reason", reason}});
}

// The first getent(1) of `sources` that exists.
const std::string* find_getent(const Sources& sources) {
  for (const std::string& path : sources.getent) {
    if (access(path.c_str(), X_OK) == 0) return &path;
  }
  return nullptr;
}

// `getent DATABASE -- KEY` with an empty environment: its output when it
// exits 0 within the timeout, nullopt otherwise (2 is "not found").
std::optional<std::string> run_getent(const Sources& sources, const char* database,
                                      const std::string& key) {
  const std::string* getent = find_getent(sources);
  if (getent == nullptr) return std::nullopt;
  ChildCommand command;
  command.argv = {*getent, database, "--", key};
  command.timeout = sources.getent_timeout;
  command.max_output = kMaxGetentOutput;
  const std::optional<ChildOutput> ran = run_for_output(command);
  if (!ran) return std::nullopt;
  if (!ran->complete) {
    warn_failed(database, key, "getent timed out or said too much");
    return std::nullopt;
  }
  if (!WIFEXITED(ran->wait_status) || WEXITSTATUS(ran->wait_status) != 0) return std::nullopt;
  return ran->output;
}

// Asks getent only when the local file has no answer; a failure to run it
// counts as "no such account" (logged), as an NSS error did for getpwnam().
// The same parser reads both, and checks that getent answered for `key`.
template <typename Find>
auto local_then_getent(const std::string& file, const char* database, const std::string& key,
                       bool ask_getent, const Sources& sources, const Find& find)
    -> decltype(find(std::string_view())) {
  if (auto found = find(read_or_empty(file))) return found;
  if (!ask_getent) return std::nullopt;
  try {
    if (const std::optional<std::string> answer = run_getent(sources, database, key)) {
      return find(*answer);
    }
  } catch (const Error& e) {
    warn_failed(database, key, e.what());
  }
  return std::nullopt;
}

}  // namespace

std::optional<User> find_user_by_name(std::string_view passwd, std::string_view name) {
  return to_user(find_entry(passwd, kUserFields, kUserFields, [name](const Fields& fields) {
    return fields[0] == name && valid_user(fields);
  }));
}

std::optional<User> find_user_by_id(std::string_view passwd, uid_t uid) {
  return to_user(find_entry(passwd, kUserFields, kUserFields, [uid](const Fields& fields) {
    return valid_user(fields) && *parse_id(fields[2]) == uid;
  }));
}

std::optional<Group> find_group_by_name(std::string_view group, std::string_view name) {
  return to_group(find_entry(group, kGroupFields, kGroupFields, [name](const Fields& fields) {
    return fields[0] == name && valid_group(fields);
  }));
}

std::optional<Group> find_group_by_id(std::string_view group, gid_t gid) {
  return to_group(find_entry(group, kGroupFields, kGroupFields, [gid](const Fields& fields) {
    return valid_group(fields) && *parse_id(fields[2]) == gid;
  }));
}

bool is_private_group_of(const Group& group, std::string_view user_name) {
  if (group.name != user_name) return false;
  for (const std::string& member : group.members) {
    if (member != user_name) return false;
  }
  return true;
}

std::optional<std::string> find_shadow_password(std::string_view shadow, std::string_view name) {
  // name:password:lastchange:min:max:warn:inactive:expire:reserved
  const std::optional<Fields> entry =
      find_entry(shadow, 2, 9, [name](const Fields& fields) { return fields[0] == name; });
  if (!entry) return std::nullopt;
  return std::string((*entry)[1]);
}

std::optional<std::string> read_account_file(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return std::nullopt;
    throw_errno(path, ERROR_INTERNAL);
  }
  std::string contents;
  char chunk[16384];
  for (;;) {
    const ssize_t got = read(fd.get(), chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw_errno(path, ERROR_INTERNAL);
    if (got == 0) return contents;
    contents.append(chunk, static_cast<size_t>(got));
  }
}

std::optional<User> user_by_name(std::string_view name, const Sources& sources) {
  const auto find = [name](std::string_view text) { return find_user_by_name(text, name); };
  return local_then_getent(sources.passwd, "passwd", std::string(name), lookup_key(name), sources,
                           find);
}

std::optional<User> user_by_id(uid_t uid, const Sources& sources) {
  const auto find = [uid](std::string_view text) { return find_user_by_id(text, uid); };
  return local_then_getent(sources.passwd, "passwd", std::to_string(uid), true, sources, find);
}

std::optional<Group> group_by_name(std::string_view name, const Sources& sources) {
  const auto find = [name](std::string_view text) { return find_group_by_name(text, name); };
  return local_then_getent(sources.group, "group", std::string(name), lookup_key(name), sources,
                           find);
}

std::optional<Group> group_by_id(gid_t gid, const Sources& sources) {
  const auto find = [gid](std::string_view text) { return find_group_by_id(text, gid); };
  return local_then_getent(sources.group, "group", std::to_string(gid), true, sources, find);
}

}  // namespace pando::accounts
