// Session cgroups: detection, and what v1 and v2 share. What differs is in cgroup_v1.cc and
// cgroup_v2.cc, behind CgroupVersion (cgroup_version.h); what a start finds of an earlier
// instance's sessions is in cgroup_stale_sessions.cc.

#include "daemon/cgroups.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <thread>
#include <tuple>

#include "common/json_log.h"
#include "daemon/cgroup_version.h"
#include "proto/error.h"

namespace pando::daemon {

using pando::helper::v1::ERROR_CGROUP_UNAVAILABLE;
using pando::helper::v1::ERROR_CONFIG_INVALID;
using pando::helper::v1::ERROR_INTERNAL;
using pando::helper::v1::ERROR_LAUNCH_FAILED;

using namespace cgroup_fs;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

int open_pidfd(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// The memory, pids and cpu limits of one directory (zero: no limit), for the controllers it has.
void write_limits(const SessionCgroup::Dir& d, uint64_t memory_max, uint32_t pids_max,
                  uint32_t cpu_max_percent) {
  if (d.pids) {
    write_value(d.path + "/pids.max",
                pids_max == 0 ? std::string("max") : std::to_string(pids_max));
  }
  version_of(d).write_limits(d, memory_max, cpu_max_percent);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SessionCgroup

SessionCgroup::SessionCgroup(std::string name, std::vector<Dir> dirs,
                             std::shared_ptr<CallerCgroup> caller)
    : name_(std::move(name)), dirs_(std::move(dirs)), caller_(std::move(caller)) {
  if (caller_) {
    std::tie(caller_memory_events_base_, caller_pids_events_base_) = caller_->limit_counters();
  }
}

SessionCgroup::~SessionCgroup() {
  if (removed_) return;
  kill_all();
  // Killed processes leave the cgroup as they exit, before anyone reaps them.
  wait_empty(std::chrono::milliseconds(100));
  if (!remove()) {
    log::warn("cgroup_left_behind",
              {{"cgroup", describe()}, {"reason", std::string("busy after kill")}});
  }
}

void SessionCgroup::add_process(pid_t pid) {
  for (const auto& d : dirs_) write_value(d.path + "/cgroup.procs", std::to_string(pid));
}

std::vector<UniqueFd> SessionCgroup::attach_launcher(pid_t pid) {
  std::vector<UniqueFd> tasks_files;
  for (const auto& d : dirs_) {
    if (d.unified) {
      write_value(d.path + "/cgroup.procs", std::to_string(pid));
      continue;
    }
    const std::string path = d.path + "/tasks";
    UniqueFd file(open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!file.valid()) fail("open " + path, errno);
    tasks_files.push_back(std::move(file));
  }
  return tasks_files;
}

bool SessionCgroup::holds_at_most(pid_t pid) const noexcept {
  try {
    const std::string procs = dirs_.front().path + "/cgroup.procs";
    if (!exists(procs)) return false;
    const std::vector<pid_t> left = read_pids(procs);
    return left.empty() || (left.size() == 1 && left.front() == pid);
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<pid_t> SessionCgroup::listed_pids() const {
  std::set<pid_t> all;
  for (const auto& d : dirs_) {
    for (pid_t p : read_pids(d.path + "/cgroup.procs")) all.insert(p);
  }
  return {all.begin(), all.end()};
}

bool SessionCgroup::empty() const {
  return std::none_of(dirs_.begin(), dirs_.end(),
                      [](const Dir& d) { return version_of(d).populated(d); });
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
  std::optional<std::string> kill_file;
  bool can_freeze = false;
  for (const auto& d : dirs_) {
    if (auto file = version_of(d).kill_file(d)) kill_file = file;
    can_freeze = can_freeze || version_of(d).freezer(d).has_value();
  }
  switch (method) {
    case KillMethod::kAuto:
      if (kill_file) {
        write_value(*kill_file, "1");
      } else if (can_freeze) {
        kill_frozen();
      } else {
        kill_listed_checked();
      }
      return;
    case KillMethod::kFreezeThenSignal:
      if (!can_freeze) throw pando::Error(ERROR_CGROUP_UNAVAILABLE, "no freezer for " + describe());
      kill_frozen();
      return;
    case KillMethod::kSignalEach:
      kill_listed_checked();
      return;
  }
}

bool SessionCgroup::can_freeze() const {
  return std::any_of(dirs_.begin(), dirs_.end(),
                     [](const Dir& d) { return version_of(d).freezer(d).has_value(); });
}

void SessionCgroup::set_frozen(bool frozen) {
  std::optional<CgroupVersion::Freezer> freezer;
  for (const auto& d : dirs_) {
    if (auto f = version_of(d).freezer(d)) freezer = std::move(f);
  }
  if (!freezer) {
    throw pando::Error(ERROR_CGROUP_UNAVAILABLE, "no cgroup freezer for " + describe());
  }
  write_value(freezer->file, frozen ? freezer->frozen_value : freezer->thawed_value);
  if (!frozen) return;
  for (int i = 0; i < 200; ++i) {
    if (freezer->is_frozen()) return;
    sleep_ms(1);
  }
  write_value(freezer->file, freezer->thawed_value);
  throw pando::Error(ERROR_LAUNCH_FAILED, describe() + " did not freeze within 200 ms");
}

// While the session is frozen no process in it can fork, exit or reap, so each listed pid
// stays bound to its process until we kill it (the daemon, the launcher's parent, is busy
// here). A task stuck in uninterruptible sleep can keep the freeze from completing; we then
// kill what is listed anyway and go round again.
void SessionCgroup::kill_frozen() {
  std::optional<CgroupVersion::Freezer> freezer;
  for (const auto& d : dirs_) {
    if (auto f = version_of(d).freezer(d)) freezer = std::move(f);
  }
  for (int round = 0; round < 3; ++round) {
    write_value(freezer->file, freezer->frozen_value);
    bool frozen = false;
    for (int i = 0; i < 20 && !frozen; ++i) {
      frozen = freezer->is_frozen();
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
    write_value(freezer->file, freezer->thawed_value);
    if (kill_errno != 0) fail(fmt::format("kill {} in {}", failed, describe()), kill_errno);
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
        fail(fmt::format("pidfd_open {} in {}", p, describe()), err);
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
      fail(fmt::format("pidfd_send_signal {} in {}", failed, describe()), signal_errno);
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
  for (const auto& d : dirs_) {
    version_of(d).read_accounting(d, limit_events_only, u);
    if (d.pids) read_pids_usage(d, limit_events_only, u);
  }
  if (caller_) attribute_to_caller(u);
}

// pids.peak, pids.current and pids.events are the same files in v1 and v2.
void SessionCgroup::read_pids_usage(const Dir& d, bool limit_events_only, SessionUsage& u) const {
  if (!limit_events_only) {
    if (auto v = read_u64(d.path + "/pids.peak")) {
      u.pids_peak = *v;
    } else if (auto cur = read_u64(d.path + "/pids.current")) {
      pids_seen_ = std::max(pids_seen_, *cur);
      u.pids_peak = pids_seen_;
    }
  }
  u.pids_limit_hit = read_keyed(d.path + "/pids.events", "max").value_or(0) > 0;
}

// Which limit an OOM kill or a failed fork was: the session's own or its caller's.
void SessionCgroup::attribute_to_caller(SessionUsage& u) const {
  const auto [memory_events, pids_events] = caller_->limit_counters();
  if (u.oom_killed && memory_events > caller_memory_events_base_) {
    u.caller_memory_limit_hit = std::none_of(dirs_.begin(), dirs_.end(), [](const Dir& d) {
      return d.memory && version_of(d).memory_limit_reached(d);
    });
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
      const auto [m, p] = version_of(d).caller_limit_counters(d);
      if (d.memory) memory = m;
      if (d.pids) pids = p;
    }
  } catch (const std::exception& e) {
    log::error("cgroup_read_failed", {{"cgroup", dirs_.empty() ? std::string() : dirs_[0].path},
                                      {"error", std::string(e.what())}});
  }
  return {memory, pids};
}

// ---------------------------------------------------------------------------------------------
// CgroupManager

CgroupManager CgroupManager::none(std::string detail) {
  CgroupManager m;
  m.detail_ = std::move(detail);
  return m;
}

// v2 when its root (or our delegated unit) offers memory and pids, else v1.
CgroupManager CgroupManager::detect(const pando::helper::config::v1::CgroupConfig& config) {
  const std::string& parent = config.parent();
  if (!cgroup_text::valid_parent(parent)) {
    throw pando::Error(ERROR_CONFIG_INVALID,
                       "cgroups.parent '" + parent + "' " + cgroup_text::kValidParentRule);
  }
  std::vector<cgroup_text::Mount> mounts;
  std::string own_path = "/";
  try {
    mounts = cgroup_text::parse_mountinfo(read_text("/proc/self/mountinfo"));
    for (const auto& m : cgroup_text::parse_proc_cgroup(read_text("/proc/self/cgroup"))) {
      if (m.hierarchy_id == "0" && m.controllers.empty()) own_path = m.path;
    }
  } catch (const pando::Error& e) {
    return none(std::string("cannot read cgroup layout: ") + e.what());
  }
  std::string v2_reason;
  auto unified = std::find_if(mounts.begin(), mounts.end(),
                              [](const cgroup_text::Mount& m) { return m.unified; });
  if (unified != mounts.end()) {
    if (auto m = detect_unified(*unified, own_path, parent, &v2_reason)) return std::move(*m);
  }
  return detect_legacy(mounts, parent, v2_reason);
}

bool CgroupManager::limits_pids() const {
  return std::any_of(parents_.begin(), parents_.end(),
                     [](const SessionCgroup::Dir& dir) { return dir.pids; });
}

std::vector<std::string> CgroupManager::session_parent_dirs() const {
  std::vector<std::string> out;
  for (const auto& p : parents_) out.push_back(p.path);
  return out;
}

std::shared_ptr<CallerCgroup> CgroupManager::caller_cgroup(uid_t caller,
                                                           const CallerLimits& limits) {
  if (auto it = callers_.find(caller); it != callers_.end()) {
    it->second.idle_since.reset();
    return it->second.cgroup;
  }
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
    version_of(d).prepare_caller(d);
  }
  callers_[caller] = {cgroup, std::nullopt};
  return cgroup;
}

bool CgroupManager::remove_idle_callers(std::chrono::steady_clock::time_point now,
                                        std::chrono::steady_clock::duration linger) noexcept {
  for (auto it = callers_.begin(); it != callers_.end();) {
    KeptCaller& kept = it->second;
    if (kept.cgroup.use_count() > 1) {
      kept.idle_since.reset();
      ++it;
      continue;
    }
    if (!kept.idle_since) kept.idle_since = now;
    if (now - *kept.idle_since >= linger) {
      it = callers_.erase(it);  // the destructor removes the directories, or logs why not
    } else {
      ++it;
    }
  }
  return !callers_.empty();
}

std::unique_ptr<SessionCgroup> CgroupManager::create_session(const std::string& session_id,
                                                             uid_t caller,
                                                             const SessionLimits& limits,
                                                             const CallerLimits& caller_limits) {
  if (mode_ == CgroupMode::kNone) {
    throw pando::Error(ERROR_CGROUP_UNAVAILABLE, "no usable cgroup controllers: " + detail_);
  }
  if (!cgroup_text::valid_session_id(session_id)) {
    throw pando::Error(ERROR_INTERNAL, "invalid session id '" + session_id + "'");
  }
  std::shared_ptr<CallerCgroup> shared = caller_cgroup(caller, caller_limits);
  const std::string name = std::string(kSessionPrefix) + session_id;
  std::vector<SessionCgroup::Dir> created;
  try {
    for (const auto& parent : shared->dirs_) {
      SessionCgroup::Dir d = parent;
      d.path = parent.path + "/" + name;
      if (!make_dir(d.path)) fail("mkdir " + d.path, EEXIST);
      created.push_back(d);
    }
    for (const auto& d : created) {
      write_limits(d, limits.memory_max_bytes, limits.pids_max, limits.cpu_max_percent);
      version_of(d).write_session_extras(d, limits);
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
