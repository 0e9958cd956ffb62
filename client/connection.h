#pragma once

// The client's side of the wire protocol: connect, handshake, blocking frame
// reads used before the relay starts.

#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "proto/framing.h"

namespace pando::client {

// Exit codes of `pando-helper` itself (the child's own code is passed through).
inline constexpr int kExitUsage = 64;        // bad command line
inline constexpr int kExitUnavailable = 69;  // the daemon is not reachable
inline constexpr int kExitProtocol = 76;     // the connection broke or the daemon spoke nonsense
inline constexpr int kExitRejected = 77;     // the daemon refused the request
inline constexpr int kExitSoftware = 70;     // a local failure of the client

inline constexpr const char* kDefaultSocket = "/run/pando/helper.sock";

// --socket, else $PANDO_HELPER_SOCKET, else the default.
std::string socket_path(const std::optional<std::string>& flag);

// Connects and sends the preface. Returns an invalid fd and sets `error` when
// it cannot connect; a preface the daemon did not take shows in the answer.
UniqueFd connect_daemon(const std::string& path, std::string& error);

bool send_all(int fd, const void* data, size_t size);

// Reads one whole frame (blocking). nullopt on EOF, error or a frame over its cap.
std::optional<wire::FrameDecoder::Frame> read_frame(int fd);

// One line telling a person how to start the daemon.
std::string start_hint(const std::string& path);
// For a daemon that closed the connection before answering: under socket
// activation that is a daemon that could not start.
std::string no_answer_hint();

}  // namespace pando::client
