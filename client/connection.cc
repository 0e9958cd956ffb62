#include "client/connection.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

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

std::optional<wire::FrameDecoder::Frame> read_frame(int fd) {
  std::array<uint8_t, wire::kHeaderSize> header_bytes{};
  if (!recv_all(fd, header_bytes.data(), header_bytes.size())) return std::nullopt;
  const wire::FrameHeader header = wire::decode_header(header_bytes);
  const uint32_t cap = wire::max_payload(header.type);
  if (cap == 0 || header.length > cap) return std::nullopt;
  wire::FrameDecoder::Frame frame;
  frame.type = header.type;
  frame.payload.resize(header.length);
  if (!recv_all(fd, frame.payload.data(), frame.payload.size())) return std::nullopt;
  return frame;
}

}  // namespace pando::client
