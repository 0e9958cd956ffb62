#include "common/accounts.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <limits>
#include <utility>

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

// A system call that failed around getent: the host's, not the caller's.
[[noreturn]] void fail(const char* what) { throw_errno(what, ERROR_INTERNAL); }

void check_spawn(int err, const char* what) {
  if (err != 0) {
    errno = err;
    fail(what);
  }
}

// A posix_spawn attributes object, destroyed with its scope.
template <typename T, int (*init)(T*), int (*destroy)(T*)>
class SpawnObject {
 public:
  explicit SpawnObject(const char* what) { check_spawn(init(&object_), what); }
  ~SpawnObject() { destroy(&object_); }
  SpawnObject(const SpawnObject&) = delete;
  SpawnObject& operator=(const SpawnObject&) = delete;
  T* get() { return &object_; }

 private:
  T object_;
};
using SpawnActions = SpawnObject<posix_spawn_file_actions_t, posix_spawn_file_actions_init,
                                 posix_spawn_file_actions_destroy>;
using SpawnAttributes =
    SpawnObject<posix_spawnattr_t, posix_spawnattr_init, posix_spawnattr_destroy>;

// Reads the child's stdout until EOF, the deadline or the size cap. True on
// EOF.
bool read_until_eof(int fd, std::chrono::steady_clock::time_point deadline, std::string& out) {
  char chunk[16384];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) fail("poll");
    if (ready == 0) return false;
    const ssize_t got = read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("read");
    if (got == 0) return true;
    if (out.size() + static_cast<size_t>(got) > kMaxGetentOutput) return false;
    out.append(chunk, static_cast<size_t>(got));
  }
}

// The first getent(1) of `sources` that exists.
const std::string* find_getent(const Sources& sources) {
  for (const std::string& path : sources.getent) {
    if (access(path.c_str(), X_OK) == 0) return &path;
  }
  return nullptr;
}

// Starts `getent DATABASE -- KEY` with `stdout_fd` as its stdout, /dev/null as
// its stdin and stderr, no other fd, default signals and an empty environment.
// posix_spawn's child runs no code of ours between fork and exec.
pid_t spawn_getent(const std::string& getent, const char* database, const std::string& key,
                   int stdout_fd) {
  SpawnActions actions("posix_spawn_file_actions_init");
  check_spawn(posix_spawn_file_actions_addopen(actions.get(), 0, "/dev/null", O_RDONLY, 0),
              "posix_spawn_file_actions_addopen");
  check_spawn(posix_spawn_file_actions_adddup2(actions.get(), stdout_fd, 1),
              "posix_spawn_file_actions_adddup2");
  check_spawn(posix_spawn_file_actions_addopen(actions.get(), 2, "/dev/null", O_WRONLY, 0),
              "posix_spawn_file_actions_addopen");
  // A socket-activation fd, for one, is not close-on-exec.
  check_spawn(posix_spawn_file_actions_addclosefrom_np(actions.get(), 3),
              "posix_spawn_file_actions_addclosefrom_np");
  SpawnAttributes attributes("posix_spawnattr_init");
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  check_spawn(posix_spawnattr_setsigmask(attributes.get(), &none), "posix_spawnattr_setsigmask");
  check_spawn(posix_spawnattr_setsigdefault(attributes.get(), &all),
              "posix_spawnattr_setsigdefault");
  check_spawn(
      posix_spawnattr_setflags(attributes.get(), POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF),
      "posix_spawnattr_setflags");

  std::string database_arg = database;
  std::string separator = "--";
  std::string key_arg = key;
  char* argv[] = {const_cast<char*>(getent.c_str()), database_arg.data(), separator.data(),
                  key_arg.data(), nullptr};
  char* envp[] = {nullptr};
  pid_t pid = -1;
  check_spawn(posix_spawn(&pid, getent.c_str(), actions.get(), attributes.get(), argv, envp),
              "posix_spawn getent");
  return pid;
}

// `getent DATABASE -- KEY`: its output when it exits 0 within the timeout,
// nullopt otherwise (2 is "not found").
std::optional<std::string> run_getent(const Sources& sources, const char* database,
                                      const std::string& key) {
  const std::string* getent = find_getent(sources);
  if (getent == nullptr) return std::nullopt;
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) fail("pipe2");
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);
  const pid_t pid = spawn_getent(*getent, database, key, write_end.get());
  write_end.reset();

  std::string output;
  const bool complete = read_until_eof(
      read_end.get(), std::chrono::steady_clock::now() + sources.getent_timeout, output);
  // Not reaped yet, so the pid cannot have been reused.
  if (!complete) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) fail("waitpid getent");
  }
  if (!complete) {
    warn_failed(database, key, "getent timed out or said too much");
    return std::nullopt;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return output;
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
