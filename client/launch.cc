#include "client/launch.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

#include "client/connection.h"
#include "common/fd_passing.h"
#include "common/json_log.h"
#include "common/printable.h"
#include "common/unique_fd.h"
#include "proto/helper.pb.h"

namespace pando::client {

namespace v1 = pando::helper::v1;

namespace {

// Up to this many stdin bytes are copied through user space per frame; more
// waiting in a stdin pipe is spliced into the socket.
constexpr uint32_t kCopyFrameBytes = 16 * 1024;
constexpr size_t kReadBufferBytes = 256 * 1024;

bool is_pipe(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

bool write_all(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && would_block(errno)) {
      pollfd pfd{fd, POLLOUT, 0};
      poll(&pfd, 1, -1);
      continue;
    }
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

v1::Signal wire_signal(int signo) {
  switch (signo) {
    case SIGINT:
      return v1::SIGNAL_INT;
    case SIGTERM:
      return v1::SIGNAL_TERM;
    default:
      return v1::SIGNAL_HUP;
  }
}

// What direct stdio may hand to the role, as the daemon checks it
// (daemon/launch_pipeline.cc): an anonymous pipe (a named FIFO is a file the
// daemon refuses, so it goes in frames), a terminal that is not a
// pseudo-terminal master, or /dev/null.
enum class StdioKind { kPipe, kTerminal, kNull, kOther };

// Legacy BSD pseudo-terminal masters, which do not answer TIOCGPTN.
constexpr unsigned int kBsdPtyMasterMajor = 2;

StdioKind stdio_kind(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return StdioKind::kOther;
  if (S_ISFIFO(st.st_mode)) {
    struct statfs fs {};
    return fstatfs(fd, &fs) == 0 && fs.f_type == PIPEFS_MAGIC ? StdioKind::kPipe
                                                              : StdioKind::kOther;
  }
  if (!S_ISCHR(st.st_mode)) return StdioKind::kOther;
  if (st.st_rdev == makedev(1, 3)) return StdioKind::kNull;
  termios modes{};
  unsigned int pty_number = 0;
  if (tcgetattr(fd, &modes) != 0 || ioctl(fd, TIOCGPTN, &pty_number) == 0 ||
      major(st.st_rdev) == kBsdPtyMasterMajor) {
    return StdioKind::kOther;
  }
  return StdioKind::kTerminal;
}

// The caller's terminals among stdin and stdout, saved before the role gets
// them and put back when the session ends, however it ends (the destructor
// runs on every return of run_launch): a role shares the terminal and its
// open file description, and one that set raw mode, turned echo off or made
// the file non-blocking must not leave the caller's terminal that way. (What
// no client could put back after a SIGKILL, a line discipline or exclusive
// mode, the role's seccomp filter refuses.) The window size is not put back:
// the terminal emulator sets it on every resize, and an old one would undo
// the user's.
class TerminalGuard {
 public:
  TerminalGuard() = default;
  TerminalGuard(const TerminalGuard&) = delete;
  TerminalGuard& operator=(const TerminalGuard&) = delete;
  ~TerminalGuard() { restore(); }

  // false: the terminal is not handed over, because its state cannot be read
  // or because this client is a background job on it: the role is outside the
  // terminal's job control (another session), so it would read what is typed
  // for the shell in the foreground.
  bool save(int fd) {
    const pid_t foreground = tcgetpgrp(fd);
    if (foreground >= 0 && foreground != getpgrp()) return false;
    Saved saved{fd, {}, fcntl(fd, F_GETFL)};
    if (saved.status_flags < 0 || tcgetattr(fd, &saved.modes) != 0) return false;
    saved_.push_back(saved);
    return true;
  }

  void forget() { saved_.clear(); }
  bool empty() const { return saved_.empty(); }

 private:
  struct Saved {
    int fd;
    termios modes;
    int status_flags;
  };

  // SIGTTOU blocked: a client in a background job puts the modes back
  // instead of being stopped by the kernel.
  void restore() noexcept {
    if (saved_.empty()) return;
    sigset_t ttou, old;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    sigprocmask(SIG_BLOCK, &ttou, &old);
    for (const Saved& saved : saved_) {
      const bool ok = tcsetattr(saved.fd, TCSANOW, &saved.modes) == 0 &&
                      fcntl(saved.fd, F_SETFL, saved.status_flags) == 0;
      if (!ok) {
        log::warn("terminal_not_restored", {{"fd", static_cast<int64_t>(saved.fd)},
                                            {"error", std::string(std::strerror(errno))}});
      }
    }
    sigprocmask(SIG_SETMASK, &old, nullptr);
  }

  std::vector<Saved> saved_;
};

// Direct stdio (see proto/helper.proto): hand our own stdin/stdout to the
// role when each is a kind the daemon takes, so no byte passes through this
// process or the daemon; the terminals among them are saved in `terminals`
// first. PANDO_HELPER_STDIO=frames forces the framed relay.
bool wants_direct_stdio(TerminalGuard& terminals) {
  const char* mode = std::getenv("PANDO_HELPER_STDIO");
  if (mode != nullptr && std::string(mode) == "frames") return false;
  const StdioKind in = stdio_kind(STDIN_FILENO);
  const StdioKind out = stdio_kind(STDOUT_FILENO);
  if (in == StdioKind::kOther || out == StdioKind::kOther) return false;
  // ^Z would stop this client but not the role, which would go on reading the
  // terminal while the shell has it again; ^C still ends the session.
  if ((in == StdioKind::kTerminal && !terminals.save(STDIN_FILENO)) ||
      (out == StdioKind::kTerminal && !terminals.save(STDOUT_FILENO)) ||
      (!terminals.empty() && signal(SIGTSTP, SIG_IGN) == SIG_ERR)) {
    terminals.forget();
    return false;
  }
  return true;
}

// Sends `bytes` with `fds` attached (SCM_RIGHTS) to their first byte.
bool send_with_fds(int sock, const std::vector<uint8_t>& bytes, const std::array<int, 2>& fds) {
  const ssize_t n = pando::send_with_fds(sock, bytes.data(), bytes.size(), fds);
  if (n < 0) return false;
  return send_all(sock, bytes.data() + n, bytes.size() - static_cast<size_t>(n));
}

class Relay {
 public:
  Relay(int sock, int signal_fd, bool direct_stdio, wire::SessionProtocol& protocol)
      : sock_(sock), signal_fd_(signal_fd), protocol_(protocol) {
    stdin_is_pipe_ = is_pipe(STDIN_FILENO);
    stdout_is_pipe_ = is_pipe(STDOUT_FILENO);
    if (direct_stdio) {
      // The role reads our stdin and writes our stdout itself.
      stdin_open_ = false;
    } else if (fcntl(STDIN_FILENO, F_GETFD) < 0) {
      stdin_open_ = false;
      const auto eof = wire::encode_header(v1::FRAME_STDIN_EOF, 0);
      pending_.insert(pending_.end(), eof.begin(), eof.end());
    }
  }

  // Returns the client's exit code.
  int run();

 private:
  void queue(v1::FrameType type, const google::protobuf::MessageLite& msg) {
    const auto frame = wire::encode_message_frame(type, msg);
    pending_.insert(pending_.end(), frame.begin(), frame.end());
  }
  bool read_stdin();
  bool flush_socket();
  // What moving a data frame's bytes came to.
  enum class Move { kMoved, kWait, kEnd };
  // false: session over (exit_code_ set)
  bool read_socket();
  Move move_output();
  bool connection_broke();
  bool session_over(const wire::Action& action);

  int sock_;
  int signal_fd_;
  wire::SessionProtocol& protocol_;  // the daemon's frames, after Accepted
  bool stdin_is_pipe_ = false;
  bool stdout_is_pipe_ = false;
  bool stdin_open_ = true;
  // Not zero-filled: a short session touches only the pages it reads into.
  std::unique_ptr<uint8_t[]> buffer_{new uint8_t[kReadBufferBytes]};
  std::vector<uint8_t> pending_;  // bytes for the socket
  size_t pending_sent_ = 0;
  uint32_t splice_out_ = 0;  // stdin bytes still to splice into the current frame

  bool to_stdout_ = false;  // the current data frame's
  bool blocked_on_stdout_ = false;
  bool stdout_broken_ = false;
  int exit_code_ = kExitProtocol;
};

bool Relay::read_stdin() {
  int available = 0;
  if (stdin_is_pipe_ && ioctl(STDIN_FILENO, FIONREAD, &available) == 0 &&
      static_cast<uint32_t>(available) > kCopyFrameBytes) {
    const uint32_t length =
        std::min<uint32_t>(static_cast<uint32_t>(available), wire::kMaxDataPayload);
    const auto header = wire::encode_header(v1::FRAME_STDIN_DATA, length);
    pending_.insert(pending_.end(), header.begin(), header.end());
    splice_out_ = length;
    return true;
  }
  ssize_t n;
  do {
    n = read(STDIN_FILENO, buffer_.get(), kReadBufferBytes);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && would_block(errno)) return true;
  if (n <= 0) {
    stdin_open_ = false;
    const auto eof = wire::encode_header(v1::FRAME_STDIN_EOF, 0);
    pending_.insert(pending_.end(), eof.begin(), eof.end());
    return true;
  }
  const auto header = wire::encode_header(v1::FRAME_STDIN_DATA, static_cast<uint32_t>(n));
  const size_t start = pending_.size();
  pending_.resize(start + header.size() + static_cast<size_t>(n));
  std::memcpy(pending_.data() + start, header.data(), header.size());
  std::memcpy(pending_.data() + start + header.size(), buffer_.get(), static_cast<size_t>(n));
  return true;
}

bool Relay::flush_socket() {
  while (pending_sent_ < pending_.size()) {
    const ssize_t n = send(sock_, pending_.data() + pending_sent_, pending_.size() - pending_sent_,
                           MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && would_block(errno)) return true;
    if (n < 0) return false;
    pending_sent_ += static_cast<size_t>(n);
  }
  pending_.clear();
  pending_sent_ = 0;
  while (splice_out_ > 0) {
    const ssize_t n = splice(STDIN_FILENO, nullptr, sock_, nullptr, splice_out_,
                             SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
    if (n > 0) {
      splice_out_ -= static_cast<uint32_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && would_block(errno)) return true;
    return false;
  }
  return true;
}

bool Relay::connection_broke() {
  std::cerr << "pando-helper: the connection to pando-helperd broke before the session ended\n";
  exit_code_ = kExitProtocol;
  return false;
}

// Exit, Rejected, or a frame the protocol refuses: the session is over.
bool Relay::session_over(const wire::Action& action) {
  if (const auto* exited = std::get_if<wire::action::Exited>(&action)) {
    const v1::Exit& exit = exited->exit;
    exit_code_ = exit.has_signal() ? 128 + exit.signal() : exit.exit_code();
    if (!exit.message().empty()) std::cerr << "pando-helper: " << printable(exit.message()) << "\n";
    log::info("exit", {{"exit_code", exit_code_}, {"reason", v1::EndReason_Name(exit.reason())}});
  } else if (const auto* refused = std::get_if<wire::action::Refused>(&action)) {
    exit_code_ = print_rejection("session ended by the daemon", refused->rejected);
  } else {
    const auto* reject = std::get_if<wire::action::Reject>(&action);
    std::cerr << "pando-helper: the daemon broke the protocol: "
              << printable(reject != nullptr ? reject->message : "unexpected frame") << "\n";
    exit_code_ = kExitProtocol;
  }
  return false;
}

// The current data frame's bytes: stdout spliced when it is a pipe, else
// copied through the buffer.
Relay::Move Relay::move_output() {
  if (to_stdout_ && stdout_is_pipe_ && !stdout_broken_) {
    const ssize_t n = splice(sock_, nullptr, STDOUT_FILENO, nullptr, protocol_.data_left(),
                             SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
    if (n > 0) {
      protocol_.passed(static_cast<uint32_t>(n));
      return Move::kMoved;
    }
    if (n < 0 && errno == EINTR) return Move::kMoved;
    if (n == 0) {
      connection_broke();
      return Move::kEnd;
    }
    if (would_block(errno)) {
      pollfd fds[2] = {{sock_, POLLIN, 0}, {STDOUT_FILENO, POLLOUT, 0}};
      poll(fds, 2, 0);
      if (!(fds[0].revents & POLLIN)) return Move::kWait;
      if (fds[1].revents & POLLOUT) return Move::kMoved;
      if (!(fds[1].revents & (POLLERR | POLLHUP))) {
        blocked_on_stdout_ = true;
        return Move::kWait;
      }
      errno = EPIPE;
    }
    if (errno == EPIPE) {
      // Whoever reads our stdout is gone: like a pipeline, end the session.
      stdout_broken_ = true;
      exit_code_ = 128 + SIGPIPE;
      return Move::kEnd;
    }
    std::cerr << "pando-helper: relaying stdout failed: " << std::strerror(errno) << "\n";
    exit_code_ = kExitSoftware;
    return Move::kEnd;
  }
  const size_t want = std::min<size_t>(protocol_.data_left(), kReadBufferBytes);
  const ssize_t n = recv(sock_, buffer_.get(), want, MSG_DONTWAIT);
  if (n < 0 && errno == EINTR) return Move::kMoved;
  if (n < 0 && would_block(errno)) return Move::kWait;
  if (n <= 0) {
    connection_broke();
    return Move::kEnd;
  }
  protocol_.passed(static_cast<uint32_t>(n));
  const int fd = to_stdout_ ? STDOUT_FILENO : STDERR_FILENO;
  if (!write_all(fd, buffer_.get(), static_cast<size_t>(n)) && to_stdout_) {
    exit_code_ = 128 + SIGPIPE;
    return Move::kEnd;
  }
  return Move::kMoved;
}

// Frames from the daemon, read exactly as far as the protocol core wants.
bool Relay::read_socket() {
  for (;;) {
    if (protocol_.data_left() > 0) {
      const Move moved = move_output();
      if (moved == Move::kWait) return true;
      if (moved == Move::kEnd) return false;
      continue;
    }
    const ssize_t n = recv(sock_, buffer_.get(), protocol_.want(), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && would_block(errno)) return true;
    if (n <= 0) return connection_broke();
    const wire::Action action = protocol_.feed(std::span(buffer_.get(), static_cast<size_t>(n)));
    if (const auto* data = std::get_if<wire::action::Data>(&action)) {
      to_stdout_ = data->type == v1::FRAME_STDOUT_DATA;
    } else if (!std::holds_alternative<wire::action::NeedMore>(action)) {
      return session_over(action);
    }
  }
}

int Relay::run() {
  for (;;) {
    const bool sending = pending_sent_ < pending_.size() || splice_out_ > 0;
    pollfd fds[4];
    nfds_t count = 0;
    fds[count++] = {signal_fd_, POLLIN, 0};
    const nfds_t sock_index = count;
    fds[count++] = {
        sock_, static_cast<short>((blocked_on_stdout_ ? 0 : POLLIN) | (sending ? POLLOUT : 0)), 0};
    nfds_t stdin_index = 0, stdout_index = 0;
    if (stdin_open_ && !sending) {
      stdin_index = count;
      fds[count++] = {STDIN_FILENO, POLLIN, 0};
    }
    if (blocked_on_stdout_) {
      stdout_index = count;
      fds[count++] = {STDOUT_FILENO, POLLOUT, 0};
    }
    if (poll(fds, count, -1) < 0) {
      if (errno == EINTR) continue;
      std::cerr << "pando-helper: poll: " << std::strerror(errno) << "\n";
      return kExitSoftware;
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info{};
      const bool received =
          read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info));
      if (received && info.ssi_signo == SIGQUIT) {
        // ^\ quits the client as it would quit any foreground job, but through
        // the return path, so that the terminal handed to the role is put back;
        // the daemon ends a session whose client left.
        log::info("quit", {});
        std::cerr << "pando-helper: quit (SIGQUIT): the session is ended\n";
        return kExitQuit;
      }
      if (received) {
        v1::SignalRequest request;
        request.set_signal(wire_signal(static_cast<int>(info.ssi_signo)));
        queue(v1::FRAME_SIGNAL, request);
        log::info("signal_forwarded", {{"signal", static_cast<int64_t>(info.ssi_signo)}});
      }
    }
    if (stdout_index != 0 && fds[stdout_index].revents) blocked_on_stdout_ = false;
    if (fds[sock_index].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (!read_socket()) return exit_code_;
    }
    if (stdin_index != 0 && fds[stdin_index].revents) read_stdin();
    if (!flush_socket()) {
      // The daemon may have ended the session: read what it said.
      if (!read_socket()) return exit_code_;
      std::cerr << "pando-helper: the connection to pando-helperd broke\n";
      return kExitProtocol;
    }
  }
}

// Forwarded signals are read from a signalfd; they are blocked first so none
// is lost or kills us between connect and the relay loop.
UniqueFd forwarded_signals() {
  sigset_t forwarded;
  sigemptyset(&forwarded);
  sigaddset(&forwarded, SIGINT);
  sigaddset(&forwarded, SIGTERM);
  sigaddset(&forwarded, SIGHUP);
  sigaddset(&forwarded, SIGQUIT);  // not forwarded: it ends the client (see Relay::run)
  sigprocmask(SIG_BLOCK, &forwarded, nullptr);
  return UniqueFd(signalfd(-1, &forwarded, SFD_CLOEXEC | SFD_NONBLOCK));
}

// The daemon's answer to the request: 0 once it accepted, else the exit code.
int await_acceptance(int sock, bool sent, wire::SessionProtocol& protocol) {
  // A daemon that refused the connection at once has its Rejected frame waiting.
  const auto answer = read_frame(sock, protocol);
  const auto* refused = answer ? std::get_if<wire::action::Refused>(&answer->action) : nullptr;
  if (!sent && refused == nullptr) {
    std::cerr << "pando-helper: the connection to pando-helperd broke while sending the request; "
              << no_answer_hint() << "\n";
    return kExitProtocol;
  }
  if (!answer) {
    std::cerr << "pando-helper: pando-helperd closed the connection without answering; "
              << no_answer_hint() << "\n";
    return kExitProtocol;
  }
  if (refused != nullptr) {
    log::warn("launch_rejected", {{"code", v1::ErrorCode_Name(refused->rejected.code())},
                                  {"message", refused->rejected.message()}});
    return print_rejection("launch rejected", refused->rejected);
  }
  const auto* accepted = std::get_if<wire::action::Accepted>(&answer->action);
  if (accepted == nullptr) {
    std::cerr << "pando-helper: unexpected answer from pando-helperd\n";
    return kExitProtocol;
  }
  log::info("accepted", {{"session", accepted->accepted.session_id()}});
  return 0;
}

}  // namespace

int run_launch(const std::string& role, const std::string& project_root,
               const std::string& socket) {
  v1::LaunchRequest request;
  if (role == "core") {
    request.set_role(v1::ROLE_CORE);
  } else if (role == "workspace") {
    request.set_role(v1::ROLE_WORKSPACE);
  } else {
    std::cerr << "pando-helper: --role must be core or workspace\n";
    return kExitUsage;
  }
  request.set_project_root(project_root);
  UniqueFd signal_fd = forwarded_signals();
  signal(SIGPIPE, SIG_IGN);

  std::string error;
  log::info("launch_start", {{"role", role}, {"project_root", project_root}, {"socket", socket}});
  UniqueFd sock = connect_daemon(socket, error);
  if (!sock.valid()) {
    std::cerr << "pando-helper: " << error << "\n";
    log::error("connect_failed", {{"socket", socket}, {"error", error}});
    return kExitUnavailable;
  }
  const auto frame = wire::encode_message_frame(v1::FRAME_LAUNCH_REQUEST, request);
  TerminalGuard terminals;
  const bool direct = wants_direct_stdio(terminals);
  const bool sent = direct ? send_with_fds(sock.get(), frame, {STDIN_FILENO, STDOUT_FILENO})
                           : send_all(sock.get(), frame.data(), frame.size());
  wire::SessionProtocol protocol(wire::Sender::kDaemon);
  if (const int code = await_acceptance(sock.get(), sent, protocol); code != 0) return code;
  if (fcntl(sock.get(), F_SETFL, fcntl(sock.get(), F_GETFL) | O_NONBLOCK) != 0) {
    std::cerr << "pando-helper: fcntl: " << std::strerror(errno) << "\n";
    return kExitSoftware;
  }
  Relay relay(sock.get(), signal_fd.get(), direct, protocol);
  return relay.run();
}

}  // namespace pando::client
