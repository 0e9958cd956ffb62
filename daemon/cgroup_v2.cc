// cgroup v2: one unified tree, one directory per session, its controllers enabled from the
// parent's cgroup.subtree_control. Delegated by systemd (Delegate=yes) or at <parent> of the
// root.

#include <fmt/format.h>
#include <sys/xattr.h>

#include <array>
#include <cerrno>
#include <cstdlib>

#include "daemon/cgroup_version.h"
#include "daemon/cgroups.h"
#include "proto/error.h"

namespace pando::daemon {

using namespace cgroup_fs;
using pando::helper::v1::ERROR_CGROUP_UNAVAILABLE;

namespace {

constexpr std::array<std::string_view, 3> kControllers = {"memory", "pids", "cpu"};

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
    } catch (const pando::Error& e) {
      if (first_error->empty()) *first_error = e.what();
    }
  }
  return enabled;
}

// cgroup v2 allows controllers in a subtree only when the parent holds no process, so
// everything the unit runs moves to its "daemon" leaf first. A process forking meanwhile can
// leave a new child behind, hence the rounds.
void move_unit_into_leaf(const std::string& unit_dir) {
  const std::string leaf = unit_dir + "/daemon";
  make_dir(leaf);
  for (int round = 0; round < 10; ++round) {
    std::vector<pid_t> pids = read_pids(unit_dir + "/cgroup.procs");
    if (pids.empty()) return;
    for (pid_t p : pids) {
      try {
        write_value(leaf + "/cgroup.procs", std::to_string(p));
      } catch (const pando::Error&) {
        if (exists(fmt::format("/proc/{}", p))) throw;
      }
    }
  }
}

// Where delegated sessions go: <unit>/sessions, with the controllers enabled down to it.
std::string set_up_delegated(const CgroupManager::UnifiedSetup& setup,
                             std::vector<std::string>* enabled, std::string* error) {
  auto unit = cgroup_text::delegated_unit(setup.own_path, true);
  if (!unit) {
    throw pando::Error(ERROR_CGROUP_UNAVAILABLE,
                       "cgroup " + setup.own_path + " is not a systemd unit's cgroup");
  }
  const std::string unit_dir = setup.mount_point + *unit;
  move_unit_into_leaf(unit_dir);
  *enabled = enable_controllers(unit_dir, *enabled, error);
  const std::string base = unit_dir + "/sessions";
  make_dir(base);
  *enabled = enable_controllers(base, *enabled, error);
  return base;
}

// Where sessions go without delegation: <mount>/<parent>, made and enabled part by part.
std::string set_up_at_parent(const CgroupManager::UnifiedSetup& setup,
                             std::vector<std::string>* enabled, std::string* error) {
  if (!cgroup_text::valid_parent(setup.parent)) {
    throw pando::Error(pando::helper::v1::ERROR_CONFIG_INVALID,
                       "cgroups.parent '" + setup.parent + "' " + cgroup_text::kValidParentRule);
  }
  std::string dir = setup.mount_point;
  for (const auto& part : split(setup.parent, '/')) {
    *enabled = enable_controllers(dir, *enabled, error);
    dir += "/" + part;
    make_dir(dir);
  }
  *enabled = enable_controllers(dir, *enabled, error);
  return dir;
}

class V2 final : public CgroupVersion {
 public:
  void write_limits(const Dir& d, uint64_t memory_max, uint32_t cpu_max_percent) const override {
    if (d.memory) {
      write_value(d.path + "/memory.max",
                  memory_max == 0 ? std::string("max") : std::to_string(memory_max));
    }
    if (d.cpu) write_value(d.path + "/cpu.max", cgroup_text::cpu_max_line(cpu_max_percent));
  }

  // An OOM kills the whole session (memory.oom.group), never a part of it.
  void write_session_extras(const Dir& d, const SessionLimits& limits) const override {
    if (!d.memory) return;
    if (exists(d.path + "/memory.swap.max")) {
      write_value(d.path + "/memory.swap.max", std::to_string(limits.swap_max_bytes));
    }
    write_value(d.path + "/memory.oom.group", "1");
  }

  // No memory.oom.group here: an OOM at the caller's limit takes the session it hits (whose
  // memory.oom.group is set), not every session of the caller.
  void prepare_caller(const Dir& d) const override {
    for (auto [enabled, controller] :
         {std::pair{d.memory, "+memory"}, std::pair{d.pids, "+pids"}, std::pair{d.cpu, "+cpu"}}) {
      if (enabled) write_value(d.path + "/cgroup.subtree_control", controller);
    }
  }

  bool populated(const Dir& d) const override {
    if (auto populated = read_keyed(d.path + "/cgroup.events", "populated")) return *populated != 0;
    return !read_pids(d.path + "/cgroup.procs").empty();
  }

  // cgroup.kill is there from Linux 5.14.
  std::optional<std::string> kill_file(const Dir& d) const override {
    if (!exists(d.path + "/cgroup.kill")) return std::nullopt;
    return d.path + "/cgroup.kill";
  }

  std::optional<Freezer> freezer(const Dir& d) const override {
    if (!exists(d.path + "/cgroup.freeze")) return std::nullopt;
    const std::string events = d.path + "/cgroup.events";
    return Freezer{d.path + "/cgroup.freeze", "1", "0",
                   [events] { return read_keyed(events, "frozen").value_or(0) == 1; }};
  }

  // cpu.stat's usage_usec is there without the cpu controller.
  void read_accounting(const Dir& d, bool limit_events_only, SessionUsage& u) const override {
    if (!limit_events_only) {
      if (auto v = read_keyed(d.path + "/cpu.stat", "usage_usec")) u.cpu_usage_usec = *v;
    }
    if (!d.memory) return;
    if (!limit_events_only) {
      if (auto v = read_u64(d.path + "/memory.peak")) u.memory_peak_bytes = *v;
    }
    if (auto text = read_if_exists(d.path + "/memory.events")) {
      uint64_t oom_kill = cgroup_text::keyed_value(*text, "oom_kill").value_or(0);
      uint64_t max = cgroup_text::keyed_value(*text, "max").value_or(0);
      uint64_t oom = cgroup_text::keyed_value(*text, "oom").value_or(0);
      u.oom_killed = oom_kill > 0;
      u.memory_limit_hit = oom_kill > 0 || max > 0 || oom > 0;
    }
  }

  bool memory_limit_reached(const Dir& d) const override {
    return read_keyed(d.path + "/memory.events", "oom").value_or(0) > 0;
  }

  // The .local files count this cgroup's own limit only (pids.events.local: Linux 6.12).
  std::pair<uint64_t, uint64_t> caller_limit_counters(const Dir& d) const override {
    uint64_t memory = 0;
    uint64_t pids = 0;
    if (d.memory) memory = read_keyed(d.path + "/memory.events.local", "oom").value_or(0);
    if (d.pids) pids = read_keyed(d.path + "/pids.events.local", "max").value_or(0);
    return {memory, pids};
  }
};

}  // namespace

const CgroupVersion& cgroup_v2() {
  static const V2 version;
  return version;
}

// ---------------------------------------------------------------------------------------------
// cgroup_text: what only v2 parses

namespace cgroup_text {

std::string cpu_max_line(uint32_t percent) {
  if (percent == 0) return fmt::format("max {}", kCpuPeriodUsec);
  return fmt::format("{} {}", uint64_t{percent} * kCpuPeriodUsec / 100, kCpuPeriodUsec);
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

}  // namespace cgroup_text

// ---------------------------------------------------------------------------------------------
// CgroupManager: v2 set-up

CgroupManager CgroupManager::set_up_unified(const UnifiedSetup& setup) {
  std::vector<std::string> enabled(kControllers.begin(), kControllers.end());
  std::string error;
  const std::string base = setup.delegated ? set_up_delegated(setup, &enabled, &error)
                                           : set_up_at_parent(setup, &enabled, &error);
  if (setup.require_controllers && (!contains(enabled, "memory") || !contains(enabled, "pids"))) {
    throw pando::Error(ERROR_CGROUP_UNAVAILABLE,
                       fmt::format("cannot enable memory and pids for {} (enabled: {}){}", base,
                                   enabled.empty() ? "none" : join(enabled, " "),
                                   error.empty() ? "" : "; " + error));
  }
  CgroupManager m;
  m.detail_ = fmt::format("{} at {}: {}", setup.delegated ? "v2 delegated" : "v2", base,
                          enabled.empty() ? "no controllers" : join(enabled, " "));
  m.parents_.push_back({.path = base,
                        .unified = true,
                        .memory = contains(enabled, "memory"),
                        .pids = contains(enabled, "pids"),
                        .cpu = contains(enabled, "cpu")});
  m.mode_ = CgroupMode::kUnified;
  return m;
}

// Delegation is ours when our cgroup is a unit's (or its "daemon" leaf) and systemd marked the
// unit delegated (xattr) or the environment says so (PANDO_CGROUP_DELEGATED=1, older systemd).
std::optional<CgroupManager> CgroupManager::detect_unified(const cgroup_text::Mount& mount,
                                                           const std::string& own_path,
                                                           const std::string& parent,
                                                           std::string* reason) {
  try {
    const char* env = std::getenv("PANDO_CGROUP_DELEGATED");
    bool marker = env != nullptr && std::string_view(env) == "1";
    std::optional<std::string> unit_dir;
    if (auto unit = cgroup_text::delegated_unit(own_path, true)) {
      unit_dir = cgroup_text::path_in_mount(mount, *unit);
      if (unit_dir && has_delegate_xattr(*unit_dir)) marker = true;
    }
    const bool delegated = marker && unit_dir.has_value();
    const std::string probe = delegated ? *unit_dir : mount.mount_point;
    const std::vector<std::string> offered = controllers_of(probe);
    if (!contains(offered, "memory") || !contains(offered, "pids")) {
      *reason = fmt::format("cgroup2 at {} offers no memory+pids ({})", probe,
                            offered.empty() ? "none" : join(offered, " "));
      return std::nullopt;
    }
    CgroupManager m = set_up_unified(
        {.mount_point = mount.mount_point,
         // Below the mount: the unit path with the mount stripped.
         .own_path = delegated ? unit_dir->substr(mount.mount_point.size()) : std::string("/"),
         .delegated = delegated,
         .parent = parent});
    // systemd owns the tree outside delegated units; sessions at its root work but break
    // its single-writer rule, so say so where the admin looks.
    if (!delegated && cgroup_text::delegated_unit(own_path, true)) {
      m.detail_ += " (unit " + own_path + " is not delegated: set Delegate=yes)";
    }
    return m;
  } catch (const pando::Error& e) {
    return none(std::string("cgroup v2 setup failed: ") + e.what());
  }
}

}  // namespace pando::daemon
