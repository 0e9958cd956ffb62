#include "daemon/config.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/unique_fd.h"
#include "daemon/cgroups.h"
#include "daemon/sandbox/process_state.h"
#include "proto/error.h"
#include "proto/request_validation.h"

namespace pando::daemon {

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::TextFormat;
using pando::helper::v1::ERROR_CONFIG_INVALID;

constexpr int kMaxRuntimePaths = 32;
constexpr int kMaxReadOnlyPaths = 64;

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit CollectErrors(std::string origin) : origin_(std::move(origin)) {}
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty())
      first_ = fmt::format("{}:{}:{}: {}", origin_, line + 1, column + 1, message);
  }
  void AddWarning(int, int, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string origin_;
  std::string first_;
};

// Reports semantic errors at the line of the offending field.
class Checker {
 public:
  Checker(std::string origin, const TextFormat::ParseInfoTree& tree)
      : origin_(std::move(origin)), tree_(tree) {}

  [[noreturn]] void fail(const std::vector<std::string>& field_path, int index,
                         const std::string& message) const {
    const TextFormat::ParseInfoTree* tree = &tree_;
    int line = -1;
    const google::protobuf::Descriptor* descriptor = DaemonConfig::descriptor();
    for (size_t i = 0; i < field_path.size(); ++i) {
      const FieldDescriptor* field = descriptor->FindFieldByName(field_path[i]);
      if (field == nullptr || tree == nullptr) break;
      const bool last = i + 1 == field_path.size();
      if (last) {
        const auto location =
            tree->GetLocation(field, field->is_repeated() ? std::max(index, 0) : -1);
        line = location.line;
      } else {
        const auto location = tree->GetLocation(field, -1);
        if (location.line >= 0) line = location.line;
        tree = tree->GetTreeForNested(field, -1);
        descriptor = field->message_type();
      }
    }
    std::string name;
    for (const auto& part : field_path) name += (name.empty() ? "" : ".") + part;
    if (index >= 0) name += fmt::format("[{}]", index);
    if (line >= 0) {
      throw Error(ERROR_CONFIG_INVALID,
                  fmt::format("{}:{}: {}: {}", origin_, line + 1, name, message));
    }
    throw Error(ERROR_CONFIG_INVALID, fmt::format("{}: {}: {}", origin_, name, message));
  }

 private:
  std::string origin_;
  const TextFormat::ParseInfoTree& tree_;
};

bool is_absolute_normalized(const std::string& path) {
  try {
    wire::check_project_root_string(path);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Empty when only root can change what the absolute, normalized `path` names; otherwise why
// not. Every existing component must be owned by root and writable by nobody else; a symbolic
// link counts with everything up to its target. A root-owned sticky directory (like /tmp) may
// be on the way: others cannot rename or remove root's entries in it. It cannot be the path
// itself, nor hold a missing part: anyone could create that name first. `on_the_way`: `path` is
// where a symbolic link leads, in the middle of the path being checked.
std::string why_not_roots_alone(const std::string& path, bool on_the_way = false,
                                int links_left = 8) {
  struct stat st {};
  if (lstat("/", &st) != 0) return fmt::format("/: {}", std::strerror(errno));
  if (st.st_uid != 0 || (st.st_mode & 022) != 0) return "/ is not root's alone";
  std::string dir = "/";
  size_t start = 1;
  while (start < path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const bool last = end == path.size() && !on_the_way;
    std::string next = (dir == "/" ? "" : dir) + "/" + path.substr(start, end - start);
    start = end + 1;
    const mode_t dir_mode = st.st_mode;
    if (lstat(next.c_str(), &st) != 0) {
      if (errno != ENOENT) return fmt::format("{}: {}", next, std::strerror(errno));
      if ((dir_mode & 022) != 0) {
        return fmt::format("{} does not exist and {} is writable by group or others", next, dir);
      }
      return "";
    }
    if (st.st_uid != 0) return next + " is not owned by root";
    if (S_ISLNK(st.st_mode)) {
      if (links_left == 0) return next + ": too many symbolic links";
      char* real = realpath(next.c_str(), nullptr);
      if (real == nullptr) return next + " does not resolve";
      next = real;
      std::free(real);
      if (std::string why = why_not_roots_alone(next, !last, links_left - 1); !why.empty()) {
        return why;
      }
      if (lstat(next.c_str(), &st) != 0) return fmt::format("{}: {}", next, std::strerror(errno));
    }
    const bool sticky_dir = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) != 0;
    if ((st.st_mode & 022) != 0 && (last || !sticky_dir)) {
      return next + " is writable by group or others";
    }
    dir = next;
  }
  return "";
}

// What the config names to run or to show the roles must stay as root left it.
void check_roots_alone(const Checker& checker, const std::vector<std::string>& field, int index,
                       const std::string& path) {
  if (std::string why = why_not_roots_alone(path); !why.empty()) {
    checker.fail(field, index,
                 why +
                     ": each directory on the way and the path itself must be owned by root "
                     "and writable only by root");
  }
}

// The command a role runs and the host paths its view holds: root's alone.
void check_role_command(const Checker& checker, const std::string& name, const RoleConfig& role) {
  if (role.user().empty()) checker.fail({name, "user"}, -1, "must name the role's user");
  if (role.argv().empty()) checker.fail({name, "argv"}, -1, "must give the command to run");
  if (!is_absolute_normalized(role.argv(0))) {
    checker.fail({name, "argv"}, 0, "the program must be an absolute, normalized path");
  }
  check_roots_alone(checker, {name, "argv"}, 0, role.argv(0));
  // Each runtime path travels to the launcher as one fd of the plan message.
  if (role.runtime_paths_size() > kMaxRuntimePaths) {
    checker.fail({name, "runtime_paths"}, -1,
                 "at most " + std::to_string(kMaxRuntimePaths) + " runtime paths");
  }
  for (int i = 0; i < role.runtime_paths_size(); ++i) {
    if (!is_absolute_normalized(role.runtime_paths(i))) {
      checker.fail({name, "runtime_paths"}, i, "must be an absolute, normalized path");
    }
    check_roots_alone(checker, {name, "runtime_paths"}, i, role.runtime_paths(i));
  }
}

// What the role sees of the project: hidden files, read-only paths.
void check_role_project(const Checker& checker, const std::string& name, RoleConfig* role) {
  for (int i = 0; i < role->hidden_files_size(); ++i) {
    const std::string& pattern = role->hidden_files(i);
    if (pattern.empty() || pattern.find('/') != std::string::npos) {
      checker.fail({name, "hidden_files"}, i, "must be a non-empty file name pattern without '/'");
    }
  }
  if (role->hidden_files().empty()) {
    // .env.* covers .env.local and an editor's .env.swp or .env.bak; .env~ is emacs's backup.
    role->add_hidden_files(".env");
    role->add_hidden_files(".env.*");
    role->add_hidden_files(".env~");
  }
  if (role->read_only_paths_size() > kMaxReadOnlyPaths) {
    checker.fail({name, "read_only_paths"}, -1,
                 "at most " + std::to_string(kMaxReadOnlyPaths) + " read-only paths");
  }
  for (int i = 0; i < role->read_only_paths_size(); ++i) {
    const std::string& path = role->read_only_paths(i);
    if (path.empty() || path.front() == '/' || !is_absolute_normalized("/" + path)) {
      checker.fail({name, "read_only_paths"}, i,
                   "must be a normalized path relative to the project (no '..', no leading '/')");
    }
  }
}

// The session's locale and limits.
void check_role_session(const Checker& checker, const std::string& name, RoleConfig* role) {
  if (!role->has_locale()) role->set_locale("C.UTF-8");
  if (role->locale().find_first_of("\n\0=", 0, 3) != std::string::npos) {
    checker.fail({name, "locale"}, -1, "must not contain '=', NUL or newlines");
  }
  auto* limits = role->mutable_limits();
  if (!limits->has_memory_max_bytes()) limits->set_memory_max_bytes(4ULL << 30);
  if (!limits->has_swap_max_bytes()) limits->set_swap_max_bytes(0);
  if (!limits->has_pids_max()) limits->set_pids_max(512);
  if (!limits->has_cpu_max_percent()) limits->set_cpu_max_percent(200);
  if (!limits->has_rlimit_nofile()) limits->set_rlimit_nofile(sandbox::kDefaultRlimitNofile);
  if (!limits->has_rlimit_core()) limits->set_rlimit_core(sandbox::kDefaultRlimitCore);
  if (limits->memory_max_bytes() < (16ULL << 20)) {
    checker.fail({name, "limits", "memory_max_bytes"}, -1, "must be at least 16 MiB");
  }
  if (limits->pids_max() < 2) checker.fail({name, "limits", "pids_max"}, -1, "must be at least 2");
  if (limits->cpu_max_percent() < 1) {
    checker.fail({name, "limits", "cpu_max_percent"}, -1, "must be at least 1");
  }
  if (limits->rlimit_nofile() < 16) {
    checker.fail({name, "limits", "rlimit_nofile"}, -1, "must be at least 16");
  }
}

void check_role(const Checker& checker, const std::string& name, RoleConfig* role) {
  check_role_command(checker, name, *role);
  check_role_project(checker, name, role);
  check_role_session(checker, name, role);
}

// The daemon's own settings: its socket, how much it takes on, its log.
void check_daemon_settings(const Checker& checker, DaemonConfig& config) {
  if (!config.has_socket_path()) config.set_socket_path(kDefaultSocketPath);
  if (!is_absolute_normalized(config.socket_path())) {
    checker.fail({"socket_path"}, -1, "must be an absolute, normalized path");
  }
  if (!config.has_socket_mode()) config.set_socket_mode(0666);
  if (config.socket_mode() & ~0777U) checker.fail({"socket_mode"}, -1, "must be within 0777");
  if (!config.has_max_sessions()) config.set_max_sessions(64);
  if (!config.has_max_sessions_per_uid()) config.set_max_sessions_per_uid(16);
  if (config.max_sessions() == 0) checker.fail({"max_sessions"}, -1, "must be at least 1");
  if (config.max_sessions_per_uid() == 0) {
    checker.fail({"max_sessions_per_uid"}, -1, "must be at least 1");
  }
  if (!config.has_max_pending_per_uid()) config.set_max_pending_per_uid(8);
  if (config.max_pending_per_uid() < 1 || config.max_pending_per_uid() > kMaxPendingPerUid) {
    checker.fail({"max_pending_per_uid"}, -1,
                 "must be between 1 and " + std::to_string(kMaxPendingPerUid));
  }
  if (!config.has_prestarted_sandboxes()) config.set_prestarted_sandboxes(2);
  if (config.prestarted_sandboxes() > 16) {
    checker.fail({"prestarted_sandboxes"}, -1, "must be at most 16");
  }
  if (!config.has_handshake_timeout_ms()) config.set_handshake_timeout_ms(5000);
  if (config.handshake_timeout_ms() < 10 || config.handshake_timeout_ms() > 600000) {
    checker.fail({"handshake_timeout_ms"}, -1, "must be between 10 and 600000");
  }
  if (!config.has_log_level()) config.set_log_level("info");
  static const char* const kLevels[] = {"trace", "debug", "info", "warn", "error"};
  if (std::find(std::begin(kLevels), std::end(kLevels), config.log_level()) == std::end(kLevels)) {
    checker.fail({"log_level"}, -1, "must be one of trace, debug, info, warn, error");
  }
  if (config.has_log_file() && !is_absolute_normalized(config.log_file())) {
    checker.fail({"log_file"}, -1, "must be an absolute, normalized path");
  }
}

// The session cgroups' parent and the limits on all of one caller's sessions together.
void check_cgroup_settings(const Checker& checker, DaemonConfig& config) {
  auto* cgroups = config.mutable_cgroups();
  if (!cgroups->has_parent()) cgroups->set_parent("pando-helper");
  const std::string& parent = cgroups->parent();
  // The test CgroupManager::detect applies at start, so that --check-config says what the
  // daemon will say.
  if (!cgroup_text::valid_parent(parent)) {
    checker.fail({"cgroups", "parent"}, -1, cgroup_text::kValidParentRule);
  }
  auto* caller = config.mutable_caller_limits();
  if (!caller->has_memory_max_bytes()) caller->set_memory_max_bytes(8ULL << 30);
  if (!caller->has_pids_max()) caller->set_pids_max(1024);
  if (!caller->has_cpu_max_percent()) caller->set_cpu_max_percent(400);
  // A caller must have room for one session of either role (and cgroup v1 refuses a session
  // cpu quota above its caller's).
  const auto& core = config.core().limits();
  const auto& workspace = config.workspace().limits();
  const auto at_least = [&](const char* field, uint64_t value, uint64_t core_value,
                            uint64_t workspace_value) {
    const uint64_t needed = std::max(core_value, workspace_value);
    if (value < needed) {
      checker.fail({"caller_limits", field}, -1,
                   fmt::format("must be at least {}, the largest session limit of a role", needed));
    }
  };
  at_least("memory_max_bytes", caller->memory_max_bytes(), core.memory_max_bytes(),
           workspace.memory_max_bytes());
  at_least("pids_max", caller->pids_max(), core.pids_max(), workspace.pids_max());
  at_least("cpu_max_percent", caller->cpu_max_percent(), core.cpu_max_percent(),
           workspace.cpu_max_percent());
}

}  // namespace

DaemonConfig parse_config(const std::string& text, const std::string& origin) {
  DaemonConfig config;
  TextFormat::Parser parser;
  CollectErrors errors(origin);
  TextFormat::ParseInfoTree tree;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(text, &config)) {
    throw Error(ERROR_CONFIG_INVALID,
                errors.first().empty() ? origin + ": does not parse" : errors.first());
  }
  const Checker checker(origin, tree);
  check_daemon_settings(checker, config);
  if (!config.has_sandbox_helper_path())
    config.set_sandbox_helper_path(PANDO_DEFAULT_SANDBOX_HELPER);
  if (!is_absolute_normalized(config.sandbox_helper_path())) {
    checker.fail({"sandbox_helper_path"}, -1, "must be an absolute, normalized path");
  }
  check_roots_alone(checker, {"sandbox_helper_path"}, -1, config.sandbox_helper_path());
  if (!config.has_git_path()) config.set_git_path("/usr/bin/git");
  if (!is_absolute_normalized(config.git_path())) {
    checker.fail({"git_path"}, -1, "must be an absolute, normalized path");
  }
  check_roots_alone(checker, {"git_path"}, -1, config.git_path());
  if (!config.has_core()) checker.fail({"core"}, -1, "the core role must be configured");
  if (!config.has_workspace())
    checker.fail({"workspace"}, -1, "the workspace role must be configured");
  check_role(checker, "core", config.mutable_core());
  check_role(checker, "workspace", config.mutable_workspace());
  check_cgroup_settings(checker, config);
  return config;
}

DaemonConfig load_config(const std::string& path) {
  const UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) throw_errno(path + ": cannot be opened", ERROR_CONFIG_INVALID);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw Error(ERROR_CONFIG_INVALID, path + ": not a regular file");
  }
  // The config names what runs as the role users: only root may write it.
  if (geteuid() == 0 && (st.st_uid != 0 || (st.st_mode & 022) != 0)) {
    throw Error(ERROR_CONFIG_INVALID, path + ": must be owned by root and writable only by root");
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno(path + ": cannot be read", ERROR_CONFIG_INVALID);
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  return parse_config(text, path);
}

}  // namespace pando::daemon
