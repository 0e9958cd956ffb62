#pragma once

namespace pando::sandbox {

// Runs in pando-helper-sandbox, which the daemon started with clone3() in new
// mount, pid, net, ipc and uts namespaces, before any request: sets the
// hostname and brings up the loopback interface of the private network
// namespace. Throws SetupError.
void set_up_namespaces();

// Once the daemon has moved the launcher into the session's cgroups: a new
// cgroup namespace, so the session's cgroup is its root. Throws SetupError.
void enter_cgroup_namespace();

}  // namespace pando::sandbox
