#pragma once

// The protocol of one connection, without any I/O: which frame is allowed in
// which state, its size cap and what it means, in one table per direction
// (session_protocol.cc). The daemon's Session and the client feed it the bytes
// they read and act on what it returns; the fuzz target drives it the same way.
//
// It never over-reads: want() says how many bytes the next feed() may take,
// never more than the rest of the current preface, header or control payload.
// A data frame's payload never enters it: feed() returns Data{length}, the
// caller moves those bytes itself (splice) and reports them with passed().

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "proto/framing.h"
#include "proto/helper.pb.h"
#include "proto/request_validation.h"

namespace pando::wire {

// In order. The daemon reads a preface and one request, reads nothing while
// the project is resolved and the launcher sets up, then reads stdin and
// signals. The client's decoder starts in kRequest (its request is sent, the
// daemon's answer is due) and reads the session's output in kRunning.
enum class SessionState : uint8_t { kPreface, kRequest, kResolving, kStarting, kRunning, kClosed };

// Who sent the bytes fed in.
enum class Sender : uint8_t { kClient, kDaemon };

namespace action {
struct NeedMore {};
// The peer broke the protocol: answer with a Rejected frame and close.
struct Reject {
  pando::helper::v1::ErrorCode code;
  std::string message;
};
// A data frame's header: `length` payload bytes follow, for the caller to move.
struct Data {
  pando::helper::v1::FrameType type;
  uint32_t length;
};
// Sent by the client.
struct StartLaunch {
  ValidRequest request;
  bool selftest;  // the daemon picks the program (a SelftestRequest)
};
struct StatusQuery {
  std::string project_root;  // empty: no project to check
};
struct StdinEof {};
struct SignalRole {
  int signo;
};
// Sent by the daemon.
struct Accepted {
  pando::helper::v1::Accepted accepted;
};
struct Refused {
  pando::helper::v1::Rejected rejected;
};
struct StatusReply {
  pando::helper::v1::Status status;
};
struct Exited {
  pando::helper::v1::Exit exit;
};
}  // namespace action

using Action = std::variant<action::NeedMore, action::Reject, action::Data, action::StartLaunch,
                            action::StatusQuery, action::StdinEof, action::SignalRole,
                            action::Accepted, action::Refused, action::StatusReply, action::Exited>;

struct FrameRule;  // one row of a direction's table

class SessionProtocol {
 public:
  // Decodes what `sender` sends: Sender::kClient on the daemon, kDaemon on the client.
  explicit SessionProtocol(Sender sender);

  SessionState state() const { return state_; }
  // Bytes the next feed() may take; 0 while the state takes none or a data
  // payload is still to be passed.
  size_t want() const;
  // At the first byte of a frame header: the only place the daemon takes fds.
  bool at_frame_start() const;
  // Remaining bytes of the current data frame's payload.
  uint32_t data_left() const { return data_left_; }

  // `bytes` holds 1..want() bytes; `with_fds`: fds came with them.
  Action feed(std::span<const uint8_t> bytes, bool with_fds = false);
  // `n` (1..data_left()) payload bytes of the current data frame were moved.
  void passed(uint32_t n);

  // What the daemon's I/O decides: the launcher runs its setup, the role runs
  // (with the caller's own pipes: no stdin frames), the connection is over.
  void starting();
  void running(bool direct_stdio);
  void close() { state_ = SessionState::kClosed; }

 private:
  Action on_header(bool with_fds);
  Action on_payload();
  Action reject(pando::helper::v1::ErrorCode code, std::string message);

  Sender sender_;
  SessionState state_;
  std::array<uint8_t, kPrefaceSize> preface_{};
  size_t preface_have_ = 0;
  std::array<uint8_t, kHeaderSize> header_{};
  size_t header_have_ = 0;
  const FrameRule* rule_ = nullptr;  // of the frame whose payload is being read
  uint32_t payload_length_ = 0;
  std::vector<uint8_t> payload_;  // control frames only
  uint32_t data_left_ = 0;
  bool request_seen_ = false;
  bool direct_stdio_ = false;
  bool stdin_closed_ = false;
};

}  // namespace pando::wire
