#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "daemon/session.h"

// The stdio relay of a running session, both ways. Stdin data goes from the
// socket into the child's pipe with splice(); only frame headers and control
// payloads pass through user space, read exactly as far as the protocol core
// wants.

namespace pando::daemon {

namespace v1 = pando::helper::v1;

namespace {

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

}  // namespace

// --- client -> child stdin -------------------------------------------------

void Session::watch_hangup() {
  if (hangup_watch_) return;
  hangup_watch_ = true;
  // EPOLLHUP: the client closed its end entirely, even while unread stdin
  // data is still queued in front of the EOF.
  socket_.async_wait(Socket::wait_error,
                     [self = shared_from_this()](const boost::system::error_code& ec) {
                       self->hangup_watch_ = false;
                       if (ec || self->state() == State::kClosed) return;
                       pollfd pfd{self->socket_.native_handle(), POLLIN, 0};
                       if (poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLHUP | POLLERR))) {
                         return self->client_gone("client hung up");
                       }
                       self->watch_hangup();
                     });
}

template <typename Waitable, typename WaitType>
void Session::wait_input(Waitable& waitable, WaitType what) {
  if (in_waiting_) return;
  in_waiting_ = true;
  waitable.async_wait(what, [self = shared_from_this()](const boost::system::error_code& ec) {
    self->in_waiting_ = false;
    if (!ec) self->pump_input();
  });
}

void Session::close_stdin() {
  boost::system::error_code ignored;
  stdin_.close(ignored);
}

// Moves stdin data straight from the socket into the child's stdin pipe, or
// drops it once the child closed its stdin. kContinue: moved some (or the
// pipe closed); kWait: a waiter is armed or the client has no more yet.
Session::Step Session::pass_stdin_data(int sock) {
  if (!stdin_.is_open()) {
    std::array<uint8_t, 16384> discard{};
    const ssize_t n = recv(sock, discard.data(),
                           std::min<size_t>(discard.size(), protocol_.data_left()), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) return Step::kContinue;
    if (n < 0 && would_block(errno)) return Step::kWaitClient;
    if (n <= 0) return Step::kGone;
    protocol_.passed(static_cast<uint32_t>(n));
    return Step::kContinue;
  }
  const ssize_t n = splice(sock, nullptr, stdin_.native_handle(), nullptr, protocol_.data_left(),
                           SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
  if (n > 0) {
    protocol_.passed(static_cast<uint32_t>(n));
    return Step::kContinue;
  }
  if (n == 0) return Step::kGone;
  if (errno == EINTR) return Step::kContinue;
  if (!would_block(errno)) {
    // The child closed its stdin (EPIPE): the rest of its input is dropped.
    close_stdin();
    return Step::kContinue;
  }
  pollfd fds[2] = {{sock, POLLIN, 0}, {stdin_.native_handle(), POLLOUT, 0}};
  poll(fds, 2, 0);
  if (!(fds[0].revents & POLLIN)) return Step::kWaitClient;
  if (fds[1].revents & POLLOUT) return Step::kContinue;
  if (fds[1].revents & (POLLERR | POLLHUP)) {
    close_stdin();
    return Step::kContinue;
  }
  wait_input(stdin_, Descriptor::wait_write);
  return Step::kWaitPipe;
}

// Frames from the client, read exactly as far as the protocol core wants:
// headers and signal payloads through a small buffer, stdin data never (it is
// spliced by pass_stdin_data()).
void Session::pump_input() {
  const int sock = socket_.native_handle();
  std::array<uint8_t, wire::kMaxControlPayload> buffer{};
  while (state() == State::kRunning && !client_gone_) {
    if (protocol_.data_left() > 0) {
      const Step step = pass_stdin_data(sock);
      if (step == Step::kGone) return client_gone("client closed the connection mid-frame");
      if (step == Step::kWaitPipe) return;
      if (step == Step::kWaitClient) break;
      continue;
    }
    const ssize_t n = recv(sock, buffer.data(), protocol_.want(), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && would_block(errno)) break;
    if (n <= 0) return client_gone(n == 0 ? "client closed the connection" : "client read error");
    const wire::Action action = protocol_.feed(std::span(buffer.data(), static_cast<size_t>(n)));
    if (const auto* refused = std::get_if<wire::action::Reject>(&action)) {
      return reject(refused->code, refused->message);
    }
    if (std::holds_alternative<wire::action::StdinEof>(action) && stdin_.is_open()) close_stdin();
    if (const auto* signal = std::get_if<wire::action::SignalRole>(&action);
        signal != nullptr && pidfd_.is_open()) {
      syscall(SYS_pidfd_send_signal, pidfd_.native_handle(), signal->signo, nullptr, 0);
    }
  }
  if (state() != State::kRunning || client_gone_) return;
  wait_input(socket_, Socket::wait_read);
}

// --- child stdout/stderr -> client -----------------------------------------

void Session::queue_frame(v1::FrameType type, const google::protobuf::MessageLite& msg) {
  const auto frame = wire::encode_message_frame(type, msg);
  out_pending_.insert(out_pending_.end(), frame.begin(), frame.end());
}

void Session::wait_socket_writable() {
  if (out_waiting_) return;
  out_waiting_ = true;
  socket_.async_wait(Socket::wait_write,
                     [self = shared_from_this()](const boost::system::error_code& ec) {
                       self->out_waiting_ = false;
                       if (!ec) self->pump_output();
                     });
}

void Session::wait_output_pipe(OutputPipe& pipe) {
  if (pipe.waiting || pipe.eof) return;
  pipe.waiting = true;
  // Readiness may be stale by the time this runs (asio queues events), so it
  // only triggers another attempt; EOF is what read() says, nothing else.
  pipe.descriptor.async_wait(Descriptor::wait_read, [self = shared_from_this(),
                                                     &pipe](const boost::system::error_code& ec) {
    pipe.waiting = false;
    if (!ec) self->pump_output();
  });
}

bool Session::start_output_frame(OutputPipe& pipe) {
  if (pipe.eof) return false;
  const int fd = pipe.descriptor.native_handle();
  if (pipe.backlog) {
    // The last frame was full: splice a large one straight into the socket.
    int available = 0;
    if (ioctl(fd, FIONREAD, &available) == 0 && static_cast<size_t>(available) > kCopyFrameBytes) {
      const uint32_t length =
          std::min<uint32_t>(static_cast<uint32_t>(available), wire::kMaxDataPayload);
      const auto header = wire::encode_header(pipe.frame_type, length);
      out_pending_.insert(out_pending_.end(), header.begin(), header.end());
      out_splice_remaining_ = length;
      out_splice_pipe_ = &pipe;
      return true;
    }
    pipe.backlog = false;
  }
  ssize_t n;
  do {
    n = read(fd, copy_buffer_.data(), copy_buffer_.size());
  } while (n < 0 && errno == EINTR);
  if (n == 0) {
    pipe.eof = true;  // every writer is gone and the pipe is drained
    return false;
  }
  if (n < 0) return false;  // would block: wait for more
  const size_t start = out_pending_.size();
  out_pending_.resize(start + wire::kHeaderSize + static_cast<size_t>(n));
  const auto header = wire::encode_header(pipe.frame_type, static_cast<uint32_t>(n));
  std::memcpy(out_pending_.data() + start, header.data(), header.size());
  std::memcpy(out_pending_.data() + start + wire::kHeaderSize, copy_buffer_.data(),
              static_cast<size_t>(n));
  pipe.backlog = static_cast<size_t>(n) == copy_buffer_.size();
  return true;
}

void Session::pump_output() {
  if (client_gone_ || state() == State::kClosed) return;
  const int sock = socket_.native_handle();
  for (;;) {
    if (out_sent_ < out_pending_.size()) {
      const ssize_t n = send(sock, out_pending_.data() + out_sent_, out_pending_.size() - out_sent_,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && would_block(errno)) return wait_socket_writable();
      if (n < 0) return client_gone("client write error");
      out_sent_ += static_cast<size_t>(n);
      if (out_sent_ == out_pending_.size()) {
        out_pending_.clear();
        out_sent_ = 0;
      }
      continue;
    }
    if (out_splice_remaining_ > 0) {
      const ssize_t n = splice(out_splice_pipe_->descriptor.native_handle(), nullptr, sock, nullptr,
                               out_splice_remaining_, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
      if (n > 0) {
        out_splice_remaining_ -= static_cast<uint32_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      // The pipe holds the announced bytes (we are its only reader), so a
      // would-block here means the socket is full.
      if (n < 0 && would_block(errno)) return wait_socket_writable();
      return client_gone("client write error");
    }
    if (sent_exit_) return close();
    if (state() != State::kRunning) return;
    OutputPipe& first = prefer_stderr_ ? stderr_ : stdout_;
    OutputPipe& second = prefer_stderr_ ? stdout_ : stderr_;
    prefer_stderr_ = !prefer_stderr_;
    if (start_output_frame(first) || start_output_frame(second)) continue;
    wait_output_pipe(stdout_);
    wait_output_pipe(stderr_);
    maybe_finish();
    return;
  }
}

}  // namespace pando::daemon
