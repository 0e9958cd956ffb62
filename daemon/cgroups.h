#pragma once

// Session cgroups: resource limits, accounting and reliable teardown for each launched session.
//
// Each session's cgroup lies in its caller's, caller-<uid>, which carries the caller limits:
// all live sessions of one user together stay within them. Three host layouts are handled:
//  - cgroup v2 delegated by systemd (Delegate=yes): the daemon moves itself into <unit>/daemon,
//    enables memory/pids/cpu on <unit>, and creates <unit>/sessions/caller-<uid>/session-<id>.
//  - cgroup v2 without delegation: sessions go to <v2 root>/<parent>/caller-<uid>/session-<id>.
//  - cgroup v1 (legacy or hybrid hosts whose cgroup2 mount carries no memory/pids controller):
//    one directory <hierarchy>/<parent>/caller-<uid>/session-<id> in each of the memory, pids,
//    cpu, cpuacct and freezer hierarchies.
// v1 and v2 differ behind one interface (cgroup_version.h): cgroup_v1.cc and cgroup_v2.cc; this
// header and cgroups.cc hold the detection and what both share, cgroup_stale_sessions.cc what a
// start finds of an earlier instance's sessions.
// Every call is synchronous and returns within a few milliseconds except wait_empty(), whose
// bound the caller chooses. Nothing here is thread-safe; the daemon is single-threaded.
// Failures throw pando::Error (proto/error.h): ERROR_CGROUP_UNAVAILABLE for a failed step,
// ERROR_CONFIG_INVALID for a bad cgroups.parent, ERROR_INTERNAL for a bad session id.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/unique_fd.h"
#include "proto/config.pb.h"

namespace pando::daemon {

enum class CgroupMode { kUnified, kLegacy, kNone };

// Zero in memory_max_bytes, pids_max or cpu_max_percent means "no limit" ("max").
struct SessionLimits {
  uint64_t memory_max_bytes = 0;
  uint64_t swap_max_bytes = 0;
  uint32_t pids_max = 0;
  uint32_t cpu_max_percent = 0;
};

// Zero means "no limit", as for SessionLimits.
struct CallerLimits {
  uint64_t memory_max_bytes = 0;
  uint32_t pids_max = 0;
  uint32_t cpu_max_percent = 0;
};

// Fields the host cannot report stay zero/false.
struct SessionUsage {
  uint64_t memory_peak_bytes = 0;
  uint64_t cpu_usage_usec = 0;
  uint64_t pids_peak = 0;
  bool oom_killed = false;        // the kernel OOM-killed at least one process of the session
  bool pids_limit_hit = false;    // a fork/clone failed because of pids.max
  bool memory_limit_hit = false;  // usage reached the memory limit at least once
  // Since the session began, its caller's memory limit was reached (v2: an OOM there; v1: a
  // failed charge there) while the session's own was not: an OOM kill was the caller limit's.
  bool caller_memory_limit_hit = false;
  // Since the session began, a fork failed at its caller's pids.max. v2 (kernel >= 6.12) counts
  // this per caller only, so every session of the caller running then sees it; elsewhere the
  // session's own pids.events counts it, and its pids.peak below its pids.max shows whose.
  bool caller_pids_limit_hit = false;
};

class CallerCgroup;
namespace cgroup_text {
struct Mount;
}

// The cgroup directories of one session. Created by CgroupManager; the destructor is a safety
// net that kills what is left and tries to remove the directories (logging on failure). The
// daemon should instead call kill_all(), then retry remove() until it is true.
// Teardown calls (kill_all, wait_empty, usage, remove) never throw: they log and report.
class SessionCgroup {
 public:
  enum class KillMethod {
    kAuto,              // v2 cgroup.kill if present, else freeze + signal, else signal each
    kFreezeThenSignal,  // v2 cgroup.freeze or the v1 freezer; fails without one
    kSignalEach,        // pidfd per listed pid, re-checked against cgroup.procs (racy forks
                        // are caught by repeating rounds)
  };

  ~SessionCgroup();
  SessionCgroup(const SessionCgroup&) = delete;
  SessionCgroup& operator=(const SessionCgroup&) = delete;

  const std::string& name() const { return name_; }  // "session-<id>"

  // Moves `pid` (all its threads) into the session in every hierarchy. Throws on failure.
  void add_process(pid_t pid);

  // Puts a session's launcher (single-threaded, waiting for its plan) in the session. v2:
  // moved here, as add_process(). v1: returned are the hierarchies' `tasks` files, opened for
  // writing, for the launcher to move itself (it writes "0" into each before it acts on its
  // plan). Moving another process takes the kernel's global threadgroup lock for writing,
  // whose first taker after a quiet spell waits for an RCU grace period (2-12 ms measured on
  // this machine's launch path); a thread that moves itself through `tasks` skips that lock.
  // v2 has no such file across domain cgroups. Throws on failure.
  std::vector<UniqueFd> attach_launcher(pid_t pid);

  // SIGKILLs every process of the session. v2: cgroup.kill, or freeze + kill each + thaw on
  // kernels without it (< 5.14). v1: freezer FROZEN, kill each listed pid, THAWED. Returns
  // false (and logs path + errno) when a step failed. Methods other than kAuto are for tests.
  bool kill_all(KillMethod method = KillMethod::kAuto) noexcept;

  // Whether set_frozen() has a freezer to use (v2 cgroup.freeze, a v1 freezer hierarchy).
  bool can_freeze() const;
  // Pauses (`frozen`) or resumes every process of the session: v2 cgroup.freeze, v1 the
  // freezer. Pausing returns once the kernel reports the whole session frozen; one that does not
  // freeze within 200 ms (a task stuck in uninterruptible sleep) is thawed again and reported.
  // Throws pando::Error: ERROR_CGROUP_UNAVAILABLE without a freezer, ERROR_LAUNCH_FAILED when
  // the freeze does not complete, or when a freezer file cannot be written.
  void set_frozen(bool frozen);

  // Polls until no process is left (v2 cgroup.events "populated 0", v1 empty cgroup.procs),
  // sleeping at most a few ms between reads. Returns whether it became empty in time.
  // Also false when the membership files cannot be read.
  bool wait_empty(std::chrono::milliseconds max) noexcept;

  // Whether no process but `pid` (or none at all) is in the session; false also when the
  // membership cannot be read. Every session process is in all of the session's hierarchies,
  // so one directory's cgroup.procs tells.
  bool holds_at_most(pid_t pid) const noexcept;

  // Reads the accounting files; call before remove(). Unreadable values stay zero.
  SessionUsage usage() const noexcept;
  // Only oom_killed and pids_limit_hit, which decide an Exit's reason: fewer files than usage(),
  // read while the client waits for its Exit.
  SessionUsage limit_events() const noexcept;

  // rmdir every directory. Returns false while a directory still has processes (EBUSY) or on
  // another error (logged). Already-removed directories count as removed. Once all are gone,
  // lets go of the caller cgroup, which lingers after the caller's last session
  // (CgroupManager::remove_idle_callers).
  bool remove() noexcept;

  // One line naming the directories, for logs.
  std::string describe() const;

  // Absolute directory paths, one per hierarchy (v2: exactly one).
  std::vector<std::string> dirs() const;

  struct Dir {
    std::string path;  // absolute, e.g. /sys/fs/cgroup/memory/pando-helper/caller-1000/session-ab12
    bool unified = false;
    bool memory = false;
    bool pids = false;
    bool cpu = false;
    bool cpuacct = false;
    bool freezer = false;
  };

 private:
  friend class CgroupManager;
  SessionCgroup(std::string name, std::vector<Dir> dirs, std::shared_ptr<CallerCgroup> caller);

  std::vector<pid_t> listed_pids() const;
  bool empty() const;
  SessionUsage read_or_log(bool limit_events_only) const noexcept;
  void read_usage(SessionUsage& usage, bool limit_events_only) const;
  void read_pids_usage(const Dir& d, bool limit_events_only, SessionUsage& usage) const;
  void attribute_to_caller(SessionUsage& usage) const;
  void kill_with(KillMethod method);
  void kill_frozen();
  void kill_listed_checked();

  std::string name_;
  std::vector<Dir> dirs_;
  // Null for a stale session of the older layout, or whose caller's cgroup was not taken over.
  std::shared_ptr<CallerCgroup> caller_;
  uint64_t caller_memory_events_base_ = 0;  // the caller's counters when the session began
  uint64_t caller_pids_events_base_ = 0;
  bool removed_ = false;
  mutable uint64_t pids_seen_ = 0;  // fallback for kernels without pids.peak
};

// The cgroup of one caller (uid), shared by the cgroups of all its live sessions, which keep it
// alive. The destructor removes its directories (it comes after the last session's removal);
// one that stays busy is logged and left for the next daemon start.
class CallerCgroup {
 public:
  ~CallerCgroup();
  CallerCgroup(const CallerCgroup&) = delete;
  CallerCgroup& operator=(const CallerCgroup&) = delete;

  // Limit events so far: v2 memory.events.local "oom" (OOMs at this cgroup's own memory.max) and
  // pids.events.local "max" (forks refused at its own pids.max; kernels >= 6.12); v1 the
  // memory.failcnt. Zero where unreadable.
  std::pair<uint64_t, uint64_t> limit_counters() const noexcept;

 private:
  friend class CgroupManager;
  explicit CallerCgroup(std::vector<SessionCgroup::Dir> dirs) : dirs_(std::move(dirs)) {}

  std::vector<SessionCgroup::Dir> dirs_;
};

class CgroupManager {
 public:
  // Finds the usable layout and prepares it (creates the parent directories, enables
  // controllers; in delegated v2 mode also moves this process into <unit>/daemon). When nothing
  // is usable, or preparing fails, returns mode()==kNone with the reason (path, errno) in
  // detail(). `config` is as config.cc filled it in (its parent, the one default); throws
  // pando::Error(ERROR_CONFIG_INVALID) only, for an invalid config.parent.
  // Delegation is assumed when our v2 cgroup is a .service/.scope (or its "daemon" leaf) and
  // either the unit directory carries systemd's trusted.delegate/user.delegate xattr (set by
  // recent systemd for Delegate= units) or the environment has PANDO_CGROUP_DELEGATED=1 (for
  // older systemd). Call it before signalling readiness to systemd: by then the unit's own
  // cgroup must hold no process. Without delegation, sessions go under /<parent> of the v2
  // root, and detail() warns when we run inside a systemd unit (systemd owns that tree).
  static CgroupManager detect(const pando::helper::config::v1::CgroupConfig& config);

  // Inputs for preparing a v2 layout; detect() fills them from /proc, tests pass their own.
  struct UnifiedSetup {
    std::string mount_point;  // where cgroup2 is mounted, e.g. /sys/fs/cgroup
    std::string own_path;     // this process's cgroup below the mount's root ("/" if at root)
    bool delegated = false;   // own_path is (inside) a unit systemd delegated to us
    std::string parent;       // sessions' parent below the mount when not delegated
    bool require_controllers = true;  // fail unless memory and pids can be enabled
  };
  // Throws pando::Error (path + errno) when a step fails. In cgroup_v2.cc.
  static CgroupManager set_up_unified(const UnifiedSetup& setup);

  CgroupManager(CgroupManager&&) = default;
  CgroupManager& operator=(CgroupManager&&) = default;

  CgroupMode mode() const { return mode_; }
  // e.g. "v2 delegated at /sys/fs/cgroup/system.slice/pando-helperd.service/sessions: memory
  // pids cpu" or "v1: memory,pids,cpu,cpuacct,freezer under /pando-helper".
  const std::string& detail() const { return detail_; }
  // Whether session cgroups carry pids.max (v2 always; v1 only with a pids hierarchy).
  bool limits_pids() const;

  // Directories holding the caller directories, which hold the session directories (one per
  // hierarchy; empty in kNone mode).
  std::vector<std::string> session_parent_dirs() const;

  // What remove_stale_sessions() found: the names it removed ("caller-1000/session-ab12",
  // "session-cd34"), and the sessions still busy when it gave up waiting for them.
  struct StaleSessions {
    std::vector<std::string> removed;
    std::vector<std::unique_ptr<SessionCgroup>> busy;
  };
  // At daemon start: kills every caller-<uid>/session-* (and, from older versions, session-*)
  // cgroup left by a previous instance, waits up to kStaleExitWait for their processes to exit,
  // and removes them; then the caller-<uid> directories that hold no busy session. Each stale
  // caller directory is taken over as the caller's cgroup, with `caller_limits` written anew:
  // the caller's next session shares it (two owners of one directory would each remove it),
  // and it goes as any caller's does (remove_idle_callers) once its busy sessions are removed.
  // The daemon retries remove() on each busy session until it is true. Throws pando::Error
  // only when a directory cannot be listed.
  StaleSessions remove_stale_sessions(const CallerLimits& caller_limits);

  // How long remove_stale_sessions() waits for all killed processes together. Dying can take
  // longer (a killed fork bomb under its cpu.max was still busy after 600 ms in CI's cgroup v2
  // guest); what is still busy then is removed later, not waited for here.
  static constexpr std::chrono::milliseconds kStaleExitWait{500};

  // Creates the session's directories in the caller's cgroup and writes its limits. The
  // caller's cgroup is made (with `caller_limits`) when the caller has none (no session and
  // none lingering), else shared. Throws pando::Error: ERROR_INTERNAL for a bad session id,
  // ERROR_CGROUP_UNAVAILABLE (path + errno) for any failed step and in kNone mode; partially
  // created directories are removed before throwing.
  std::unique_ptr<SessionCgroup> create_session(const std::string& session_id, uid_t caller,
                                                const SessionLimits& limits,
                                                const CallerLimits& caller_limits);

  // How long a caller's cgroup outlives its last session, holding no process: a caller that
  // launches again within it reuses the cgroup instead of paying a mkdir, the limit writes and
  // an rmdir in every hierarchy on each launch (back-to-back launches, bursts).
  static constexpr std::chrono::seconds kCallerLinger{1};

  // Removes each caller cgroup that no session has held for `linger` (counted from the first
  // call that found it idle; zero at shutdown removes every idle one). Returns whether caller
  // cgroups are left, live or lingering: whether to call again later.
  bool remove_idle_callers(std::chrono::steady_clock::time_point now,
                           std::chrono::steady_clock::duration linger) noexcept;

  // Field by field; an unset one is no limit. The defaults are config.cc's alone to fill in.
  static SessionLimits limits_from_config(const pando::helper::config::v1::ResourceLimits& limits);
  static CallerLimits caller_limits_from_config(
      const pando::helper::config::v1::CallerLimits& limits);

 private:
  CgroupManager() = default;
  static CgroupManager none(std::string detail);
  // cgroup2 at `mount` when it offers memory and pids (a kNone manager when preparing it
  // failed); nullopt with `*reason` set when it does not. In cgroup_v2.cc.
  // `own_path` is this process's cgroup below the cgroup2 root (the "0::" line of
  // /proc/self/cgroup).
  static std::optional<CgroupManager> detect_unified(const cgroup_text::Mount& mount,
                                                     const std::string& own_path,
                                                     const std::string& parent,
                                                     std::string* reason);
  // The v1 hierarchies of `mounts` that carry memory and pids, else kNone naming
  // `v2_reason` too. In cgroup_v1.cc.
  static CgroupManager detect_legacy(const std::vector<cgroup_text::Mount>& mounts,
                                     const std::string& parent, const std::string& v2_reason);
  static constexpr std::string_view kSessionPrefix = "session-";
  static constexpr std::string_view kCallerPrefix = "caller-";
  static bool is_session_name(std::string_view name);
  // The uid of a "caller-<uid>" name; nullopt for any other name.
  static std::optional<uid_t> caller_uid(std::string_view name);
  // In cgroup_stale_sessions.cc, with remove_stale_sessions(). A caller that cannot be taken
  // over is logged and missing from the map.
  std::unique_ptr<SessionCgroup> adopt(const std::string& name,
                                       std::shared_ptr<CallerCgroup> caller) const;
  std::map<std::string, std::shared_ptr<CallerCgroup>> take_over_callers(
      const std::set<std::string>& callers, const CallerLimits& limits);
  std::shared_ptr<CallerCgroup> caller_cgroup(uid_t caller, const CallerLimits& limits);

  CgroupMode mode_ = CgroupMode::kNone;
  std::string detail_;
  std::vector<SessionCgroup::Dir> parents_;  // where caller dirs go, with their controllers
  // Caller cgroups, with sessions or lingering (remove_idle_callers). Only the daemon's one
  // thread makes and drops them, so a caller's cgroup is never removed while its next session
  // is being made.
  struct KeptCaller {
    std::shared_ptr<CallerCgroup> cgroup;
    std::optional<std::chrono::steady_clock::time_point> idle_since;  // no session holds it
  };
  std::map<uid_t, KeptCaller> callers_;
};

// Pure helpers, exposed for unit tests.
namespace cgroup_text {

struct Mount {
  std::string mount_point;               // unescaped
  std::string root;                      // the cgroup shown at mount_point
  bool unified = false;                  // cgroup2
  std::vector<std::string> controllers;  // v1: from the super options (e.g. "cpu", "cpuacct")
};
// The cgroup and cgroup2 mounts of a /proc/<pid>/mountinfo text; malformed lines are skipped.
std::vector<Mount> parse_mountinfo(std::string_view text);

struct Membership {
  std::string hierarchy_id;
  std::vector<std::string> controllers;  // empty for the v2 line "0::<path>"
  std::string path;
};
std::vector<Membership> parse_proc_cgroup(std::string_view text);

// "<quota> 100000" for cpu.max; "max 100000" for 0.
std::string cpu_max_line(uint32_t percent);

// A relative path of at most 256 characters whose components are non-empty, not "." or "..",
// each of [A-Za-z0-9._-]: the one check of cgroups.parent, at config load and at start.
bool valid_parent(std::string_view parent);
// What valid_parent() asks, for every refusal of a parent.
inline constexpr char kValidParentRule[] =
    "must be a relative path of at most 256 letters, digits, '-', '_' and '.', without empty, "
    "'.' or '..' parts";

// 1..64 characters of [A-Za-z0-9_-].
bool valid_session_id(std::string_view id);

// The systemd unit cgroup we may manage below, when own_path is a .service/.scope cgroup (or
// its "daemon" leaf, after a restart in place) and a delegation marker is present.
std::optional<std::string> delegated_unit(std::string_view own_path, bool delegate_marker);

// "<mount_point><path below mount root>", or nullopt when path is outside the mount's root.
std::optional<std::string> path_in_mount(const Mount& mount, std::string_view path);

// Value of "<key> <n>" in a flat-keyed file (cpu.stat, memory.events, pids.events, ...).
std::optional<uint64_t> keyed_value(std::string_view text, std::string_view key);

}  // namespace cgroup_text

}  // namespace pando::daemon
