#pragma once

// The client's side of the wire protocol: connect, handshake, blocking frame
// reads used before the relay starts.

#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "proto/framing.h"
#include "proto/helper.pb.h"
#include "proto/session_protocol.h"

namespace pando::client {

// Exit codes of `pando-helper` itself (the child's own code is passed through).
inline constexpr int kExitUsage = 64;        // bad command line
inline constexpr int kExitUnavailable = 69;  // the daemon is not reachable
inline constexpr int kExitProtocol = 76;     // the connection broke or the daemon spoke nonsense
inline constexpr int kExitRejected = 77;     // the daemon refused the request
inline constexpr int kExitSoftware = 70;     // a local failure of the client
inline constexpr int kExitQuit = 128 + 3;    // SIGQUIT (^\) ended the client and its session

inline constexpr const char* kDefaultSocket = "/run/pando/helper.sock";

// --socket, else $PANDO_HELPER_SOCKET, else the default.
std::string socket_path(const std::optional<std::string>& flag);

// Connects and sends the preface. Returns an invalid fd and sets `error` when
// it cannot connect; a preface the daemon did not take shows in the answer.
UniqueFd connect_daemon(const std::string& path, std::string& error);

bool send_all(int fd, const void* data, size_t size);

// The daemon's next frame, decoded by `protocol` (the client's side of the
// same core the daemon uses): a control frame's action, or a data frame's
// with its bytes in `data`. A frame the protocol refuses comes back as
// action::Reject. Blocking; nullopt on end of file or a read error.
struct DaemonFrame {
  wire::Action action;
  std::vector<uint8_t> data;
};
std::optional<DaemonFrame> read_frame(int fd, wire::SessionProtocol& protocol);

// "pando-helper: <what> (<code>): <message>" on stderr; returns kExitRejected.
int print_rejection(const std::string& what, const pando::helper::v1::Rejected& rejected);

// One line telling a person how to start the daemon.
std::string start_hint(const std::string& path);
// For a daemon that closed the connection before answering: under socket
// activation that is a daemon that could not start.
std::string no_answer_hint();

}  // namespace pando::client
