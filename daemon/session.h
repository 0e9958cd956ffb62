#pragma once

// One client connection: the I/O of its handshake, launch, stdio relay and
// teardown. What the client may send when, and what it means, is decided by
// the protocol core (proto/session_protocol.h), whose state this follows;
// the session reads exactly the bytes the core wants, splices stdin data
// itself, and turns the core's verdicts into Rejected frames. A silent client
// past the handshake timeout is refused here.

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/asio.h"
#include "common/unique_fd.h"
#include "daemon/cgroups.h"
#include "daemon/launch.h"
#include "daemon/launch_pipeline.h"
#include "daemon/peer_identity.h"
#include "proto/framing.h"
#include "proto/helper.pb.h"
#include "proto/request_validation.h"
#include "proto/sandbox.pb.h"
#include "proto/session_protocol.h"

namespace pando::daemon {

class Daemon;

class Session : public std::enable_shared_from_this<Session> {
 public:
  using Socket = boost::asio::local::stream_protocol::socket;
  using Descriptor = boost::asio::posix::stream_descriptor;

  Session(Daemon& daemon, Socket socket, PeerIdentity peer, std::string id);

  // Call once the daemon counted the connection as pending (add_pending): the
  // session gives that slot back when it is launched or closed.
  void start();
  // Daemon shutdown: handshakes are refused, live sessions are killed and end
  // with an Exit saying so.
  void shut_down();
  // Answers with a Rejected frame and closes (mid-session: kills the sandbox).
  void reject(pando::helper::v1::ErrorCode code, const std::string& message);
  const std::string& id() const { return id_; }
  bool launched() const { return launched_; }

 private:
  using State = wire::SessionState;
  // How long a launcher may take to set up, and the reading of the project in the walk window.
  static constexpr std::chrono::seconds kSetupTimeout{30};
  // How long the reading of a project before the walk window may take (a first launch reads
  // it whole there).
  static constexpr std::chrono::seconds kIndexTimeout{300};
  // What moving stdin data came to.
  enum class Step { kContinue, kWaitClient, kWaitPipe, kGone };

  struct OutputPipe {
    explicit OutputPipe(boost::asio::io_context& io) : descriptor(io) {}
    Descriptor descriptor;
    pando::helper::v1::FrameType frame_type = pando::helper::v1::FRAME_STDOUT_DATA;
    bool eof = false;
    bool waiting = false;
    bool backlog = false;  // the last read filled a whole frame: more is likely queued
  };

  State state() const { return protocol_.state(); }

  // Handshake.
  void wait_readable();
  void receive_request();
  // Runs `work`; a pando::Error (or another exception) it throws rejects the request.
  void guarded(const std::function<void()>& work);
  void handle_launch_request(const wire::ValidRequest& request, bool selftest);
  void handle_status_request(const std::string& root);
  void send_status(const pando::helper::v1::Status& status);
  // Hands `work` (the part that touches the caller's files) to a thread of its
  // own with this connection's pending slot (or a new one, for a later step);
  // `done` runs on the event loop, only while the session still waits for it.
  // Past `timeout` `timed_out` runs instead.
  // Throws when no thread can be started or the caller has too much pending.
  void resolve_off_loop(std::function<void()> work, std::function<void()> done,
                        std::function<void()> timed_out, std::chrono::milliseconds timeout);

  // Launch. What a launch's thread hands back to the event loop: the prepared launch, or what
  // it threw, rethrown on the loop (a thread's work must not throw).
  struct Prepared {
    PreparedLaunch launch;
    std::exception_ptr error;
  };
  void on_launch_prepared(std::shared_ptr<Prepared> prepared);
  // Steps 10's reading of the project (session_walk.cc): brought up to date before the walk
  // window where the project is indexed, then read again inside it.
  void index_before_window(std::shared_ptr<Prepared> prepared);
  void find_exits_in_window(std::shared_ptr<Prepared> prepared);
  void launch_prepared(std::shared_ptr<Prepared> prepared);
  void watch_launcher();
  void wait_for_control();
  void handle_control_events();
  void handle_sandbox_event(const pando::helper::sandbox::v1::SandboxEvent& event);
  void begin_running();

  // Walk windows (session_walk.cc): while this session's launcher walks the project for secret
  // files, no other session of the caller that could write the project runs.
  bool writes_project() const { return role_ == "workspace"; }
  bool shares_project_with(const Session& other) const;
  bool may_write_during_walk() const;
  // False (logged) where the host gives this session no freezer; throws pando::Error when
  // freezing fails.
  bool pause_for_walk(const Session& walker);
  void resume_after_walk() noexcept;
  // Throws pando::Error naming the session that could not be paused.
  void open_walk_window();
  void close_walk_window() noexcept;
  // Throws pando::Error when this session cannot be paused for another walk.
  void wait_for_other_walks();

  // Relay (session_relay.cc): client -> child stdin.
  void pump_input();
  Step pass_stdin_data(int sock);
  template <typename Waitable, typename WaitType>
  void wait_input(Waitable& waitable, WaitType what);
  void close_stdin();
  void watch_hangup();

  // Relay: child stdout/stderr -> client.
  void pump_output();
  bool start_output_frame(OutputPipe& pipe);
  void wait_output_pipe(OutputPipe& pipe);
  void wait_socket_writable();
  void queue_frame(pando::helper::v1::FrameType type, const google::protobuf::MessageLite& msg);

  // End of session.
  void on_sandbox_exited();
  void kill_sandbox();
  void client_gone(const char* why);
  void maybe_finish();
  bool only_exiting_launcher_left() const;
  void send_exit();
  pando::helper::v1::Exit build_exit(const SessionUsage& usage) const;
  void log_session_end(const pando::helper::v1::Exit& exit, const SessionUsage& usage,
                       std::string_view reason) const;
  void close();

  Daemon& daemon_;
  Socket socket_;
  PeerIdentity peer_;
  std::string id_;
  wire::SessionProtocol protocol_{wire::Sender::kClient};
  boost::asio::steady_timer handshake_timer_;
  std::chrono::steady_clock::time_point started_at_;

  bool pending_ = false;  // holds one of the daemon's pending slots (add_pending)
  // fds attached to the request (direct stdio); more than this is refused.
  static constexpr size_t kMaxPassedFds = 4;
  std::vector<UniqueFd> passed_fds_;
  std::optional<DirectStdio> direct_;
  bool direct_stdio_ = false;

  // Launch results.
  bool launched_ = false;
  bool accepted_ = false;
  bool reserved_ = false;
  std::string role_;
  std::string project_root_;
  LaunchedSandbox launch_;
  Descriptor control_;
  Descriptor pidfd_;
  Descriptor stdin_;
  OutputPipe stdout_;
  OutputPipe stderr_;
  bool sandbox_reaped_ = false;
  bool walk_window_open_ = false;
  unsigned walk_pauses_ = 0;  // open walk windows of other sessions that paused this one
  std::vector<std::weak_ptr<Session>> paused_for_walk_;  // by this session's walk window
  std::optional<pando::helper::sandbox::v1::SandboxEvent::RoleExited> role_exit_;
  pando::helper::v1::EndReason end_reason_ = pando::helper::v1::END_CHILD_EXITED;
  std::string end_message_;

  // Input relay state.
  bool in_waiting_ = false;
  bool hangup_watch_ = false;

  // Output relay state.
  std::vector<uint8_t> out_pending_;
  // Output is read through this buffer one frame at a time; when a read fills
  // it, the backlog is spliced from the pipe into the socket instead.
  static constexpr size_t kCopyFrameBytes = 16 * 1024;
  std::array<uint8_t, kCopyFrameBytes> copy_buffer_{};
  size_t out_sent_ = 0;
  uint32_t out_splice_remaining_ = 0;
  OutputPipe* out_splice_pipe_ = nullptr;
  bool prefer_stderr_ = false;
  bool out_waiting_ = false;
  std::optional<pando::helper::v1::Exit> sent_exit_;  // queued for the client; close() logs it
  bool finished_ = false;
  bool client_gone_ = false;
};

}  // namespace pando::daemon
