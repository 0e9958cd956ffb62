#include <optional>
#include <string>

#include "daemon/daemon.h"
#include "daemon/sandbox/landlock.h"
#include "daemon/sandbox/namespaces.h"
#include "daemon/sandbox/seccomp.h"

namespace pando::daemon {

namespace v1 = pando::helper::v1;

// `security status`: the daemon's own layers, each with the detail that says what this host
// gives it; a project's idmap support is the session's to add.
v1::Status Daemon::status() const {
  v1::Status status;
  status.set_version(PANDO_VERSION);
  status.set_live_sessions(live_sessions_);
  auto add = [&status](const std::string& name, bool available, const std::string& detail) {
    auto* layer = status.add_layers();
    layer->set_name(name);
    layer->set_available(available);
    layer->set_detail(detail);
  };
  // Namespaces whose calls the environment refuses say why: a filter, or the kernel. (A filter
  // that refuses seccomp() stops the daemon at start, saying so: see compile_rules().)
  const std::optional<std::string> no_ns = sandbox::namespaces_refused();
  add("namespaces", !no_ns,
      no_ns ? "unavailable: " + *no_ns
            : "mount, pid, net, ipc, uts, cgroup (new for every session)");
  add("seccomp", true, sandbox::seccomp_status_detail());
  const int abi = sandbox::landlock_abi_version();
  add("landlock", abi > 0, sandbox::landlock_status_detail());
  add("cgroups", cgroups_->mode() != CgroupMode::kNone, cgroups_->detail());
  add("project_index", project_watch_->fanotify_fd() >= 0, project_watch_->mode(-1));
  add("git_exits", git_query_->available(), git_query_->status_detail());
  return status;
}

}  // namespace pando::daemon
