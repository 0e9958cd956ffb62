#include "client/connection.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "common/printable.h"

namespace pando::client {

std::string socket_path(const std::optional<std::string>& flag) {
  if (flag) return *flag;
  const char* env = std::getenv("PANDO_HELPER_SOCKET");
  if (env != nullptr && *env != '\0') return env;
  return kDefaultSocket;
}

std::string start_hint(const std::string& path) {
  return "is pando-helperd running? Start it with `sudo systemctl start pando-helperd.socket`, or "
         "`sudo pando-helperd --config /etc/pando/pando-helperd.conf --socket " +
         path + "`; if it does not stay up, `journalctl -u pando-helperd` says why";
}

std::string no_answer_hint() {
  return "did it fail to start? `journalctl -u pando-helperd` (or its log_file) says why";
}

bool send_all(int fd, const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = send(fd, bytes, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

static bool recv_all(int fd, void* data, size_t size) {
  auto* bytes = static_cast<uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = recv(fd, bytes, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

UniqueFd connect_daemon(const std::string& path, std::string& error) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    error = std::string("socket: ") + std::strerror(errno);
    return {};
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    error = "socket path " + path + " is too long";
    return {};
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  int rc;
  do {
    rc = connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    error = "cannot reach pando-helperd at " + path + " (" + std::strerror(errno) + "); " +
            start_hint(path);
    return {};
  }
  // A failed send is left to the caller's read: a daemon that refuses the
  // connection at once (too many pending requests) has sent its Rejected
  // frame before closing, and that is the answer to show.
  const auto preface = wire::make_preface();
  send_all(fd.get(), preface.data(), preface.size());
  return fd;
}

std::optional<DaemonFrame> read_frame(int fd, wire::SessionProtocol& protocol) {
  std::array<uint8_t, wire::kMaxControlPayload> buffer{};
  for (size_t want; (want = protocol.want()) > 0;) {
    if (!recv_all(fd, buffer.data(), want)) return std::nullopt;
    DaemonFrame frame{protocol.feed(std::span(buffer.data(), want)), {}};
    if (std::holds_alternative<wire::action::NeedMore>(frame.action)) continue;
    if (const auto* data = std::get_if<wire::action::Data>(&frame.action)) {
      frame.data.resize(data->length);
      if (!recv_all(fd, frame.data.data(), frame.data.size())) return std::nullopt;
      protocol.passed(data->length);
    }
    return frame;
  }
  return std::nullopt;
}

int print_rejection(const std::string& what, const pando::helper::v1::Rejected& rejected) {
  std::cerr << "pando-helper: " << what << " ("
            << pando::helper::v1::ErrorCode_Name(rejected.code())
            << "): " << printable(rejected.message()) << "\n";
  return kExitRejected;
}

}  // namespace pando::client
