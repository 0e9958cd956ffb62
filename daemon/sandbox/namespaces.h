#pragma once

namespace pando::sandbox {

// Runs in pando-helper-sandbox, which the daemon started with clone3() in new
// mount, pid, net, ipc and uts namespaces and already placed in the session's
// cgroups. Enters a new cgroup namespace (so the session's cgroup is its root),
// sets the hostname and brings up the loopback interface of the private
// network namespace. Throws SetupError.
void finish_namespaces();

}  // namespace pando::sandbox
