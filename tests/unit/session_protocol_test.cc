#include "proto/session_protocol.h"

#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <vector>

namespace pando::wire {
namespace {

namespace v1 = pando::helper::v1;
using Bytes = std::vector<uint8_t>;

Bytes frame(uint8_t type, const Bytes& payload) {
  return encode_frame(static_cast<FrameType>(type), payload);
}

Bytes message(const google::protobuf::MessageLite& msg) {
  const std::string s = msg.SerializeAsString();
  return Bytes(s.begin(), s.end());
}

Bytes launch_payload() {
  v1::LaunchRequest request;
  request.set_role(v1::ROLE_CORE);
  request.set_project_root("/home/user/project");
  return message(request);
}

// A well-formed payload for every type, so that only the table decides.
Bytes valid_payload(uint8_t type) {
  switch (type) {
    case v1::FRAME_LAUNCH_REQUEST:
    case v1::FRAME_SELFTEST_REQUEST:
      return launch_payload();
    case v1::FRAME_STATUS_REQUEST:
    case v1::FRAME_STDIN_EOF:
      return {};
    case v1::FRAME_SIGNAL: {
      v1::SignalRequest request;
      request.set_signal(v1::SIGNAL_TERM);
      return message(request);
    }
    case v1::FRAME_EXIT: {
      v1::Exit exit;
      exit.set_exit_code(3);
      return message(exit);
    }
    case v1::FRAME_STATUS: {
      v1::Status status;
      status.set_version("1");
      return message(status);
    }
    default:
      return {'x'};
  }
}

// Feeds `bytes` in pieces of at most `piece` (and never more than want()),
// passing data payloads over as the session would. Stops at the first action
// that is not NeedMore/Data, or when the core wants nothing more.
struct Fed {
  std::vector<Action> actions;  // all but NeedMore
  size_t consumed = 0;
};
Fed feed(SessionProtocol& protocol, const Bytes& bytes, size_t piece = SIZE_MAX,
         bool fds_with_first = false) {
  Fed fed;
  while (fed.consumed < bytes.size()) {
    if (protocol.data_left() > 0) {
      const uint32_t n = static_cast<uint32_t>(
          std::min<size_t>({protocol.data_left(), piece, bytes.size() - fed.consumed}));
      protocol.passed(n);
      fed.consumed += n;
      continue;
    }
    const size_t want = protocol.want();
    if (want == 0) break;
    const size_t n = std::min({want, piece, bytes.size() - fed.consumed});
    const bool with_fds = fds_with_first && fed.consumed == 0;
    const Action action = protocol.feed(std::span(bytes.data() + fed.consumed, n), with_fds);
    fed.consumed += n;
    if (!std::holds_alternative<action::NeedMore>(action)) fed.actions.push_back(action);
  }
  return fed;
}

v1::ErrorCode reject_code(const Action& action) {
  const auto* reject = std::get_if<action::Reject>(&action);
  return reject == nullptr ? v1::ERROR_UNSPECIFIED : reject->code;
}

Bytes preface() {
  const auto p = make_preface();
  return Bytes(p.begin(), p.end());
}

// The daemon's core after the preface (kRequest), or in kRunning.
SessionProtocol daemon_side_requesting() {
  SessionProtocol protocol(Sender::kClient);
  EXPECT_TRUE(feed(protocol, preface()).actions.empty());
  EXPECT_EQ(protocol.state(), SessionState::kRequest);
  return protocol;
}

SessionProtocol daemon_side_running(bool direct_stdio) {
  SessionProtocol protocol = daemon_side_requesting();
  const Fed fed = feed(protocol, frame(v1::FRAME_LAUNCH_REQUEST, launch_payload()));
  EXPECT_EQ(fed.actions.size(), 1u);
  EXPECT_EQ(protocol.state(), SessionState::kResolving);
  EXPECT_EQ(protocol.want(), 0u);  // nothing is read while the project resolves
  protocol.starting();
  EXPECT_EQ(protocol.want(), 0u);  // nor while the launcher sets up
  protocol.running(direct_stdio);
  EXPECT_EQ(protocol.state(), SessionState::kRunning);
  return protocol;
}

SessionProtocol client_side_running() {
  SessionProtocol protocol(Sender::kDaemon);
  const Fed fed = feed(protocol, frame(v1::FRAME_ACCEPTED, valid_payload(v1::FRAME_ACCEPTED)));
  EXPECT_EQ(fed.actions.size(), 1u);
  EXPECT_EQ(protocol.state(), SessionState::kRunning);
  return protocol;
}

// The verdict on one well-formed frame of `type` fed to `protocol`: the
// action's index in Action, or the reject code.
struct Verdict {
  size_t action = 0;
  v1::ErrorCode code = v1::ERROR_UNSPECIFIED;
};
Verdict verdict(SessionProtocol protocol, uint8_t type) {
  const Fed fed = feed(protocol, frame(type, valid_payload(type)));
  if (fed.actions.empty()) return {};
  return {fed.actions.front().index(), reject_code(fed.actions.front())};
}

template <typename T>
size_t index_of() {
  return Action(T{}).index();
}

// Expected, written down independently of the table: every frame type in
// every state that reads frames.
Verdict expected_daemon_side(SessionState state, bool direct_stdio, uint8_t type) {
  const Verdict unexpected{index_of<action::Reject>(), v1::ERROR_UNEXPECTED_FRAME};
  if (state == SessionState::kRequest) {
    if (type == v1::FRAME_LAUNCH_REQUEST || type == v1::FRAME_SELFTEST_REQUEST) {
      return {index_of<action::StartLaunch>()};
    }
    if (type == v1::FRAME_STATUS_REQUEST) return {index_of<action::StatusQuery>()};
    return unexpected;
  }
  switch (type) {
    case v1::FRAME_LAUNCH_REQUEST:
    case v1::FRAME_SELFTEST_REQUEST:
      return {index_of<action::Reject>(), v1::ERROR_DUPLICATE_REQUEST};
    case v1::FRAME_STDIN_DATA:
      return direct_stdio ? unexpected : Verdict{index_of<action::Data>()};
    case v1::FRAME_STDIN_EOF:
      return direct_stdio ? unexpected : Verdict{index_of<action::StdinEof>()};
    case v1::FRAME_SIGNAL:
      return {index_of<action::SignalRole>()};
    default:
      return unexpected;
  }
}

Verdict expected_client_side(SessionState state, uint8_t type) {
  const Verdict unexpected{index_of<action::Reject>(), v1::ERROR_UNEXPECTED_FRAME};
  if (type == v1::FRAME_REJECTED) return {index_of<action::Refused>()};
  if (state == SessionState::kRequest) {
    if (type == v1::FRAME_ACCEPTED) return {index_of<action::Accepted>()};
    if (type == v1::FRAME_STATUS) return {index_of<action::StatusReply>()};
    return unexpected;
  }
  if (type == v1::FRAME_STDOUT_DATA || type == v1::FRAME_STDERR_DATA) {
    return {index_of<action::Data>()};
  }
  if (type == v1::FRAME_EXIT) return {index_of<action::Exited>()};
  return unexpected;
}

TEST(SessionProtocolTest, EveryFrameTypeInEveryDaemonState) {
  for (int type = 0; type < 256; ++type) {
    SCOPED_TRACE(type);
    const auto t = static_cast<uint8_t>(type);
    const Verdict request = verdict(daemon_side_requesting(), t);
    const Verdict want_request = expected_daemon_side(SessionState::kRequest, false, t);
    EXPECT_EQ(request.action, want_request.action);
    EXPECT_EQ(request.code, want_request.code);
    for (const bool direct : {false, true}) {
      const Verdict running = verdict(daemon_side_running(direct), t);
      const Verdict want_running = expected_daemon_side(SessionState::kRunning, direct, t);
      EXPECT_EQ(running.action, want_running.action) << direct;
      EXPECT_EQ(running.code, want_running.code) << direct;
    }
  }
}

TEST(SessionProtocolTest, EveryFrameTypeInEveryClientState) {
  for (int type = 0; type < 256; ++type) {
    SCOPED_TRACE(type);
    const auto t = static_cast<uint8_t>(type);
    const Verdict answer = verdict(SessionProtocol(Sender::kDaemon), t);
    const Verdict want_answer = expected_client_side(SessionState::kRequest, t);
    EXPECT_EQ(answer.action, want_answer.action);
    EXPECT_EQ(answer.code, want_answer.code);
    const Verdict running = verdict(client_side_running(), t);
    const Verdict want_running = expected_client_side(SessionState::kRunning, t);
    EXPECT_EQ(running.action, want_running.action);
    EXPECT_EQ(running.code, want_running.code);
  }
}

TEST(SessionProtocolTest, NothingIsReadOutsideTheReadingStates) {
  SessionProtocol protocol = daemon_side_running(false);
  protocol.close();
  EXPECT_EQ(protocol.want(), 0u);
  SessionProtocol status = daemon_side_requesting();
  const Fed fed = feed(status, frame(v1::FRAME_STATUS_REQUEST, {}));
  ASSERT_EQ(fed.actions.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<action::StatusQuery>(fed.actions[0]));
  EXPECT_EQ(status.want(), 0u);
}

TEST(SessionProtocolTest, Preface) {
  Bytes wrong = preface();
  wrong[0] = 'X';
  SessionProtocol bad_magic(Sender::kClient);
  EXPECT_EQ(reject_code(feed(bad_magic, wrong).actions.at(0)), v1::ERROR_BAD_PREFACE);
  EXPECT_EQ(bad_magic.state(), SessionState::kClosed);
  SessionProtocol old(Sender::kClient);
  const auto v2 = make_preface(2);
  EXPECT_EQ(reject_code(feed(old, Bytes(v2.begin(), v2.end())).actions.at(0)),
            v1::ERROR_UNSUPPORTED_VERSION);
}

TEST(SessionProtocolTest, CapsAreCheckedAtTheHeaderBeforeAnyPayload) {
  SessionProtocol request = daemon_side_requesting();
  const auto big = encode_header(v1::FRAME_LAUNCH_REQUEST, kMaxControlPayload + 1);
  const Fed fed = feed(request, Bytes(big.begin(), big.end()));
  EXPECT_EQ(reject_code(fed.actions.at(0)), v1::ERROR_FRAME_TOO_LARGE);

  SessionProtocol running = daemon_side_running(false);
  const auto data = encode_header(v1::FRAME_STDIN_DATA, kMaxDataPayload + 1);
  EXPECT_EQ(reject_code(feed(running, Bytes(data.begin(), data.end())).actions.at(0)),
            v1::ERROR_FRAME_TOO_LARGE);

  SessionProtocol at_cap = daemon_side_running(false);
  const auto full = encode_header(v1::FRAME_STDIN_DATA, kMaxDataPayload);
  const Fed ok = feed(at_cap, Bytes(full.begin(), full.end()));
  const auto* data_action = std::get_if<action::Data>(&ok.actions.at(0));
  ASSERT_NE(data_action, nullptr);
  EXPECT_EQ(data_action->length, kMaxDataPayload);
  EXPECT_EQ(at_cap.data_left(), kMaxDataPayload);
  EXPECT_EQ(at_cap.want(), 0u);  // the payload is the session's to move

  SessionProtocol signal = daemon_side_running(false);
  const auto big_signal = encode_header(v1::FRAME_SIGNAL, kMaxControlPayload + 1);
  EXPECT_EQ(reject_code(feed(signal, Bytes(big_signal.begin(), big_signal.end())).actions.at(0)),
            v1::ERROR_FRAME_TOO_LARGE);

  SessionProtocol client = client_side_running();
  const auto out = encode_header(v1::FRAME_STDOUT_DATA, kMaxDataPayload + 1);
  EXPECT_EQ(reject_code(feed(client, Bytes(out.begin(), out.end())).actions.at(0)),
            v1::ERROR_FRAME_TOO_LARGE);
}

TEST(SessionProtocolTest, MalformedControlFrames) {
  SessionProtocol eof = daemon_side_running(false);
  EXPECT_EQ(reject_code(feed(eof, frame(v1::FRAME_STDIN_EOF, {'x'})).actions.at(0)),
            v1::ERROR_MALFORMED_REQUEST);
  SessionProtocol empty_signal = daemon_side_running(false);
  EXPECT_EQ(reject_code(feed(empty_signal, frame(v1::FRAME_SIGNAL, {})).actions.at(0)),
            v1::ERROR_MALFORMED_REQUEST);
  v1::SignalRequest unknown;
  unknown.set_signal(static_cast<v1::Signal>(9));
  SessionProtocol bad_signal = daemon_side_running(false);
  EXPECT_EQ(reject_code(feed(bad_signal, frame(v1::FRAME_SIGNAL, message(unknown))).actions.at(0)),
            v1::ERROR_MALFORMED_REQUEST);
  SessionProtocol status = daemon_side_requesting();
  EXPECT_EQ(reject_code(feed(status, frame(v1::FRAME_STATUS_REQUEST, {0xff})).actions.at(0)),
            v1::ERROR_MALFORMED_REQUEST);
  SessionProtocol launch = daemon_side_requesting();
  EXPECT_EQ(reject_code(feed(launch, frame(v1::FRAME_LAUNCH_REQUEST, {})).actions.at(0)),
            v1::ERROR_UNKNOWN_ROLE);  // the request validator runs in the core
  SessionProtocol client = client_side_running();
  EXPECT_EQ(reject_code(feed(client, frame(v1::FRAME_EXIT, {0xff})).actions.at(0)),
            v1::ERROR_MALFORMED_REQUEST);
}

TEST(SessionProtocolTest, StdinEofEndsStdinDataOnly) {
  SessionProtocol protocol = daemon_side_running(false);
  Bytes stream = frame(v1::FRAME_STDIN_DATA, {'a', 'b'});
  for (const uint8_t b : frame(v1::FRAME_STDIN_EOF, {})) stream.push_back(b);
  for (const uint8_t b : frame(v1::FRAME_STDIN_EOF, {})) stream.push_back(b);
  for (const uint8_t b : frame(v1::FRAME_SIGNAL, valid_payload(v1::FRAME_SIGNAL))) {
    stream.push_back(b);
  }
  const Fed fed = feed(protocol, stream);
  ASSERT_EQ(fed.actions.size(), 4u);
  EXPECT_TRUE(std::holds_alternative<action::Data>(fed.actions[0]));
  EXPECT_TRUE(std::holds_alternative<action::StdinEof>(fed.actions[1]));
  EXPECT_TRUE(std::holds_alternative<action::StdinEof>(fed.actions[2]));
  EXPECT_EQ(std::get<action::SignalRole>(fed.actions[3]).signo, SIGTERM);
  EXPECT_EQ(reject_code(feed(protocol, frame(v1::FRAME_STDIN_DATA, {'c'})).actions.at(0)),
            v1::ERROR_UNEXPECTED_FRAME);
}

TEST(SessionProtocolTest, FdsOnlyWithAWholeLaunchRequestHeader) {
  SessionProtocol with_header = daemon_side_requesting();
  const Fed ok =
      feed(with_header, frame(v1::FRAME_LAUNCH_REQUEST, launch_payload()), SIZE_MAX, true);
  EXPECT_TRUE(std::holds_alternative<action::StartLaunch>(ok.actions.at(0)));

  SessionProtocol with_preface(Sender::kClient);
  EXPECT_EQ(reject_code(feed(with_preface, preface(), SIZE_MAX, true).actions.at(0)),
            v1::ERROR_BAD_STDIO_FDS);
  SessionProtocol partial = daemon_side_requesting();
  EXPECT_EQ(
      reject_code(
          feed(partial, frame(v1::FRAME_LAUNCH_REQUEST, launch_payload()), 3, true).actions.at(0)),
      v1::ERROR_BAD_STDIO_FDS);
  for (const uint8_t type : {v1::FRAME_STATUS_REQUEST, v1::FRAME_SELFTEST_REQUEST}) {
    SessionProtocol no_fds = daemon_side_requesting();
    EXPECT_EQ(
        reject_code(feed(no_fds, frame(type, valid_payload(type)), SIZE_MAX, true).actions.at(0)),
        v1::ERROR_BAD_STDIO_FDS)
        << int{type};
  }
}

TEST(SessionProtocolTest, NeverTakesMoreThanWanted) {
  SessionProtocol protocol = daemon_side_requesting();
  EXPECT_EQ(protocol.want(), kHeaderSize);
  const Action action = protocol.feed(Bytes(kHeaderSize + 1, 0));
  EXPECT_EQ(reject_code(action), v1::ERROR_INTERNAL);
  EXPECT_EQ(protocol.state(), SessionState::kClosed);
}

// Any split of a stream gives the same actions as reading it whole.
TEST(SessionProtocolTest, SplitPointsDoNotMatter) {
  Bytes stream = frame(v1::FRAME_STDIN_DATA, Bytes(1000, 'a'));
  for (const uint8_t b : frame(v1::FRAME_SIGNAL, valid_payload(v1::FRAME_SIGNAL))) {
    stream.push_back(b);
  }
  for (const uint8_t b : frame(v1::FRAME_STDIN_EOF, {})) stream.push_back(b);
  for (const size_t piece : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, SIZE_MAX}) {
    SessionProtocol protocol = daemon_side_running(false);
    const Fed fed = feed(protocol, stream, piece);
    ASSERT_EQ(fed.actions.size(), 3u) << piece;
    EXPECT_EQ(std::get<action::Data>(fed.actions[0]).length, 1000u);
    EXPECT_TRUE(std::holds_alternative<action::SignalRole>(fed.actions[1]));
    EXPECT_TRUE(std::holds_alternative<action::StdinEof>(fed.actions[2]));
    EXPECT_EQ(fed.consumed, stream.size());
  }
}

TEST(SessionProtocolTest, ClientSideReadsAnAnswerThenTheSession) {
  SessionProtocol protocol(Sender::kDaemon);
  v1::Accepted accepted;
  accepted.set_session_id("s1");
  Bytes stream = frame(v1::FRAME_ACCEPTED, message(accepted));
  for (const uint8_t b : frame(v1::FRAME_STDERR_DATA, {'e'})) stream.push_back(b);
  for (const uint8_t b : frame(v1::FRAME_EXIT, valid_payload(v1::FRAME_EXIT))) stream.push_back(b);
  const Fed fed = feed(protocol, stream, 2);
  ASSERT_EQ(fed.actions.size(), 3u);
  EXPECT_EQ(std::get<action::Accepted>(fed.actions[0]).accepted.session_id(), "s1");
  EXPECT_EQ(std::get<action::Data>(fed.actions[1]).type, v1::FRAME_STDERR_DATA);
  EXPECT_EQ(std::get<action::Exited>(fed.actions[2]).exit.exit_code(), 3);
  EXPECT_EQ(protocol.state(), SessionState::kClosed);
  EXPECT_EQ(protocol.want(), 0u);
}

}  // namespace
}  // namespace pando::wire
