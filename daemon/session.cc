#include "daemon/session.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>

#include "common/accounts.h"
#include "common/fd_passing.h"
#include "common/json_log.h"
#include "daemon/daemon.h"
#include "daemon/project_root.h"
#include "proto/error.h"

namespace pando::daemon {

namespace asio = boost::asio;
namespace v1 = pando::helper::v1;
namespace sbv1 = pando::helper::sandbox::v1;

namespace {

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

}  // namespace

Session::Session(Daemon& daemon, Socket socket, PeerIdentity peer, std::string id)
    : daemon_(daemon),
      socket_(std::move(socket)),
      peer_(std::move(peer)),
      id_(std::move(id)),
      handshake_timer_(daemon.io()),
      started_at_(std::chrono::steady_clock::now()),
      control_(daemon.io()),
      pidfd_(daemon.io()),
      stdin_(daemon.io()),
      stdout_(daemon.io()),
      stderr_(daemon.io()) {
  stderr_.frame_type = v1::FRAME_STDERR_DATA;
}

void Session::start() {
  pending_ = true;
  socket_.non_blocking(true);
  handshake_timer_.expires_after(
      std::chrono::milliseconds(daemon_.config().handshake_timeout_ms()));
  handshake_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->state() == State::kClosed) return;
    if (self->state() == State::kPreface || self->state() == State::kRequest) {
      self->reject(v1::ERROR_HANDSHAKE_TIMEOUT, "no launch request within the handshake timeout");
    }
  });
  receive_request();
}

void Session::wait_readable() {
  socket_.async_wait(Socket::wait_read,
                     [self = shared_from_this()](const boost::system::error_code& ec) {
                       if (self->state() == State::kClosed) return;
                       if (ec) return self->close();
                       self->receive_request();
                     });
}

// Every handshake byte comes through recvmsg() with room for fds, so none
// slip in unseen; the protocol core decides whether they may come with these
// bytes. Exactly the bytes it wants are read: a preface, a header, the rest
// of a payload.
void Session::receive_request() {
  std::array<uint8_t, wire::kMaxControlPayload> buffer{};
  while (state() == State::kPreface || state() == State::kRequest) {
    std::vector<UniqueFd> fds;
    bool truncated = false;
    const ssize_t n = receive_with_fds(socket_.native_handle(), buffer.data(), protocol_.want(),
                                       kMaxPassedFds, MSG_DONTWAIT, fds, truncated);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && would_block(errno)) return wait_readable();
    if (n <= 0) return close();
    // Stream socket: only the fds can be cut off (MSG_CTRUNC; the kernel
    // closed the rest).
    if (truncated) {
      return reject(v1::ERROR_BAD_STDIO_FDS, "too many file descriptors attached to the request");
    }
    const bool with_fds = !fds.empty();
    if (with_fds) passed_fds_ = std::move(fds);
    const wire::Action action =
        protocol_.feed(std::span(buffer.data(), static_cast<size_t>(n)), with_fds);
    if (const auto* refused = std::get_if<wire::action::Reject>(&action)) {
      return reject(refused->code, refused->message);
    }
    if (const auto* launch = std::get_if<wire::action::StartLaunch>(&action)) {
      return guarded([&] { handle_launch_request(launch->request, launch->selftest); });
    }
    if (const auto* query = std::get_if<wire::action::StatusQuery>(&action)) {
      return guarded([&] { handle_status_request(query->project_root); });
    }
  }
}

// The one place a request's pando::Error becomes the client's answer.
void Session::guarded(const std::function<void()>& work) {
  try {
    work();
  } catch (const Error& e) {
    reject(e.code(), e.what());
  } catch (const std::exception& e) {
    // A library's exception (asio, std): a launch that could not be set up.
    reject(v1::ERROR_LAUNCH_FAILED, e.what());
  }
}

void Session::resolve_off_loop(std::function<void()> work, std::function<void()> done,
                               std::function<void()> timed_out, std::chrono::milliseconds timeout) {
  if (!pending_) {
    daemon_.add_pending(peer_.uid);
    pending_ = true;
  }
  daemon_.run_off_loop(peer_.uid, std::move(work),
                       [self = shared_from_this(), done = std::move(done)] {
                         // Refused (timeout, shutdown) or gone meanwhile:
                         // what the thread made is dropped.
                         if (self->state() != State::kResolving) return;
                         self->handshake_timer_.cancel();
                         self->guarded(done);
                       });
  // The thread holds the connection's pending slot now, until it returns.
  pending_ = false;
  watch_hangup();
  // A thread stuck in the kernel cannot be cancelled: the client gets its
  // answer in time anyway, and the thread keeps its slot.
  handshake_timer_.expires_after(timeout);
  handshake_timer_.async_wait([self = shared_from_this(), timed_out = std::move(timed_out)](
                                  const boost::system::error_code& ec) {
    if (!ec && self->state() == State::kResolving) timed_out();
  });
}

void Session::handle_status_request(const std::string& root) {
  handshake_timer_.cancel();
  auto status = std::make_shared<v1::Status>(daemon_.status());
  if (root.empty()) return send_status(*status);
  const auto add_layer = [status](bool available, const std::string& detail) {
    auto* layer = status->add_layers();
    layer->set_name("idmapped_mounts");
    layer->set_available(available);
    layer->set_detail(detail);
  };
  auto check = std::make_shared<ProjectIdmapCheck>();
  resolve_off_loop(
      [check, peer = peer_, root, role_user = daemon_.config().workspace().user()] {
        // Not a failure of the request: what status says of this project.
        try {
          wire::check_project_root_string(root);
          // Off the loop: an account that is not in /etc/passwd is asked of
          // getent, which may take its whole timeout.
          const std::optional<accounts::User> user = accounts::user_by_name(role_user);
          const uid_t role_uid = user ? user->uid : 65534;
          const gid_t role_gid = user ? user->gid : 65534;
          *check = check_project_idmap(peer, root, role_uid, role_gid);
        } catch (const std::exception& e) {
          *check = {false, root + ": " + e.what()};
        }
      },
      [this, status, check, add_layer] {
        add_layer(check->supported, check->detail);
        send_status(*status);
      },
      [this, status, root, add_layer] {
        add_layer(false, fmt::format("{}: no answer within {} ms (is its filesystem hung?)", root,
                                     daemon_.config().handshake_timeout_ms()));
        send_status(*status);
      },
      std::chrono::milliseconds(daemon_.config().handshake_timeout_ms()));
}

void Session::send_status(const v1::Status& status) {
  // The buffer must outlive the asynchronous write: the handler owns it.
  auto frame =
      std::make_shared<std::vector<uint8_t>>(wire::encode_message_frame(v1::FRAME_STATUS, status));
  protocol_.close();
  asio::async_write(socket_, asio::buffer(*frame),
                    [self = shared_from_this(), frame](const boost::system::error_code&, size_t) {
                      self->close();
                    });
}

// SECURITY.md's "In the daemon" steps, from the request on: the steps
// themselves are in daemon/launch_pipeline.cc; this is their I/O.
void Session::handle_launch_request(const wire::ValidRequest& request, bool selftest) {
  handshake_timer_.cancel();
  direct_ = take_direct_stdio(passed_fds_);
  direct_stdio_ = direct_.has_value();
  role_ = wire::role_name(request.role);
  project_root_ = request.project_root;
  log::info("launch_requested", {{"session", id_},
                                 {"uid", static_cast<int64_t>(peer_.uid)},
                                 {"pid", static_cast<int64_t>(peer_.pid)},
                                 {"role", role_},
                                 {"project_root", project_root_},
                                 {"selftest", selftest}});
  admit_caller(daemon_, peer_);
  reserved_ = true;
  auto prepared = std::make_shared<Prepared>();
  resolve_off_loop(
      [&daemon = daemon_, prepared, peer = peer_, request, selftest] {
        try {
          prepared->launch = prepare_launch(daemon, peer, request, selftest);
        } catch (...) {
          prepared->error = std::current_exception();
        }
      },
      [this, prepared] { on_launch_prepared(prepared); },
      [this] {
        reject(v1::ERROR_PROJECT_TIMEOUT,
               fmt::format("project {} did not answer within {} ms (is its filesystem hung?)",
                           project_root_, daemon_.config().handshake_timeout_ms()));
      },
      std::chrono::milliseconds(daemon_.config().handshake_timeout_ms()));
}

void Session::on_launch_prepared(std::shared_ptr<Prepared> prepared) {
  if (prepared->error) std::rethrow_exception(prepared->error);
  if (!prepared->launch.auth_home_note.empty()) {
    log::warn("auth_home_skipped", {{"session", id_}, {"reason", prepared->launch.auth_home_note}});
  }
  index_before_window(std::move(prepared));
}

void Session::launch_prepared(std::shared_ptr<Prepared> prepared) {
  start_launch(daemon_, id_, peer_, role_, prepared->launch, direct_ ? &*direct_ : nullptr,
               launch_);
  watch_launcher();
  control_.assign(launch_.sandbox.control.release());
  if (direct_) {
    // The role holds the caller's pipes itself; the daemon keeps no copy.
    direct_.reset();
    stdout_.eof = true;
  } else {
    stdin_.assign(launch_.stdio.stdin_write.release());
    stdout_.descriptor.assign(launch_.stdio.stdout_read.release());
    stdin_.non_blocking(true);
    stdout_.descriptor.non_blocking(true);
  }
  stderr_.descriptor.assign(launch_.stdio.stderr_read.release());
  stderr_.descriptor.non_blocking(true);
  protocol_.starting();
  watch_hangup();
  wait_for_control();
  // A launcher stuck in setup (e.g. on a hung filesystem) must not hold the
  // session and its client forever.
  handshake_timer_.expires_after(kSetupTimeout);
  handshake_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec && self->state() == State::kStarting) {
      self->reject(v1::ERROR_LAUNCH_FAILED, "the sandbox setup did not finish in time");
    }
  });
}

// The session's launcher, once taken (also when a later step failed): its
// exit is watched through the pidfd, and close() waits for it.
void Session::watch_launcher() {
  if (launched_ || !launch_.sandbox.pidfd.valid()) return;
  launched_ = true;
  pidfd_.assign(launch_.sandbox.pidfd.release());
  pidfd_.async_wait(Descriptor::wait_read,
                    [self = shared_from_this()](const boost::system::error_code& ec) {
                      if (!ec) self->on_sandbox_exited();
                    });
}

void Session::reject(v1::ErrorCode code, const std::string& message) {
  // Not the state: the protocol core is already closed when the verdict is its own.
  if (!socket_.is_open()) return;
  log::warn("launch_rejected", {{"session", id_},
                                {"uid", static_cast<int64_t>(peer_.uid)},
                                {"code", v1::ErrorCode_Name(code)},
                                {"message", message}});
  watch_launcher();
  if (launched_) {
    end_reason_ = v1::END_PROTOCOL_ERROR;
    kill_sandbox();
  }
  v1::Rejected rejected;
  rejected.set_code(code);
  rejected.set_message(message);
  // Best effort and never blocking: a client that does not read must not
  // stall the event loop. Mid-frame, a Rejected frame would corrupt the
  // stream, so the connection is just closed.
  if (out_splice_remaining_ == 0) {
    queue_frame(v1::FRAME_REJECTED, rejected);
    while (out_sent_ < out_pending_.size()) {
      const ssize_t n = send(socket_.native_handle(), out_pending_.data() + out_sent_,
                             out_pending_.size() - out_sent_, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      out_sent_ += static_cast<size_t>(n);
    }
  }
  boost::system::error_code ignored;
  socket_.shutdown(Socket::shutdown_both, ignored);
  close();
}

void Session::wait_for_control() {
  control_.async_wait(Descriptor::wait_read,
                      [self = shared_from_this()](const boost::system::error_code& ec) {
                        if (ec || !self->control_.is_open()) return;
                        self->handle_control_events();
                        if (self->control_.is_open()) self->wait_for_control();
                      });
}

void Session::handle_control_events() {
  std::array<char, 4096> buffer{};
  for (;;) {
    const ssize_t n = recv(control_.native_handle(), buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && would_block(errno)) return;
    if (n <= 0) {
      // The launcher (init) is gone; its exit is handled through the pidfd.
      boost::system::error_code ignored;
      control_.close(ignored);
      if (state() == State::kStarting) {
        reject(v1::ERROR_LAUNCH_FAILED, "the sandbox launcher exited during setup");
      }
      return;
    }
    sbv1::SandboxEvent event;
    if (!event.ParseFromArray(buffer.data(), static_cast<int>(n))) continue;
    handle_sandbox_event(event);
    if (state() == State::kClosed) return;
  }
}

void Session::handle_sandbox_event(const sbv1::SandboxEvent& event) {
  // A failed setup is over: its replacement can start now. A started one
  // gets its replacement when it ends (close()) or, for a long session, after
  // a delay: starting launchers while a short session runs slows it down.
  if (event.has_setup_failed()) daemon_.schedule_prestart();
  if (event.has_started()) daemon_.schedule_prestart_later();
  if (event.has_setup_failed() && state() == State::kStarting) {
    const auto code = static_cast<v1::ErrorCode>(event.setup_failed().code());
    return reject(v1::ErrorCode_IsValid(code) ? code : v1::ERROR_LAUNCH_FAILED,
                  event.setup_failed().message());
  }
  if (event.has_started() && state() == State::kStarting) return begin_running();
  if (event.has_role_exited()) {
    role_exit_ = event.role_exited();
    maybe_finish();
  }
}

void Session::begin_running() {
  try {
    wait_for_other_walks();
  } catch (const Error& e) {
    return reject(e.code(), e.what());
  }
  close_walk_window();
  protocol_.running(direct_stdio_);
  accepted_ = true;
  handshake_timer_.cancel();
  v1::Accepted accepted;
  accepted.set_session_id(id_);
  queue_frame(v1::FRAME_ACCEPTED, accepted);
  log::info("session_started", {{"session", id_},
                                {"uid", static_cast<int64_t>(peer_.uid)},
                                {"role", role_},
                                {"sandbox_pid", static_cast<int64_t>(launch_.sandbox.pid)}});
  pump_output();
  pump_input();
}

// --- end of session --------------------------------------------------------

void Session::on_sandbox_exited() {
  handle_control_events();
  siginfo_t info{};
  if (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_.native_handle()), &info,
             WEXITED | WNOHANG) != 0) {
    log::error("waitid_failed", {{"session", id_}, {"error", std::string(strerror(errno))}});
  }
  sandbox_reaped_ = true;
  if (state() == State::kStarting) {
    return reject(v1::ERROR_LAUNCH_FAILED, "the sandbox launcher exited during setup");
  }
  if (!role_exit_ && launch_.cgroup) {
    // Init died without a report: make sure nothing of the session survives.
    launch_.cgroup->kill_all();
  }
  if (state() == State::kClosed) return close();
  maybe_finish();
}

void Session::kill_sandbox() {
  if (pidfd_.is_open() && !sandbox_reaped_) {
    syscall(SYS_pidfd_send_signal, pidfd_.native_handle(), SIGKILL, nullptr, 0);
  }
  if (launch_.cgroup) launch_.cgroup->kill_all();
}

void Session::client_gone(const char* why) {
  if (client_gone_) return;
  client_gone_ = true;
  log::info("client_gone", {{"session", id_}, {"reason", std::string_view(why)}});
  if (launched_ && !sandbox_reaped_) {
    kill_sandbox();  // on_sandbox_exited() finishes the session
    return;
  }
  close();
}

void Session::shut_down() {
  if (state() == State::kPreface || state() == State::kRequest || state() == State::kResolving) {
    return reject(v1::ERROR_SHUTTING_DOWN, "the daemon is shutting down");
  }
  if (state() == State::kClosed) return;
  end_reason_ = v1::END_DAEMON_SHUTDOWN;
  end_message_ = "the helper daemon is shutting down";
  if (state() == State::kStarting) {
    kill_sandbox();
    return reject(v1::ERROR_SHUTTING_DOWN, "the daemon is shutting down");
  }
  kill_sandbox();
}

void Session::maybe_finish() {
  if (client_gone_) {
    if (sandbox_reaped_) close();
    return;
  }
  if (state() != State::kRunning || sent_exit_) return;
  if (!stdout_.eof || !stderr_.eof || out_splice_remaining_ > 0) return;
  if (!sandbox_reaped_ && !only_exiting_launcher_left()) return;
  send_exit();
}

// Init reported the role's exit and exits right after it; its exit (the
// mount namespace's teardown: 0.1-0.6 ms measured here) need not delay the
// client when no other process of the session is left to act. Any other
// process (a daemonized child) means waiting for the reap, when init's exit
// has killed it. Without a session cgroup there is no list to go by.
bool Session::only_exiting_launcher_left() const {
  return role_exit_ && launch_.cgroup && launch_.cgroup->holds_at_most(launch_.sandbox.pid);
}

v1::Exit Session::build_exit(const SessionUsage& usage) const {
  v1::Exit exit;
  if (role_exit_ && role_exit_->has_signal()) {
    exit.set_signal(role_exit_->signal());
  } else if (role_exit_) {
    exit.set_exit_code(role_exit_->exit_code());
  } else {
    exit.set_signal(SIGKILL);
  }
  // "Killed" only when the role itself died of SIGKILL (or took init with it):
  // on cgroup v1 an OOM kill may hit another process of the session only.
  const bool role_killed =
      !role_exit_ || (role_exit_->has_signal() && role_exit_->signal() == SIGKILL);
  const auto& limits = daemon_.role_config(role_).limits();
  const auto& caller_limits = daemon_.config().caller_limits();
  // Which memory limit: the session's own, or the one all sessions of the caller share.
  const std::string memory_limit =
      usage.caller_memory_limit_hit
          ? fmt::format("the memory limit of all sessions of uid {} ({} MiB)", peer_.uid,
                        caller_limits.memory_max_bytes() >> 20)
          : fmt::format("memory limit {} MiB", limits.memory_max_bytes() >> 20);
  v1::EndReason reason = end_reason_;
  std::string message = end_message_;
  if (reason == v1::END_CHILD_EXITED) {
    if (usage.oom_killed && role_killed) {
      reason = v1::END_MEMORY_LIMIT;
      message = fmt::format("{} session killed: {} reached", role_, memory_limit);
    } else if (usage.oom_killed) {
      message =
          fmt::format("a process of the {} session was killed by the {}", role_, memory_limit);
    } else if (usage.caller_pids_limit_hit) {
      reason = v1::END_PIDS_LIMIT;
      message = fmt::format(
          "{} session ran into the process limit of all sessions of uid {} ({} processes)", role_,
          peer_.uid, caller_limits.pids_max());
    } else if (usage.pids_limit_hit) {
      reason = v1::END_PIDS_LIMIT;
      message =
          fmt::format("{} session hit its process limit ({} processes)", role_, limits.pids_max());
    } else if (!role_exit_) {
      reason = v1::END_INTERNAL_ERROR;
      message = "the session's init was killed";
    }
  }
  exit.set_reason(reason);
  exit.set_message(message);
  return exit;
}

void Session::log_session_end(const v1::Exit& exit, const SessionUsage& usage,
                              std::string_view reason) const {
  log::info(
      "session_ended",
      {{"session", id_},
       {"uid", static_cast<int64_t>(peer_.uid)},
       {"role", role_},
       {"reason", reason},
       {"exit_code", static_cast<int64_t>(exit.has_exit_code() ? exit.exit_code() : -1)},
       {"signal", static_cast<int64_t>(exit.has_signal() ? exit.signal() : 0)},
       {"memory_peak_bytes", usage.memory_peak_bytes},
       {"cpu_usage_usec", usage.cpu_usage_usec},
       {"pids_peak", usage.pids_peak},
       {"oom_killed", usage.oom_killed},
       {"duration_ms", static_cast<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::steady_clock::now() - started_at_)
                                                .count())}});
}

void Session::send_exit() {
  // Only what decides the reason is read while the client waits; close()
  // reads the rest of the accounting for the log.
  SessionUsage events{};
  if (launch_.cgroup) events = launch_.cgroup->limit_events();
  sent_exit_ = build_exit(events);
  queue_frame(v1::FRAME_EXIT, *sent_exit_);
  pump_output();
}

void Session::close() {
  close_walk_window();
  boost::system::error_code ignored;
  protocol_.close();
  handshake_timer_.cancel();
  socket_.close(ignored);
  if (launched_ && !sandbox_reaped_) {
    // on_sandbox_exited() comes back here once the sandbox is reaped. After
    // an Exit sent before that, the launcher is exiting on its own.
    if (!sent_exit_) kill_sandbox();
    return;
  }
  if (finished_) return;
  finished_ = true;
  if (launched_) {
    // Every launched session is accounted, also when no Exit frame went out
    // (client gone, protocol error, shutdown during setup).
    SessionUsage usage{};
    if (launch_.cgroup) usage = launch_.cgroup->usage();
    if (sent_exit_) {
      log_session_end(*sent_exit_, usage, v1::EndReason_Name(sent_exit_->reason()));
    } else {
      log_session_end(build_exit(usage), usage,
                      !accepted_     ? "setup_failed"
                      : client_gone_ ? "client_gone"
                                     : v1::EndReason_Name(end_reason_));
    }
  }
  control_.close(ignored);
  stdin_.close(ignored);
  stdout_.descriptor.close(ignored);
  stderr_.descriptor.close(ignored);
  pidfd_.close(ignored);
  if (launch_.cgroup) {
    launch_.cgroup->kill_all();
    if (!launch_.cgroup->remove()) daemon_.defer_cgroup_removal(std::move(launch_.cgroup));
    launch_.cgroup.reset();
  }
  if (reserved_) daemon_.release_session(peer_.uid);
  reserved_ = false;
  if (pending_) daemon_.release_pending(peer_.uid);
  pending_ = false;
  passed_fds_.clear();
  direct_.reset();
  if (launched_) daemon_.schedule_prestart();
  daemon_.session_closed(this);
}

}  // namespace pando::daemon
