#include "proto/session_protocol.h"

#include <algorithm>
#include <csignal>
#include <string>

#include "proto/error.h"

namespace pando::wire {

namespace v1 = pando::helper::v1;

namespace {

enum class Meaning : uint8_t {
  kLaunch,
  kSelftest,
  kStatusRequest,
  kStdinData,
  kStdinEof,
  kSignal,
  kAccepted,
  kRejected,
  kStatus,
  kOutputData,
  kExit,
};

}  // namespace

// A frame allowed in a state. Any frame type without a row for the current
// state is refused: ERROR_DUPLICATE_REQUEST when it is a once-only request
// and a request was already taken, ERROR_UNEXPECTED_FRAME otherwise.
struct FrameRule {
  SessionState state;
  uint8_t type;
  const char* name;      // for messages
  uint32_t min_payload;  // below: ERROR_MALFORMED_REQUEST
  uint32_t max_payload;  // above: ERROR_FRAME_TOO_LARGE (ERROR_MALFORMED_REQUEST when 0)
  bool once_only;        // the connection's one request
  bool with_fds;         // fds may come with its header (direct stdio)
  bool framed_stdin;     // only when the relay carries stdin (no direct stdio; no data after EOF)
  Meaning meaning;
  SessionState next;  // once the whole frame is in
};

namespace {

using S = SessionState;
using M = Meaning;

// What the daemon reads from a client.
constexpr FrameRule kClientFrames[] = {
    {S::kRequest, v1::FRAME_LAUNCH_REQUEST, "launch request", 0, kMaxControlPayload, true, true,
     false, M::kLaunch, S::kResolving},
    {S::kRequest, v1::FRAME_SELFTEST_REQUEST, "selftest request", 0, kMaxControlPayload, true,
     false, false, M::kSelftest, S::kResolving},
    {S::kRequest, v1::FRAME_STATUS_REQUEST, "status request", 0, kMaxControlPayload, false, false,
     false, M::kStatusRequest, S::kResolving},
    {S::kRunning, v1::FRAME_STDIN_DATA, "stdin data", 0, kMaxDataPayload, false, false, true,
     M::kStdinData, S::kRunning},
    {S::kRunning, v1::FRAME_STDIN_EOF, "stdin EOF", 0, 0, false, false, true, M::kStdinEof,
     S::kRunning},
    {S::kRunning, v1::FRAME_SIGNAL, "signal", 1, kMaxControlPayload, false, false, false,
     M::kSignal, S::kRunning},
};

// What the client reads from the daemon.
constexpr FrameRule kDaemonFrames[] = {
    {S::kRequest, v1::FRAME_ACCEPTED, "accepted", 0, kMaxControlPayload, false, false, false,
     M::kAccepted, S::kRunning},
    {S::kRequest, v1::FRAME_REJECTED, "rejected", 0, kMaxControlPayload, false, false, false,
     M::kRejected, S::kClosed},
    {S::kRequest, v1::FRAME_STATUS, "status", 0, kMaxControlPayload, false, false, false,
     M::kStatus, S::kClosed},
    {S::kRunning, v1::FRAME_STDOUT_DATA, "stdout data", 0, kMaxDataPayload, false, false, false,
     M::kOutputData, S::kRunning},
    {S::kRunning, v1::FRAME_STDERR_DATA, "stderr data", 0, kMaxDataPayload, false, false, false,
     M::kOutputData, S::kRunning},
    {S::kRunning, v1::FRAME_EXIT, "exit", 0, kMaxControlPayload, false, false, false, M::kExit,
     S::kClosed},
    {S::kRunning, v1::FRAME_REJECTED, "rejected", 0, kMaxControlPayload, false, false, false,
     M::kRejected, S::kClosed},
};

std::span<const FrameRule> rules_for(Sender sender) {
  if (sender == Sender::kClient) return kClientFrames;
  return kDaemonFrames;
}

const FrameRule* find_rule(Sender sender, SessionState state, uint8_t type) {
  for (const FrameRule& rule : rules_for(sender)) {
    if (rule.state == state && rule.type == type) return &rule;
  }
  return nullptr;
}

bool is_once_only(Sender sender, uint8_t type) {
  const auto rules = rules_for(sender);
  return std::any_of(rules.begin(), rules.end(),
                     [type](const FrameRule& rule) { return rule.type == type && rule.once_only; });
}

int signal_number(v1::Signal signal) {
  switch (signal) {
    case v1::SIGNAL_INT:
      return SIGINT;
    case v1::SIGNAL_TERM:
      return SIGTERM;
    case v1::SIGNAL_HUP:
      return SIGHUP;
    default:
      return 0;
  }
}

template <typename Message>
bool parse(Message& message, const std::vector<uint8_t>& payload) {
  return message.ParseFromArray(payload.data(), static_cast<int>(payload.size()));
}

// A whole control frame's payload, by what its row says it means; a Reject
// when it does not parse. The daemon's answers are shown as they come.
Action decode_control(Meaning meaning, const std::vector<uint8_t>& payload) {
  const auto malformed = [](std::string message) {
    return action::Reject{v1::ERROR_MALFORMED_REQUEST, std::move(message)};
  };
  switch (meaning) {
    case Meaning::kLaunch:
    case Meaning::kSelftest:
      try {
        const bool selftest = meaning == Meaning::kSelftest;
        return action::StartLaunch{
            selftest ? validate_selftest_request(payload) : validate_launch_request(payload),
            selftest};
      } catch (const Error& e) {
        // The validator's refusal is this core's verdict, like any other.
        return action::Reject{e.code(), e.what()};
      }
    case Meaning::kStatusRequest: {
      v1::StatusRequest request;
      if (!parse(request, payload)) return malformed("status request does not parse");
      return action::StatusQuery{request.project_root()};
    }
    case Meaning::kStdinEof:
      return action::StdinEof{};
    case Meaning::kSignal: {
      v1::SignalRequest request;
      const int signo = parse(request, payload) ? signal_number(request.signal()) : 0;
      if (signo == 0) return malformed("unknown signal in signal frame");
      return action::SignalRole{signo};
    }
    case Meaning::kAccepted: {
      action::Accepted accepted;
      parse(accepted.accepted, payload);
      return accepted;
    }
    case Meaning::kRejected: {
      action::Refused refused;
      parse(refused.rejected, payload);
      return refused;
    }
    case Meaning::kStatus: {
      action::StatusReply reply;
      if (!parse(reply.status, payload)) return malformed("the daemon sent an unreadable status");
      return reply;
    }
    case Meaning::kExit: {
      action::Exited exited;
      if (!parse(exited.exit, payload))
        return malformed("the daemon sent an unreadable exit status");
      return exited;
    }
    case Meaning::kStdinData:
    case Meaning::kOutputData:
      break;
  }
  return action::Reject{v1::ERROR_INTERNAL, "a data frame has no control payload"};
}

}  // namespace

SessionProtocol::SessionProtocol(Sender sender)
    : sender_(sender),
      state_(sender == Sender::kClient ? SessionState::kPreface : SessionState::kRequest) {}

size_t SessionProtocol::want() const {
  if (data_left_ > 0) return 0;
  switch (state_) {
    case SessionState::kPreface:
      return preface_.size() - preface_have_;
    case SessionState::kRequest:
    case SessionState::kRunning:
      if (rule_ != nullptr) return payload_length_ - payload_.size();
      return header_.size() - header_have_;
    case SessionState::kResolving:
    case SessionState::kStarting:
    case SessionState::kClosed:
      return 0;
  }
  return 0;
}

bool SessionProtocol::at_frame_start() const {
  const bool reads_frames = state_ == SessionState::kRequest || state_ == SessionState::kRunning;
  return reads_frames && rule_ == nullptr && header_have_ == 0 && data_left_ == 0;
}

void SessionProtocol::passed(uint32_t n) { data_left_ -= std::min(n, data_left_); }

void SessionProtocol::starting() {
  if (state_ == SessionState::kResolving) state_ = SessionState::kStarting;
}

void SessionProtocol::running(bool direct_stdio) {
  if (state_ != SessionState::kStarting) return;
  state_ = SessionState::kRunning;
  direct_stdio_ = direct_stdio;
}

Action SessionProtocol::reject(v1::ErrorCode code, std::string message) {
  state_ = SessionState::kClosed;
  rule_ = nullptr;
  return action::Reject{code, std::move(message)};
}

Action SessionProtocol::feed(std::span<const uint8_t> bytes, bool with_fds) {
  const size_t wanted = want();
  if (bytes.empty() || bytes.size() > wanted) {
    return reject(v1::ERROR_INTERNAL, std::to_string(bytes.size()) + " bytes fed where " +
                                          std::to_string(wanted) + " were due");
  }
  // Fds count only when one message brings a whole header: a connection
  // never holds more than one request's fds, and none slip in with other bytes.
  if (with_fds && !(at_frame_start() && bytes.size() == kHeaderSize)) {
    return reject(v1::ERROR_BAD_STDIO_FDS,
                  "file descriptors may only come with the request header, in one message");
  }
  if (state_ == SessionState::kPreface) {
    std::copy(bytes.begin(), bytes.end(), preface_.begin() + static_cast<ptrdiff_t>(preface_have_));
    preface_have_ += bytes.size();
    if (preface_have_ < preface_.size()) return action::NeedMore{};
    switch (check_preface(preface_)) {
      case PrefaceCheck::kBadMagic:
        return reject(v1::ERROR_BAD_PREFACE, "this is not a pando-helper client (bad preface)");
      case PrefaceCheck::kUnsupportedVersion:
        return reject(v1::ERROR_UNSUPPORTED_VERSION,
                      "protocol version not supported; this daemon speaks version " +
                          std::to_string(kProtocolVersion));
      case PrefaceCheck::kOk:
        state_ = SessionState::kRequest;
        return action::NeedMore{};
    }
  }
  if (rule_ != nullptr) {
    payload_.insert(payload_.end(), bytes.begin(), bytes.end());
    return payload_.size() < payload_length_ ? Action{action::NeedMore{}} : on_payload();
  }
  std::copy(bytes.begin(), bytes.end(), header_.begin() + static_cast<ptrdiff_t>(header_have_));
  header_have_ += bytes.size();
  if (header_have_ < header_.size()) return action::NeedMore{};
  header_have_ = 0;
  return on_header(with_fds);
}

Action SessionProtocol::on_header(bool with_fds) {
  const FrameHeader header = decode_header(header_);
  const FrameRule* rule = find_rule(sender_, state_, header.type);
  if (rule == nullptr) {
    if (request_seen_ && is_once_only(sender_, header.type)) {
      return reject(v1::ERROR_DUPLICATE_REQUEST, "a second launch request on one connection");
    }
    return reject(
        v1::ERROR_UNEXPECTED_FRAME,
        state_ == SessionState::kRunning
            ? "frame type " + std::to_string(header.type) + " is not allowed during a session"
            : "expected a launch request, got frame type " + std::to_string(header.type));
  }
  if (with_fds && !rule->with_fds) {
    return reject(v1::ERROR_BAD_STDIO_FDS,
                  std::string("a ") + rule->name + " takes no file descriptors");
  }
  if (rule->framed_stdin && direct_stdio_) {
    return reject(v1::ERROR_UNEXPECTED_FRAME,
                  std::string(rule->name) + " on a session with direct stdio");
  }
  if (header.length > rule->max_payload) {
    if (rule->max_payload == 0) {
      return reject(v1::ERROR_MALFORMED_REQUEST, std::string(rule->name) + " frame with a payload");
    }
    return reject(v1::ERROR_FRAME_TOO_LARGE, "frame of " + std::to_string(header.length) +
                                                 " bytes is over the " +
                                                 std::to_string(rule->max_payload) + " byte cap");
  }
  if (header.length < rule->min_payload) {
    return reject(v1::ERROR_MALFORMED_REQUEST, std::string("empty ") + rule->name + " frame");
  }
  if (rule->framed_stdin && stdin_closed_ && rule->meaning == Meaning::kStdinData) {
    return reject(v1::ERROR_UNEXPECTED_FRAME, "stdin data after stdin EOF");
  }
  if (rule->once_only) request_seen_ = true;
  if (rule->meaning == Meaning::kStdinData || rule->meaning == Meaning::kOutputData) {
    data_left_ = header.length;
    if (header.length == 0) return action::NeedMore{};
    return action::Data{static_cast<v1::FrameType>(header.type), header.length};
  }
  rule_ = rule;
  payload_length_ = header.length;
  payload_.clear();
  payload_.reserve(header.length);
  if (header.length == 0) return on_payload();
  return action::NeedMore{};
}

Action SessionProtocol::on_payload() {
  const FrameRule& rule = *rule_;
  rule_ = nullptr;
  state_ = rule.next;
  if (rule.meaning == Meaning::kStdinEof) stdin_closed_ = true;
  Action action = decode_control(rule.meaning, payload_);
  if (std::holds_alternative<action::Reject>(action)) state_ = SessionState::kClosed;
  return action;
}

}  // namespace pando::wire
