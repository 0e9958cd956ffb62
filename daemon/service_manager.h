// Service manager protocols spoken by the daemon: systemd socket activation
// (LISTEN_PID/LISTEN_FDS) and readiness notification ($NOTIFY_SOCKET). Both are
// implemented directly on the documented environment/datagram protocols so the
// daemon does not depend on libsystemd.
#pragma once

#include <optional>
#include <string_view>

namespace pando::daemon {

// Returns the listening socket passed by socket activation, or nullopt when the
// process was not socket-activated (no LISTEN_PID, or LISTEN_PID names another
// process, e.g. a parent that leaked its environment). The fd is always 3, is
// marked close-on-exec, and LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES are removed from
// the environment so no child can inherit them.
// Throws pando::Error (ERROR_INTERNAL) when activation variables are present for this
// process but malformed, when LISTEN_FDS is not exactly 1, or when fd 3 is not a
// listening AF_UNIX SOCK_STREAM socket.
std::optional<int> take_socket_activation_fd();

// Sends `state` (e.g. "READY=1", "STOPPING=1", "STATUS=...") as one datagram to
// the service manager's $NOTIFY_SOCKET (a filesystem path, or an abstract name
// written with a leading '@'). Does nothing when $NOTIFY_SOCKET is unset.
// Throws pando::Error (ERROR_INTERNAL) when the variable is malformed or the send fails.
void notify(std::string_view state);

}  // namespace pando::daemon
