// A running session over the framed relay, driven byte by byte as a client could: the signal
// frames reach the role as their signals, and every frame the protocol does not allow once a
// session runs ends it with a Rejected frame naming its ErrorCode, after which nothing of the
// session is left and the daemon goes on serving.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace pando::itest {
namespace {

namespace v1 = pando::helper::v1;
using namespace std::chrono_literals;

std::string frame(v1::FrameType type, const std::string& payload) {
  const auto header = wire::encode_header(type, static_cast<uint32_t>(payload.size()));
  return std::string(header.begin(), header.end()) + payload;
}

std::string signal_frame(int value) {
  v1::SignalRequest request;
  request.set_signal(static_cast<v1::Signal>(value));
  return frame(v1::FRAME_SIGNAL, request.SerializeAsString());
}

class SessionProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
    daemon_ = std::make_unique<Daemon>();
    project_ = daemon_->dir().make_dir("proj", caller());
  }

  // A framed session (no fds attached) whose role is `sleep` as the workspace user, once it has
  // said so on stdout.
  std::unique_ptr<RawClient> start_sleeping_role() {
    auto client = std::make_unique<RawClient>(daemon_->socket_path(), caller());
    EXPECT_TRUE(client->send_preface());
    EXPECT_TRUE(client->send_frame(v1::FRAME_LAUNCH_REQUEST,
                                   client->launch_request(v1::ROLE_WORKSPACE, project_)));
    const auto accepted = client->read_frame(30s);
    EXPECT_TRUE(accepted && accepted->type == v1::FRAME_ACCEPTED) << daemon_->log();
    EXPECT_TRUE(client->send_frame(v1::FRAME_STDIN_DATA, "echo ready; exec sleep 1000\n"));
    const auto ready = client->read_until(v1::FRAME_STDOUT_DATA, 30s);
    EXPECT_TRUE(ready) << daemon_->log();
    if (ready) {
      EXPECT_EQ(std::string(ready->payload.begin(), ready->payload.end()), "ready\n");
    }
    return client;
  }

  bool nothing_of_the_session_left() {
    return eventually([] { return processes_of(workspace_user().uid).empty(); }, 20s);
  }

  std::unique_ptr<Daemon> daemon_;
  std::string project_;
};

TEST_F(SessionProtocolTest, SignalFramesReachTheRoleAsTheirSignals) {
  for (const auto& [value, signo] :
       {std::pair{v1::SIGNAL_TERM, SIGTERM}, {v1::SIGNAL_HUP, SIGHUP}, {v1::SIGNAL_INT, SIGINT}}) {
    auto client = start_sleeping_role();
    ASSERT_TRUE(client->send_bytes(signal_frame(value)));
    const auto exit_frame = client->read_until(v1::FRAME_EXIT, 30s);
    ASSERT_TRUE(exit_frame) << daemon_->log();
    v1::Exit exit;
    ASSERT_TRUE(exit.ParseFromArray(exit_frame->payload.data(),
                                    static_cast<int>(exit_frame->payload.size())));
    EXPECT_EQ(exit.status_case(), v1::Exit::kSignal) << value;
    EXPECT_EQ(exit.signal(), signo);
  }
  EXPECT_TRUE(nothing_of_the_session_left());
}

TEST_F(SessionProtocolTest, FramesNotAllowedMidSessionEndItWithTheirCode) {
  struct Case {
    std::string bytes;
    v1::ErrorCode code;
    std::string message;
  };
  const std::string second_launch = frame(
      v1::FRAME_LAUNCH_REQUEST,
      RawClient(daemon_->socket_path(), caller()).launch_request(v1::ROLE_WORKSPACE, project_));
  const auto oversized_header = wire::encode_header(v1::FRAME_STDIN_DATA, (1u << 20) + 1);
  const std::vector<Case> cases = {
      {frame(v1::FRAME_SIGNAL, ""), v1::ERROR_MALFORMED_REQUEST, "empty signal frame"},
      {signal_frame(9), v1::ERROR_MALFORMED_REQUEST, "unknown signal in signal frame"},
      {frame(v1::FRAME_SIGNAL, "\xff\xff"), v1::ERROR_MALFORMED_REQUEST,
       "unknown signal in signal frame"},
      {frame(v1::FRAME_STDIN_EOF, "x"), v1::ERROR_MALFORMED_REQUEST,
       "stdin EOF frame with a payload"},
      {frame(v1::FRAME_STDIN_EOF, "") + frame(v1::FRAME_STDIN_DATA, "more"),
       v1::ERROR_UNEXPECTED_FRAME, "stdin data after stdin EOF"},
      {second_launch, v1::ERROR_DUPLICATE_REQUEST, "a second launch request on one connection"},
      {frame(v1::FRAME_STATUS_REQUEST, ""), v1::ERROR_UNEXPECTED_FRAME,
       "frame type 5 is not allowed during a session"},
      {std::string(oversized_header.begin(), oversized_header.end()), v1::ERROR_FRAME_TOO_LARGE,
       "frame of 1048577 bytes is over the 1048576 byte cap"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    auto client = start_sleeping_role();
    ASSERT_TRUE(client->send_bytes(c.bytes));
    const v1::Rejected rejected = expect_rejected(*client, *daemon_);
    EXPECT_EQ(rejected.code(), c.code) << rejected.message();
    EXPECT_EQ(rejected.message(), c.message);
    EXPECT_TRUE(nothing_of_the_session_left());
  }

  // And everyone else is still served.
  RunOptions options;
  options.stdin_data = "echo still serving\n";
  const RunResult r = launch(*daemon_, caller(), "workspace", project_, options);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "still serving\n");
}

}  // namespace
}  // namespace pando::itest
