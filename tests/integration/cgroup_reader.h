#pragma once

// The one way tests read a cgroup's limits and usage, on both host layouts: cgroup v1 (one
// directory per hierarchy: memory, pids, cpu, cpuacct, ...) and cgroup v2 (one directory).
// A test first asks missing() for the controllers it needs and skips naming the one that is
// not there; every read after that of a file that is absent or unparsable adds a test failure
// (and returns nullopt), so no test passes by reading nothing.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace pando::itest {

enum class CgroupController {
  kMemory,         // v1 memory hierarchy; v2 "memory" in cgroup.controllers
  kPids,           // v1 pids hierarchy; v2 "pids"
  kCpu,            // v1 cpu hierarchy (CFS quota); v2 "cpu"
  kCpuAccounting,  // v1 cpuacct hierarchy; v2 cpu.stat, there without any controller
};

// A limit the kernel shows as "max" (v2), -1 (v1 cpu.cfs_quota_us) or as the page-rounded
// LONG_MAX (v1 memory.limit_in_bytes).
inline constexpr uint64_t kNoLimit = UINT64_MAX;

struct CpuMax {
  uint64_t quota_usec = 0;  // kNoLimit: no quota
  uint64_t period_usec = 0;
};

class CgroupReader {
 public:
  // One cgroup's directories, a session's or a caller's (e.g. from session_cgroup_dirs()):
  // several on v1, one on v2.
  explicit CgroupReader(std::vector<std::string> dirs);

  // v2: the directory has cgroup.controllers (no v1 directory does).
  bool unified() const { return unified_; }

  // Empty when every controller of `wanted` is there; else a line naming the first missing
  // one and the directories looked in, for GTEST_SKIP. Without directories, a test failure.
  std::string missing(std::initializer_list<CgroupController> wanted) const;

  // The directory holding the controller's files; "" when none does.
  std::string dir_of(CgroupController controller) const;

  std::optional<uint64_t> pids_max() const;           // pids.max (same file in both)
  std::optional<uint64_t> pids_current() const;       // pids.current
  std::optional<uint64_t> pids_limit_events() const;  // "max" in pids.events
  std::optional<uint64_t> memory_max() const;         // v2 memory.max, v1 memory.limit_in_bytes
  std::optional<uint64_t> memory_current() const;     // v2 memory.current, v1 memory.usage_in_bytes
  std::optional<CpuMax> cpu_max() const;  // v2 cpu.max, v1 cpu.cfs_quota_us + cpu.cfs_period_us
  std::optional<uint64_t> cpu_usage_usec() const;  // v2 cpu.stat usage_usec, v1 cpuacct.usage
  std::optional<uint64_t> cpu_throttled() const;   // "nr_throttled" in cpu.stat (both)

 private:
  // The whole file of `controller`'s directory; nullopt (and a test failure) when unreadable.
  std::optional<std::string> read(CgroupController controller, const std::string& file) const;
  std::optional<uint64_t> number(CgroupController controller, const std::string& file) const;
  std::optional<uint64_t> keyed(CgroupController controller, const std::string& file,
                                const std::string& key) const;

  std::vector<std::string> dirs_;
  bool unified_ = false;
};

}  // namespace pando::itest
