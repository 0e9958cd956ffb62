#pragma once

// Inside the session cgroups code (cgroups.cc, cgroup_v1.cc, cgroup_v2.cc) and its unit tests:
// the file helpers all three use, and CgroupVersion, the one interface behind which v1
// (cgroup_v1.cc) and v2 (cgroup_v2.cc) differ. Everything else, the daemon included, uses
// cgroups.h.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/cgroups.h"

namespace pando::daemon {

// Reads and writes of cgroupfs files. A failure throws pando::Error(ERROR_CGROUP_UNAVAILABLE)
// naming the path and the errno.
namespace cgroup_fs {

[[noreturn]] void fail(const std::string& what, int err);

// A whole (small) kernel file; nullopt when it does not exist.
std::optional<std::string> read_if_exists(const std::string& path);
std::string read_text(const std::string& path);
// One write(2) of the whole value: cgroupfs takes each write as one command.
void write_value(const std::string& path, std::string_view value);
bool exists(const std::string& path);
// Returns whether the directory was created (false: it already existed).
bool make_dir(const std::string& path);
// The leading decimal number of `text` (after spaces); `what` names it in the error.
uint64_t parse_u64(std::string_view text, const std::string& what);
std::optional<uint64_t> read_u64(const std::string& path);
// Value of "<key> <n>" in a flat-keyed file; nullopt when the file or the key is missing.
std::optional<uint64_t> read_keyed(const std::string& path, std::string_view key);
// The pids of a cgroup.procs file; none when it does not exist.
std::vector<pid_t> read_pids(const std::string& procs_path);

std::vector<std::string> split(std::string_view text, char sep);
bool contains(const std::vector<std::string>& list, std::string_view item);
std::string join(const std::vector<std::string>& list, std::string_view sep);

}  // namespace cgroup_fs

// The CFS period of every cpu limit, in both versions' files.
inline constexpr uint64_t kCpuPeriodUsec = 100000;

// How one cgroup directory (a SessionCgroup::Dir of a session, a caller or a parent) is
// driven, by the version of the hierarchy it lies in. Each method touches only the
// controllers the Dir has; what both versions do alike (pids.max, cgroup.procs, pids
// accounting, mkdir/rmdir) is the caller's, in cgroups.cc.
class CgroupVersion {
 public:
  using Dir = SessionCgroup::Dir;

  struct Freezer {
    std::string file;                 // written to freeze and to thaw
    std::string frozen_value;         // e.g. "1" (v2) or "FROZEN" (v1)
    std::string thawed_value;         // e.g. "0" (v2) or "THAWED" (v1)
    std::function<bool()> is_frozen;  // whether the freeze has completed
  };

  virtual ~CgroupVersion() = default;

  // The memory and cpu limits (zero: no limit); pids.max is the same file in both.
  virtual void write_limits(const Dir& d, uint64_t memory_max, uint32_t cpu_max_percent) const = 0;
  // What a session's directory carries beyond the limits a caller's has too.
  virtual void write_session_extras(const Dir& d, const SessionLimits& limits) const = 0;
  // After a caller's limits: makes its controllers available to the sessions below.
  virtual void prepare_caller(const Dir& d) const = 0;

  // Whether a process is left; the files that say so, when present, else cgroup.procs.
  virtual bool populated(const Dir& d) const = 0;
  // A file that kills every member in one write; nullopt when the kernel has none.
  virtual std::optional<std::string> kill_file(const Dir& d) const = 0;
  virtual std::optional<Freezer> freezer(const Dir& d) const = 0;

  // Memory and cpu accounting into `u` (all of it, or only what decides an Exit's reason).
  virtual void read_accounting(const Dir& d, bool limit_events_only, SessionUsage& u) const = 0;
  // Whether this directory's own memory limit was reached at least once.
  virtual bool memory_limit_reached(const Dir& d) const = 0;
  // A caller directory's counters of its own limits: {memory, pids}; zero where it has none.
  virtual std::pair<uint64_t, uint64_t> caller_limit_counters(const Dir& d) const = 0;
};

const CgroupVersion& cgroup_v1();
const CgroupVersion& cgroup_v2();
inline const CgroupVersion& version_of(const SessionCgroup::Dir& d) {
  return d.unified ? cgroup_v2() : cgroup_v1();
}

}  // namespace pando::daemon
