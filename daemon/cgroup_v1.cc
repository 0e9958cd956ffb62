// cgroup v1 (legacy and hybrid hosts): one hierarchy per controller, so one directory per
// session in each of the memory, pids, cpu, cpuacct and freezer hierarchies.

#include <fmt/format.h>

#include <algorithm>

#include "daemon/cgroup_version.h"
#include "daemon/cgroups.h"
#include "proto/error.h"

namespace pando::daemon {

using namespace cgroup_fs;

namespace {

class V1 final : public CgroupVersion {
 public:
  // v1 has no "max" to write: an unlimited memory or cpu limit stays as the kernel made it.
  void write_limits(const Dir& d, uint64_t memory_max, uint32_t cpu_max_percent) const override {
    if (d.memory && memory_max != 0) {
      write_value(d.path + "/memory.limit_in_bytes", std::to_string(memory_max));
    }
    if (d.cpu && cpu_max_percent != 0) {
      write_value(d.path + "/cpu.cfs_period_us", std::to_string(kCpuPeriodUsec));
      write_value(d.path + "/cpu.cfs_quota_us",
                  std::to_string(uint64_t{cpu_max_percent} * kCpuPeriodUsec / 100));
    }
  }

  // memsw bounds memory+swap and must not be below limit_in_bytes, so it goes second. It is
  // there only where swap accounting is.
  void write_session_extras(const Dir& d, const SessionLimits& limits) const override {
    if (d.memory && limits.memory_max_bytes != 0 &&
        exists(d.path + "/memory.memsw.limit_in_bytes")) {
      write_value(d.path + "/memory.memsw.limit_in_bytes",
                  std::to_string(limits.memory_max_bytes + limits.swap_max_bytes));
    }
  }

  // Every v1 directory carries its hierarchy's controller already.
  void prepare_caller(const Dir&) const override {}

  bool populated(const Dir& d) const override {
    return !read_pids(d.path + "/cgroup.procs").empty();
  }

  std::optional<std::string> kill_file(const Dir&) const override { return std::nullopt; }

  std::optional<Freezer> freezer(const Dir& d) const override {
    if (!d.freezer) return std::nullopt;
    const std::string file = d.path + "/freezer.state";
    return Freezer{file, "FROZEN", "THAWED",
                   [file] { return read_text(file).starts_with("FROZEN"); }};
  }

  void read_accounting(const Dir& d, bool limit_events_only, SessionUsage& u) const override {
    if (d.memory) {
      uint64_t oom_kill = read_keyed(d.path + "/memory.oom_control", "oom_kill").value_or(0);
      u.oom_killed = oom_kill > 0;
      if (!limit_events_only) {
        if (auto v = read_u64(d.path + "/memory.max_usage_in_bytes")) u.memory_peak_bytes = *v;
        u.memory_limit_hit = oom_kill > 0 || memory_limit_reached(d);
      }
    }
    if (d.cpuacct && !limit_events_only) {
      if (auto v = read_u64(d.path + "/cpuacct.usage")) u.cpu_usage_usec = *v / 1000;
    }
  }

  // A charge that failed at the limit; v1 counts no OOM per cgroup but in memory.oom_control.
  bool memory_limit_reached(const Dir& d) const override {
    return read_u64(d.path + "/memory.failcnt").value_or(0) > 0;
  }

  // v1 counts no fork refused at pids.max in the caller's own cgroup: the session's pids.peak
  // tells whose limit it was (SessionCgroup::attribute_to_caller).
  std::pair<uint64_t, uint64_t> caller_limit_counters(const Dir& d) const override {
    if (!d.memory) return {0, 0};
    return {read_u64(d.path + "/memory.failcnt").value_or(0), 0};
  }
};

}  // namespace

const CgroupVersion& cgroup_v1() {
  static const V1 version;
  return version;
}

// One directory per hierarchy that carries a controller we use; the same hierarchy mounted
// twice counts once.
CgroupManager CgroupManager::detect_legacy(const std::vector<cgroup_text::Mount>& mounts,
                                           const std::string& parent,
                                           const std::string& v2_reason) {
  const std::vector<std::string> wanted = {"memory", "pids", "cpu", "cpuacct", "freezer"};
  std::vector<SessionCgroup::Dir> parents;
  std::vector<std::string> found;
  for (const auto& m : mounts) {
    if (m.unified) continue;
    const SessionCgroup::Dir d{.path = m.mount_point,
                               .memory = contains(m.controllers, "memory"),
                               .pids = contains(m.controllers, "pids"),
                               .cpu = contains(m.controllers, "cpu"),
                               .cpuacct = contains(m.controllers, "cpuacct"),
                               .freezer = contains(m.controllers, "freezer")};
    const bool duplicate = std::any_of(parents.begin(), parents.end(), [&](const auto& p) {
      return (p.memory && d.memory) || (p.pids && d.pids) || (p.cpu && d.cpu) ||
             (p.cpuacct && d.cpuacct) || (p.freezer && d.freezer);
    });
    if (!(d.memory || d.pids || d.cpu || d.cpuacct || d.freezer) || duplicate) continue;
    for (const auto& c : m.controllers) {
      if (contains(wanted, c)) found.push_back(c);
    }
    parents.push_back(d);
  }
  std::vector<std::string> reasons;
  if (!v2_reason.empty()) reasons.push_back(v2_reason);
  if (!contains(found, "memory") || !contains(found, "pids")) {
    reasons.push_back(fmt::format("cgroup v1 has no memory+pids hierarchies (found: {})",
                                  found.empty() ? "none" : join(found, ",")));
    return none("no usable cgroup controllers: " + join(reasons, "; "));
  }
  try {
    for (auto& d : parents) {
      for (const auto& part : split(parent, '/')) {
        d.path += "/" + part;
        make_dir(d.path);
      }
    }
  } catch (const pando::Error& e) {
    return none(std::string("cgroup v1 setup failed: ") + e.what());
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

}  // namespace pando::daemon
