#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace pando::sandbox {

// The session's host and domain name; the view's /etc/hostname and /etc/hosts say the same.
inline constexpr char kSandboxHostName[] = "pando-sandbox";

// The launcher template (daemon/sandbox/main.cc) starts each session's
// launcher as a copy of itself: fork semantics (copied memory, same stack, no
// exec), as PID 1 of new mount, pid, network, IPC and UTS namespaces, and as
// a child of the daemon (CLONE_PARENT), which reaps it. Its pidfd is stored in
// *pidfd. Returns 0 in the copy, its pid in the caller, -1 with errno set.
// Single-threaded callers only: the copy has the caller's one thread.
pid_t fork_into_new_namespaces(int* pidfd) noexcept;

// Why the environment refuses the calls that make a session's namespaces
// (clone3 in the template, unshare in the launcher): a seccomp filter of a
// container or service manager, or a kernel without them. nullopt when it
// does not; `security status` says which.
std::optional<std::string> namespaces_refused();

// Runs first in a launcher, before any request: sets the hostname and brings
// up the loopback interface of the private network namespace. Throws
// Error.
void set_up_namespaces();

// On cgroup v1, the launcher moves itself into the session's cgroups: "0"
// into each `tasks` file the daemon opened (SessionCgroup::attach_launcher),
// each closed afterwards. Throws Error.
void join_session_cgroups(std::vector<UniqueFd>& tasks_files);

// Once the launcher is in the session's cgroups: a new cgroup namespace, so
// the session's cgroup is its root. Throws Error.
void enter_cgroup_namespace();

}  // namespace pando::sandbox
