#include "daemon/cgroups.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "common/json_log.h"

namespace pando::daemon {

namespace {

constexpr std::string_view kSessionPrefix = "session-";
constexpr std::string_view kCallerPrefix = "caller-";
constexpr uint64_t kCpuPeriodUsec = 100000;
constexpr std::array<std::string_view, 3> kUnifiedControllers = {"memory", "pids", "cpu"};

[[noreturn]] void throw_errno(const std::string& what, int err) {
  throw std::runtime_error(fmt::format("{}: {} (errno {})", what, std::strerror(err), err));
}

// Reads a whole (small) kernel file; nullopt when it does not exist.
std::optional<std::string> read_if_exists(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw_errno("open " + path, errno);
  }
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      throw_errno("read " + path, err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

std::string read_text(const std::string& path) {
  auto text = read_if_exists(path);
  if (!text) throw_errno("open " + path, ENOENT);
  return *text;
}

// cgroupfs takes each write(2) as one command, so the value goes out in a single call.
void write_value(const std::string& path, std::string_view value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw_errno(fmt::format("open {} to write '{}'", path, value), errno);
  ssize_t n;
  do {
    n = write(fd, value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  int err = errno;
  close(fd);
  if (n < 0) throw_errno(fmt::format("write '{}' to {}", value, path), err);
  if (static_cast<size_t>(n) != value.size()) {
    throw std::runtime_error(fmt::format("short write of '{}' to {}", value, path));
  }
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Returns whether the directory was created (false: it already existed).
bool make_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0) return true;
  if (errno == EEXIST) return false;
  throw_errno("mkdir " + path, errno);
}

uint64_t parse_u64(std::string_view text, const std::string& what) {
  uint64_t value = 0;
  size_t i = 0;
  while (i < text.size() && text[i] == ' ') ++i;
  size_t digits = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
    value = value * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (digits == 0) throw std::runtime_error(fmt::format("{}: not a number: '{}'", what, text));
  return value;
}

std::optional<uint64_t> read_u64(const std::string& path) {
  auto text = read_if_exists(path);
  if (!text) return std::nullopt;
  return parse_u64(*text, path);
}

std::optional<uint64_t> read_keyed(const std::string& path, std::string_view key) {
  auto text = read_if_exists(path);
  if (!text) return std::nullopt;
  return cgroup_text::keyed_value(*text, key);
}

std::vector<pid_t> read_pids(const std::string& procs_path) {
  std::vector<pid_t> pids;
  auto text = read_if_exists(procs_path);
  if (!text) return pids;
  size_t pos = 0;
  while (pos < text->size()) {
    size_t end = text->find('\n', pos);
    if (end == std::string::npos) end = text->size();
    if (end > pos) {
      pids.push_back(static_cast<pid_t>(
          parse_u64(std::string_view(*text).substr(pos, end - pos), procs_path)));
    }
    pos = end + 1;
  }
  return pids;
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  size_t pos = 0;
  for (;;) {
    size_t end = text.find(sep, pos);
    parts.emplace_back(text.substr(pos, end == std::string_view::npos ? end : end - pos));
    if (end == std::string_view::npos) return parts;
    pos = end + 1;
  }
}

bool contains(const std::vector<std::string>& list, std::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

std::string join(const std::vector<std::string>& list, std::string_view sep) {
  std::string out;
  for (const auto& item : list) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

int open_pidfd(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

bool has_delegate_xattr(const std::string& dir) {
  for (const char* name : {"trusted.delegate", "user.delegate"}) {
    char value[8] = {};
    ssize_t n = getxattr(dir.c_str(), name, value, sizeof value - 1);
    if (n == 1 && value[0] == '1') return true;
  }
  return false;
}

std::vector<std::string> controllers_of(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& c : split(read_text(dir + "/cgroup.controllers"), ' ')) {
    while (!c.empty() && (c.back() == '\n' || c.back() == ' ')) c.pop_back();
    if (!c.empty()) out.push_back(c);
  }
  return out;
}

// Enables every controller of `wanted` that `dir` offers in its subtree_control, one write
// each so that one refusal (e.g. cpu with realtime tasks around) does not block the others.
// Returns the ones enabled.
std::vector<std::string> enable_controllers(const std::string& dir,
                                            const std::vector<std::string>& wanted,
                                            std::string* first_error) {
  std::vector<std::string> offered = controllers_of(dir);
  std::vector<std::string> enabled;
  for (const auto& c : wanted) {
    if (!contains(offered, c)) continue;
    try {
      write_value(dir + "/cgroup.subtree_control", "+" + c);
      enabled.push_back(c);
    } catch (const std::runtime_error& e) {
      if (first_error->empty()) *first_error = e.what();
    }
  }
  return enabled;
}

// The memory, pids and cpu limits of one directory (zero: no limit), for the controllers it has.
void write_limits(const SessionCgroup::Dir& d, uint64_t memory_max, uint32_t pids_max,
                  uint32_t cpu_max_percent) {
  const std::string& p = d.path;
  const std::string pids = pids_max == 0 ? std::string("max") : std::to_string(pids_max);
  if (d.unified) {
    if (d.memory) {
      write_value(p + "/memory.max",
                  memory_max == 0 ? std::string("max") : std::to_string(memory_max));
    }
    if (d.pids) write_value(p + "/pids.max", pids);
    if (d.cpu) write_value(p + "/cpu.max", cgroup_text::cpu_max_line(cpu_max_percent));
    return;
  }
  if (d.memory && memory_max != 0) {
    write_value(p + "/memory.limit_in_bytes", std::to_string(memory_max));
  }
  if (d.pids) write_value(p + "/pids.max", pids);
  if (d.cpu && cpu_max_percent != 0) {
    write_value(p + "/cpu.cfs_period_us", std::to_string(kCpuPeriodUsec));
    write_value(p + "/cpu.cfs_quota_us",
                std::to_string(uint64_t{cpu_max_percent} * kCpuPeriodUsec / 100));
  }
}

// Names of the subdirectories of `dir` for which `wanted` holds; none when `dir` is gone.
std::vector<std::string> subdirs(const std::string& dir,
                                 const std::function<bool(std::string_view)>& wanted) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) {
    if (errno == ENOENT) return out;
    throw_errno("opendir " + dir, errno);
  }
  while (dirent* e = readdir(d)) {
    if (e->d_type == DT_DIR && wanted(e->d_name)) out.emplace_back(e->d_name);
  }
  closedir(d);
  return out;
}

bool is_session_name(std::string_view name) {
  return name.starts_with(kSessionPrefix) &&
         cgroup_text::valid_session_id(name.substr(kSessionPrefix.size()));
}

bool is_caller_name(std::string_view name) {
  std::string_view uid = name.substr(std::min(name.size(), kCallerPrefix.size()));
  return name.starts_with(kCallerPrefix) && !uid.empty() && uid.size() <= 10 &&
         std::all_of(uid.begin(), uid.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// cgroup_text

namespace cgroup_text {

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_octal(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string> fields(std::string_view line) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    if (pos >= line.size()) break;
    size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    out.emplace_back(line.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

constexpr std::array<std::string_view, 13> kV1Controllers = {
    "cpu",   "cpuacct",    "cpuset",   "memory",  "devices", "freezer", "net_cls",
    "blkio", "perf_event", "net_prio", "hugetlb", "pids",    "rdma"};

}  // namespace

std::vector<Mount> parse_mountinfo(std::string_view text) {
  std::vector<Mount> mounts;
  for (const auto& line : split(text, '\n')) {
    // id parent major:minor root mount_point options [optional...] - fstype source super_options
    auto f = fields(line);
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 6 || dash == f.end() || f.end() - dash < 4) continue;
    const std::string& fstype = dash[1];
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    Mount m;
    m.root = unescape_octal(f[3]);
    m.mount_point = unescape_octal(f[4]);
    m.unified = fstype == "cgroup2";
    if (!m.unified) {
      for (const auto& opt : split(dash[3], ',')) {
        if (std::find(kV1Controllers.begin(), kV1Controllers.end(), opt) != kV1Controllers.end()) {
          m.controllers.push_back(opt);
        }
      }
    }
    mounts.push_back(std::move(m));
  }
  return mounts;
}

std::vector<Membership> parse_proc_cgroup(std::string_view text) {
  std::vector<Membership> out;
  for (const auto& line : split(text, '\n')) {
    size_t c1 = line.find(':');
    if (c1 == std::string::npos) continue;
    size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    Membership m;
    m.hierarchy_id = line.substr(0, c1);
    std::string list = line.substr(c1 + 1, c2 - c1 - 1);
    if (!list.empty()) m.controllers = split(list, ',');
    m.path = line.substr(c2 + 1);
    if (m.path.empty() || m.path[0] != '/') continue;
    out.push_back(std::move(m));
  }
  return out;
}

std::string cpu_max_line(uint32_t percent) {
  if (percent == 0) return fmt::format("max {}", kCpuPeriodUsec);
  return fmt::format("{} {}", uint64_t{percent} * kCpuPeriodUsec / 100, kCpuPeriodUsec);
}

bool valid_parent(std::string_view parent) {
  if (parent.empty() || parent.size() > 256 || parent.front() == '/') return false;
  for (const auto& part : split(parent, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.';
      if (!ok) return false;
    }
  }
  return true;
}

bool valid_session_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  });
}

std::optional<std::string> delegated_unit(std::string_view own_path, bool delegate_marker) {
  if (!delegate_marker) return std::nullopt;
  auto is_unit = [](std::string_view p) {
    size_t slash = p.rfind('/');
    std::string_view last = p.substr(slash == std::string_view::npos ? 0 : slash + 1);
    auto ends = [&](std::string_view suffix) {
      return last.size() > suffix.size() && last.substr(last.size() - suffix.size()) == suffix;
    };
    return ends(".service") || ends(".scope");
  };
  std::string path(own_path);
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.size() <= 1) return std::nullopt;
  if (is_unit(path)) return path;
  constexpr std::string_view kLeaf = "/daemon";
  if (path.size() > kLeaf.size() &&
      path.compare(path.size() - kLeaf.size(), kLeaf.size(), kLeaf) == 0) {
    std::string unit = path.substr(0, path.size() - kLeaf.size());
    if (is_unit(unit)) return unit;
  }
  return std::nullopt;
}

std::optional<std::string> path_in_mount(const Mount& mount, std::string_view path) {
  std::string root = mount.root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  std::string rest;
  if (root == "/") {
    rest = path;
  } else if (path == root) {
    rest = "";
  } else if (path.size() > root.size() && path.substr(0, root.size()) == root &&
             path[root.size()] == '/') {
    rest = path.substr(root.size());
  } else {
    return std::nullopt;
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  return mount.mount_point + rest;
}

std::optional<uint64_t> keyed_value(std::string_view text, std::string_view key) {
  for (const auto& line : split(text, '\n')) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ' ') {
      return parse_u64(std::string_view(line).substr(key.size() + 1), std::string(key));
    }
  }
  return std::nullopt;
}

}  // namespace cgroup_text

// ---------------------------------------------------------------------------------------------
// SessionCgroup

SessionCgroup::SessionCgroup(std::string name, std::vector<Dir> dirs,
                             std::shared_ptr<CallerCgroup> caller)
    : name_(std::move(name)), dirs_(std::move(dirs)), caller_(std::move(caller)) {
  if (caller_) {
    std::tie(caller_memory_events_base_, caller_pids_events_base_) = caller_->limit_counters();
  }
  for (const auto& d : dirs_) {
    if (!d.unified) continue;
    unified_fd_ = open(d.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (unified_fd_ < 0) throw_errno("open " + d.path, errno);
  }
}

SessionCgroup::~SessionCgroup() {
  if (!removed_) {
    kill_all();
    // Killed processes leave the cgroup as they exit, before anyone reaps them.
    wait_empty(std::chrono::milliseconds(100));
    if (!remove()) {
      log::warn("cgroup_left_behind",
                {{"cgroup", describe()}, {"reason", std::string("busy after kill")}});
    }
  }
  if (unified_fd_ >= 0) close(unified_fd_);
}

void SessionCgroup::add_process(pid_t pid) {
  for (const auto& d : dirs_) write_value(d.path + "/cgroup.procs", std::to_string(pid));
}

std::vector<pid_t> SessionCgroup::listed_pids() const {
  std::set<pid_t> all;
  for (const auto& d : dirs_) {
    for (pid_t p : read_pids(d.path + "/cgroup.procs")) all.insert(p);
  }
  return {all.begin(), all.end()};
}

bool SessionCgroup::empty() const {
  for (const auto& d : dirs_) {
    if (d.unified) {
      auto populated = read_keyed(d.path + "/cgroup.events", "populated");
      if (populated) {
        if (*populated != 0) return false;
        continue;
      }
    }
    if (!read_pids(d.path + "/cgroup.procs").empty()) return false;
  }
  return true;
}

bool SessionCgroup::kill_all(KillMethod method) noexcept {
  try {
    // An empty cgroup gains no process but by an explicit move (only the
    // daemon makes those), so there is nothing to kill. Worth checking: a v1
    // freezer round trip flips a kernel static key, which patches kernel
    // text on every CPU (milliseconds on some VMs).
    if (empty()) return true;
    kill_with(method);
    return true;
  } catch (const std::exception& e) {
    log::error("cgroup_kill_failed", {{"cgroup", describe()}, {"error", std::string(e.what())}});
    return false;
  }
}

void SessionCgroup::kill_with(KillMethod method) {
  std::string kill_file;
  for (const auto& d : dirs_) {
    if (d.unified && exists(d.path + "/cgroup.kill")) kill_file = d.path + "/cgroup.kill";
  }
  bool can_freeze = std::any_of(dirs_.begin(), dirs_.end(), [](const Dir& d) {
    return d.freezer || (d.unified && exists(d.path + "/cgroup.freeze"));
  });
  switch (method) {
    case KillMethod::kAuto:
      if (!kill_file.empty()) {
        write_value(kill_file, "1");
      } else if (can_freeze) {
        kill_frozen();
      } else {
        kill_listed_checked();
      }
      return;
    case KillMethod::kFreezeThenSignal:
      if (!can_freeze) throw std::runtime_error("no freezer for " + describe());
      kill_frozen();
      return;
    case KillMethod::kSignalEach:
      kill_listed_checked();
      return;
  }
}

// While the session is frozen no process in it can fork, exit or reap, so each listed pid
// stays bound to its process until we kill it (the daemon, the launcher's parent, is busy
// here). A task stuck in uninterruptible sleep can keep the freeze from completing; we then
// kill what is listed anyway and go round again.
void SessionCgroup::kill_frozen() {
  std::string file;
  std::string frozen_value;
  std::string thawed_value;
  std::function<bool()> is_frozen;
  for (const auto& d : dirs_) {
    if (d.unified && exists(d.path + "/cgroup.freeze")) {
      file = d.path + "/cgroup.freeze";
      frozen_value = "1";
      thawed_value = "0";
      std::string events = d.path + "/cgroup.events";
      is_frozen = [events] { return read_keyed(events, "frozen").value_or(0) == 1; };
    } else if (d.freezer) {
      file = d.path + "/freezer.state";
      frozen_value = "FROZEN";
      thawed_value = "THAWED";
      is_frozen = [file] { return read_text(file).starts_with("FROZEN"); };
    }
  }
  for (int round = 0; round < 3; ++round) {
    write_value(file, frozen_value);
    bool frozen = false;
    for (int i = 0; i < 20 && !frozen; ++i) {
      frozen = is_frozen();
      if (!frozen) sleep_ms(1);
    }
    std::vector<pid_t> pids = listed_pids();
    int kill_errno = 0;
    pid_t failed = 0;
    for (pid_t p : pids) {
      if (::kill(p, SIGKILL) != 0 && errno != ESRCH && kill_errno == 0) {
        kill_errno = errno;
        failed = p;
      }
    }
    // Thaw even after a failed kill: a session left frozen would hang its client.
    write_value(file, thawed_value);
    if (kill_errno != 0) throw_errno(fmt::format("kill {} in {}", failed, describe()), kill_errno);
    if (frozen || pids.empty()) return;
  }
}

// Without a freezer a listed pid could exit and be reused before kill(). A pidfd pins the
// process; if its pid is still listed after pinning, the pinned process is a member.
void SessionCgroup::kill_listed_checked() {
  for (int round = 0; round < 10; ++round) {
    std::vector<pid_t> pids = listed_pids();
    if (pids.empty()) return;
    std::vector<std::pair<pid_t, int>> pinned;
    for (pid_t p : pids) {
      int fd = open_pidfd(p);
      if (fd >= 0) {
        pinned.emplace_back(p, fd);
      } else if (errno != ESRCH) {
        int err = errno;
        for (auto& pin : pinned) close(pin.second);
        throw_errno(fmt::format("pidfd_open {} in {}", p, describe()), err);
      }
    }
    std::vector<pid_t> still = listed_pids();
    int signal_errno = 0;
    pid_t failed = 0;
    for (auto [p, fd] : pinned) {
      if (std::binary_search(still.begin(), still.end(), p) &&
          syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0) != 0 && errno != ESRCH &&
          signal_errno == 0) {
        signal_errno = errno;
        failed = p;
      }
      close(fd);
    }
    if (signal_errno != 0) {
      throw_errno(fmt::format("pidfd_send_signal {} in {}", failed, describe()), signal_errno);
    }
    sleep_ms(1);
  }
}

bool SessionCgroup::wait_empty(std::chrono::milliseconds max) noexcept {
  try {
    auto deadline = std::chrono::steady_clock::now() + max;
    int delay = 1;
    for (;;) {
      if (empty()) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      sleep_ms(delay);
      delay = std::min(delay * 2, 8);
    }
  } catch (const std::exception& e) {
    log::error("cgroup_read_failed", {{"cgroup", describe()}, {"error", std::string(e.what())}});
    return false;
  }
}

SessionUsage SessionCgroup::usage() const noexcept { return read_or_log(false); }

SessionUsage SessionCgroup::limit_events() const noexcept { return read_or_log(true); }

SessionUsage SessionCgroup::read_or_log(bool limit_events_only) const noexcept {
  SessionUsage u;
  try {
    read_usage(u, limit_events_only);
  } catch (const std::exception& e) {
    log::error("cgroup_read_failed", {{"cgroup", describe()}, {"error", std::string(e.what())}});
  }
  return u;
}

void SessionCgroup::read_usage(SessionUsage& u, bool limit_events_only) const {
  const bool full = !limit_events_only;
  for (const auto& d : dirs_) {
    const std::string& p = d.path;
    if (d.unified) {
      if (full) {
        if (auto v = read_keyed(p + "/cpu.stat", "usage_usec")) u.cpu_usage_usec = *v;
      }
      if (d.memory) {
        if (full) {
          if (auto v = read_u64(p + "/memory.peak")) u.memory_peak_bytes = *v;
        }
        if (auto text = read_if_exists(p + "/memory.events")) {
          uint64_t oom = cgroup_text::keyed_value(*text, "oom_kill").value_or(0);
          uint64_t max = cgroup_text::keyed_value(*text, "max").value_or(0);
          u.oom_killed = oom > 0;
          u.memory_limit_hit =
              oom > 0 || max > 0 || cgroup_text::keyed_value(*text, "oom").value_or(0) > 0;
        }
      }
    } else {
      if (d.memory) {
        uint64_t oom = read_keyed(p + "/memory.oom_control", "oom_kill").value_or(0);
        u.oom_killed = oom > 0;
        if (full) {
          if (auto v = read_u64(p + "/memory.max_usage_in_bytes")) u.memory_peak_bytes = *v;
          u.memory_limit_hit = oom > 0 || read_u64(p + "/memory.failcnt").value_or(0) > 0;
        }
      }
      if (d.cpuacct && full) {
        if (auto v = read_u64(p + "/cpuacct.usage")) u.cpu_usage_usec = *v / 1000;
      }
    }
    if (d.pids && full) {
      if (auto v = read_u64(p + "/pids.peak")) {
        u.pids_peak = *v;
      } else if (auto cur = read_u64(p + "/pids.current")) {
        pids_seen_ = std::max(pids_seen_, *cur);
        u.pids_peak = pids_seen_;
      }
    }
    if (d.pids) u.pids_limit_hit = read_keyed(p + "/pids.events", "max").value_or(0) > 0;
  }
  if (!caller_) return;
  const auto [memory_events, pids_events] = caller_->limit_counters();
  if (u.oom_killed && memory_events > caller_memory_events_base_) {
    bool own_limit = false;
    for (const auto& d : dirs_) {
      if (!d.memory) continue;
      own_limit = own_limit || (d.unified ? read_keyed(d.path + "/memory.events", "oom")
                                          : read_u64(d.path + "/memory.failcnt"))
                                       .value_or(0) > 0;
    }
    u.caller_memory_limit_hit = !own_limit;
  }
  u.caller_pids_limit_hit = pids_events > caller_pids_events_base_;
  for (const auto& d : dirs_) {
    if (!d.pids || !u.pids_limit_hit) continue;
    // The fork failed in this session short of its own pids.max: at a limit above it.
    auto peak = read_u64(d.path + "/pids.peak");
    auto max = read_if_exists(d.path + "/pids.max");
    if (peak && max && !max->starts_with("max") && *peak < parse_u64(*max, d.path + "/pids.max")) {
      u.caller_pids_limit_hit = true;
    }
  }
}

bool SessionCgroup::remove() noexcept {
  if (removed_) return true;
  bool all = true;
  for (const auto& d : dirs_) {
    if (rmdir(d.path.c_str()) == 0 || errno == ENOENT) continue;
    all = false;
    if (errno != EBUSY) {
      log::error("cgroup_remove_failed",
                 {{"cgroup", d.path}, {"error", std::string(std::strerror(errno))}});
    }
  }
  if (all) {
    removed_ = true;
    caller_.reset();
    if (unified_fd_ >= 0) {
      close(unified_fd_);
      unified_fd_ = -1;
    }
  }
  return all;
}

std::string SessionCgroup::describe() const { return join(dirs(), " "); }

std::vector<std::string> SessionCgroup::dirs() const {
  std::vector<std::string> out;
  for (const auto& d : dirs_) out.push_back(d.path);
  return out;
}

// ---------------------------------------------------------------------------------------------
// CallerCgroup

CallerCgroup::~CallerCgroup() {
  for (const auto& d : dirs_) {
    if (rmdir(d.path.c_str()) == 0 || errno == ENOENT) continue;
    log::warn("cgroup_left_behind",
              {{"cgroup", d.path}, {"reason", std::string(std::strerror(errno))}});
  }
}

std::pair<uint64_t, uint64_t> CallerCgroup::limit_counters() const noexcept {
  uint64_t memory = 0;
  uint64_t pids = 0;
  try {
    for (const auto& d : dirs_) {
      if (d.memory) {
        memory = (d.unified ? read_keyed(d.path + "/memory.events.local", "oom")
                            : read_u64(d.path + "/memory.failcnt"))
                     .value_or(0);
      }
      if (d.pids && d.unified) pids = read_keyed(d.path + "/pids.events.local", "max").value_or(0);
    }
  } catch (const std::exception& e) {
    log::error("cgroup_read_failed", {{"cgroup", dirs_.empty() ? std::string() : dirs_[0].path},
                                      {"error", std::string(e.what())}});
  }
  return {memory, pids};
}

// ---------------------------------------------------------------------------------------------
// CgroupManager

CgroupManager CgroupManager::set_up_unified(const UnifiedSetup& setup) {
  std::vector<std::string> wanted(kUnifiedControllers.begin(), kUnifiedControllers.end());
  std::string error;
  std::vector<std::string> enabled;
  std::string base;
  CgroupManager m;
  if (setup.delegated) {
    auto unit = cgroup_text::delegated_unit(setup.own_path, true);
    if (!unit) {
      throw std::runtime_error("cgroup " + setup.own_path + " is not a systemd unit's cgroup");
    }
    std::string unit_dir = setup.mount_point + *unit;
    std::string leaf = unit_dir + "/daemon";
    make_dir(leaf);
    // cgroup v2 allows controllers in a subtree only when the parent holds no process, so
    // everything the unit runs moves to the leaf first. A process forking meanwhile can leave
    // a new child behind, hence the rounds.
    for (int round = 0; round < 10; ++round) {
      std::vector<pid_t> pids = read_pids(unit_dir + "/cgroup.procs");
      if (pids.empty()) break;
      for (pid_t p : pids) {
        try {
          write_value(leaf + "/cgroup.procs", std::to_string(p));
        } catch (const std::runtime_error&) {
          if (exists(fmt::format("/proc/{}", p))) throw;
        }
      }
    }
    enabled = enable_controllers(unit_dir, wanted, &error);
    base = unit_dir + "/sessions";
    make_dir(base);
    enabled = enable_controllers(base, enabled, &error);
    m.detail_ = "v2 delegated at " + base + ":";
  } else {
    if (!cgroup_text::valid_parent(setup.parent)) {
      throw std::invalid_argument("invalid cgroup parent '" + setup.parent + "'");
    }
    std::string dir = setup.mount_point;
    enabled = wanted;
    for (const auto& part : split(setup.parent, '/')) {
      enabled = enable_controllers(dir, enabled, &error);
      dir += "/" + part;
      make_dir(dir);
    }
    enabled = enable_controllers(dir, enabled, &error);
    base = dir;
    m.detail_ = "v2 at " + base + ":";
  }
  if (setup.require_controllers && (!contains(enabled, "memory") || !contains(enabled, "pids"))) {
    throw std::runtime_error(fmt::format("cannot enable memory and pids for {} (enabled: {}){}",
                                         base, enabled.empty() ? "none" : join(enabled, " "),
                                         error.empty() ? "" : "; " + error));
  }
  m.detail_ += enabled.empty() ? " no controllers" : " " + join(enabled, " ");
  SessionCgroup::Dir d;
  d.path = base;
  d.unified = true;
  d.memory = contains(enabled, "memory");
  d.pids = contains(enabled, "pids");
  d.cpu = contains(enabled, "cpu");
  m.parents_.push_back(d);
  m.mode_ = CgroupMode::kUnified;
  return m;
}

bool CgroupManager::limits_pids() const {
  return std::any_of(parents_.begin(), parents_.end(),
                     [](const SessionCgroup::Dir& dir) { return dir.pids; });
}

CgroupManager CgroupManager::detect(const pando::helper::config::v1::CgroupConfig& config) {
  const std::string parent = config.has_parent() ? config.parent() : "pando-helper";
  if (!cgroup_text::valid_parent(parent)) {
    throw std::invalid_argument("cgroups.parent '" + parent +
                                "' must be a relative path without '.', '..' or empty parts");
  }
  CgroupManager none;
  std::vector<std::string> reasons;
  std::vector<cgroup_text::Mount> mounts;
  std::vector<cgroup_text::Membership> own;
  try {
    mounts = cgroup_text::parse_mountinfo(read_text("/proc/self/mountinfo"));
    own = cgroup_text::parse_proc_cgroup(read_text("/proc/self/cgroup"));
  } catch (const std::exception& e) {
    none.detail_ = std::string("cannot read cgroup layout: ") + e.what();
    return none;
  }

  auto unified_mount = std::find_if(mounts.begin(), mounts.end(),
                                    [](const cgroup_text::Mount& m) { return m.unified; });
  if (unified_mount != mounts.end()) {
    try {
      std::string own_path = "/";
      for (const auto& m : own) {
        if (m.hierarchy_id == "0" && m.controllers.empty()) own_path = m.path;
      }
      const char* env = std::getenv("PANDO_CGROUP_DELEGATED");
      bool marker = env != nullptr && std::string_view(env) == "1";
      std::optional<std::string> unit_dir;
      if (auto unit = cgroup_text::delegated_unit(own_path, true)) {
        unit_dir = cgroup_text::path_in_mount(*unified_mount, *unit);
        if (unit_dir && has_delegate_xattr(*unit_dir)) marker = true;
      }
      bool delegated = marker && unit_dir.has_value();
      std::string probe = delegated ? *unit_dir : unified_mount->mount_point;
      std::vector<std::string> offered = controllers_of(probe);
      if (contains(offered, "memory") && contains(offered, "pids")) {
        UnifiedSetup setup;
        setup.mount_point = unified_mount->mount_point;
        // Below the mount: the unit path with the mount's root stripped.
        setup.own_path =
            delegated ? unit_dir->substr(unified_mount->mount_point.size()) : std::string("/");
        setup.delegated = delegated;
        setup.parent = parent;
        CgroupManager m = set_up_unified(setup);
        // systemd owns the tree outside delegated units; sessions at its root work but break
        // its single-writer rule, so say so where the admin looks.
        if (!delegated && cgroup_text::delegated_unit(own_path, true)) {
          m.detail_ += " (unit " + own_path + " is not delegated: set Delegate=yes)";
        }
        return m;
      }
      reasons.push_back(fmt::format("cgroup2 at {} offers no memory+pids ({})", probe,
                                    offered.empty() ? "none" : join(offered, " ")));
    } catch (const std::exception& e) {
      none.detail_ = std::string("cgroup v2 setup failed: ") + e.what();
      return none;
    }
  }

  // v1: one directory per hierarchy that carries a controller we use.
  const std::vector<std::string> wanted = {"memory", "pids", "cpu", "cpuacct", "freezer"};
  std::vector<SessionCgroup::Dir> parents;
  std::vector<std::string> found;
  for (const auto& m : mounts) {
    if (m.unified) continue;
    SessionCgroup::Dir d;
    d.memory = contains(m.controllers, "memory");
    d.pids = contains(m.controllers, "pids");
    d.cpu = contains(m.controllers, "cpu");
    d.cpuacct = contains(m.controllers, "cpuacct");
    d.freezer = contains(m.controllers, "freezer");
    if (!(d.memory || d.pids || d.cpu || d.cpuacct || d.freezer)) continue;
    bool duplicate = std::any_of(parents.begin(), parents.end(), [&](const auto& p) {
      return (p.memory && d.memory) || (p.pids && d.pids) || (p.cpu && d.cpu) ||
             (p.cpuacct && d.cpuacct) || (p.freezer && d.freezer);
    });
    if (duplicate) continue;  // the same hierarchy mounted twice
    d.path = m.mount_point;
    for (const auto& c : m.controllers) {
      if (contains(wanted, c)) found.push_back(c);
    }
    parents.push_back(d);
  }
  if (!contains(found, "memory") || !contains(found, "pids")) {
    reasons.push_back(fmt::format("cgroup v1 has no memory+pids hierarchies (found: {})",
                                  found.empty() ? "none" : join(found, ",")));
    none.detail_ = "no usable cgroup controllers: " + join(reasons, "; ");
    return none;
  }
  try {
    for (auto& d : parents) {
      for (const auto& part : split(parent, '/')) {
        d.path += "/" + part;
        make_dir(d.path);
      }
    }
  } catch (const std::exception& e) {
    none.detail_ = std::string("cgroup v1 setup failed: ") + e.what();
    return none;
  }
  std::sort(found.begin(), found.end(), [&](const std::string& a, const std::string& b) {
    return std::find(wanted.begin(), wanted.end(), a) < std::find(wanted.begin(), wanted.end(), b);
  });
  CgroupManager m;
  m.mode_ = CgroupMode::kLegacy;
  m.parents_ = std::move(parents);
  m.detail_ = fmt::format("v1: {} under /{}", join(found, ","), parent);
  if (!reasons.empty()) m.detail_ += " (" + join(reasons, "; ") + ")";
  return m;
}

std::vector<std::string> CgroupManager::session_parent_dirs() const {
  std::vector<std::string> out;
  for (const auto& p : parents_) out.push_back(p.path);
  return out;
}

std::unique_ptr<SessionCgroup> CgroupManager::adopt(const std::string& name) const {
  std::vector<SessionCgroup::Dir> dirs;
  for (const auto& p : parents_) {
    SessionCgroup::Dir d = p;
    d.path = p.path + "/" + name;
    if (exists(d.path)) dirs.push_back(d);
  }
  return std::unique_ptr<SessionCgroup>(new SessionCgroup(name, std::move(dirs), nullptr));
}

std::vector<std::string> CgroupManager::remove_stale_sessions() {
  std::set<std::string> names;  // below the parents: session-<id> or caller-<uid>/session-<id>
  std::set<std::string> callers;
  for (const auto& p : parents_) {
    for (const auto& name : subdirs(p.path, is_session_name)) names.insert(name);
    for (const auto& caller : subdirs(p.path, is_caller_name)) {
      callers.insert(caller);
      for (const auto& name : subdirs(p.path + "/" + caller, is_session_name)) {
        names.insert(caller + "/" + name);
      }
    }
  }
  std::vector<std::string> removed;
  for (const auto& name : names) {
    try {
      auto session = adopt(name);
      session->kill_all();
      session->wait_empty(std::chrono::milliseconds(500));
      // A busy one is retried (and logged) by the destructor, then left for the next start.
      if (session->remove()) removed.push_back(name);
    } catch (const std::exception& e) {
      log::warn("cgroup_left_behind", {{"cgroup", name}, {"reason", std::string(e.what())}});
    }
  }
  for (const auto& caller : callers) {
    std::vector<SessionCgroup::Dir> dirs;
    for (const auto& p : parents_) dirs.push_back({.path = p.path + "/" + caller});
    const CallerCgroup stale(std::move(dirs));  // its destructor removes them, or logs why not
  }
  return removed;
}

std::shared_ptr<CallerCgroup> CgroupManager::caller_cgroup(uid_t caller,
                                                           const CallerLimits& limits) {
  if (auto it = callers_.find(caller); it != callers_.end()) {
    if (auto live = it->second.lock()) return live;
  }
  std::erase_if(callers_, [](const auto& entry) { return entry.second.expired(); });
  std::vector<SessionCgroup::Dir> dirs;
  for (const auto& p : parents_) {
    SessionCgroup::Dir d = p;
    d.path = fmt::format("{}/{}{}", p.path, kCallerPrefix, caller);
    dirs.push_back(d);
  }
  // Owned before anything is made: a failure below removes what was.
  std::shared_ptr<CallerCgroup> cgroup(new CallerCgroup(dirs));
  for (const auto& d : dirs) {
    // One left by a removal that failed is taken over, its limits written anew.
    make_dir(d.path);
    write_limits(d, limits.memory_max_bytes, limits.pids_max, limits.cpu_max_percent);
    // No memory.oom.group here: an OOM at the caller's limit takes the session it hits (whose
    // memory.oom.group is set), not every session of the caller.
    if (d.unified) {
      for (auto [enabled, controller] :
           {std::pair{d.memory, "+memory"}, std::pair{d.pids, "+pids"}, std::pair{d.cpu, "+cpu"}}) {
        if (enabled) write_value(d.path + "/cgroup.subtree_control", controller);
      }
    }
  }
  callers_[caller] = cgroup;
  return cgroup;
}

std::unique_ptr<SessionCgroup> CgroupManager::create_session(const std::string& session_id,
                                                             uid_t caller,
                                                             const SessionLimits& limits,
                                                             const CallerLimits& caller_limits) {
  if (mode_ == CgroupMode::kNone) {
    throw std::runtime_error("no usable cgroup controllers: " + detail_);
  }
  if (!cgroup_text::valid_session_id(session_id)) {
    throw std::invalid_argument("invalid session id '" + session_id + "'");
  }
  std::shared_ptr<CallerCgroup> shared = caller_cgroup(caller, caller_limits);
  const std::string name = std::string(kSessionPrefix) + session_id;
  std::vector<SessionCgroup::Dir> created;
  try {
    for (const auto& parent : shared->dirs_) {
      SessionCgroup::Dir d = parent;
      d.path = parent.path + "/" + name;
      if (!make_dir(d.path)) throw_errno("mkdir " + d.path, EEXIST);
      created.push_back(d);
    }
    for (const auto& d : created) {
      write_limits(d, limits.memory_max_bytes, limits.pids_max, limits.cpu_max_percent);
      const std::string& p = d.path;
      if (d.unified && d.memory) {
        if (exists(p + "/memory.swap.max")) {
          write_value(p + "/memory.swap.max", std::to_string(limits.swap_max_bytes));
        }
        write_value(p + "/memory.oom.group", "1");
      }
      // memsw bounds memory+swap and must not be below limit_in_bytes, so it goes second.
      if (!d.unified && d.memory && limits.memory_max_bytes != 0 &&
          exists(p + "/memory.memsw.limit_in_bytes")) {
        write_value(p + "/memory.memsw.limit_in_bytes",
                    std::to_string(limits.memory_max_bytes + limits.swap_max_bytes));
      }
    }
    return std::unique_ptr<SessionCgroup>(new SessionCgroup(name, created, shared));
  } catch (...) {
    for (const auto& d : created) rmdir(d.path.c_str());
    throw;
  }
}

SessionLimits CgroupManager::limits_from_config(
    const pando::helper::config::v1::ResourceLimits& limits) {
  return {.memory_max_bytes = limits.memory_max_bytes(),
          .swap_max_bytes = limits.swap_max_bytes(),
          .pids_max = limits.pids_max(),
          .cpu_max_percent = limits.cpu_max_percent()};
}

CallerLimits CgroupManager::caller_limits_from_config(
    const pando::helper::config::v1::CallerLimits& limits) {
  return {.memory_max_bytes = limits.memory_max_bytes(),
          .pids_max = limits.pids_max(),
          .cpu_max_percent = limits.cpu_max_percent()};
}

}  // namespace pando::daemon
