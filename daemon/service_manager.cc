#include "daemon/service_manager.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/unique_fd.h"
#include "proto/error.h"

namespace pando::daemon {
namespace {

constexpr int kFirstActivationFd = 3;

using pando::helper::v1::ERROR_INTERNAL;

// What the service manager handed over is not the request's fault.
[[noreturn]] void fail(const std::string& message) { throw Error(ERROR_INTERNAL, message); }
[[noreturn]] void fail_errno(const std::string& what) { throw_errno(what, ERROR_INTERNAL); }

std::optional<std::string> take_env(const char* name) {
  const char* value = std::getenv(name);
  std::optional<std::string> result;
  if (value != nullptr) result = value;
  if (unsetenv(name) != 0) fail_errno(std::string("unsetenv ") + name);
  return result;
}

// Parses a whole decimal string; trailing garbage, signs and overflow are errors.
template <typename T>
T parse_decimal(const std::string& text, const char* name) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < 0) {
    fail(std::string("socket activation: malformed ") + name + "=\"" + text + "\"");
  }
  return value;
}

void check_listening_unix_stream(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) fail_errno("socket activation: fstat of fd 3");
  if (!S_ISSOCK(st.st_mode)) fail("socket activation: fd 3 is not a socket");

  int type = 0;
  socklen_t len = sizeof(type);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    fail_errno("socket activation: getsockopt(SO_TYPE)");
  }
  if (type != SOCK_STREAM) {
    fail("socket activation: fd 3 is not a SOCK_STREAM socket");
  }

  int listening = 0;
  len = sizeof(listening);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) {
    fail_errno("socket activation: getsockopt(SO_ACCEPTCONN)");
  }
  if (listening == 0) fail("socket activation: fd 3 is not listening");

  sockaddr_storage addr{};
  len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    fail_errno("socket activation: getsockname");
  }
  if (addr.ss_family != AF_UNIX) {
    fail("socket activation: fd 3 is not an AF_UNIX socket");
  }
}

}  // namespace

std::optional<int> take_socket_activation_fd() {
  // Cleared before any check so that neither an error path nor a variable meant
  // for another process leaks the activation state into sessions.
  const std::optional<std::string> pid_text = take_env("LISTEN_PID");
  const std::optional<std::string> fds_text = take_env("LISTEN_FDS");
  take_env("LISTEN_FDNAMES");

  if (!pid_text) return std::nullopt;
  if (parse_decimal<pid_t>(*pid_text, "LISTEN_PID") != getpid()) return std::nullopt;
  if (!fds_text) fail("socket activation: LISTEN_PID set without LISTEN_FDS");
  const int count = parse_decimal<int>(*fds_text, "LISTEN_FDS");
  if (count != 1) {
    fail("socket activation: expected exactly 1 socket, LISTEN_FDS=" + *fds_text);
  }

  const int fd = kFirstActivationFd;
  check_listening_unix_stream(fd);
  const int flags = fcntl(fd, F_GETFD);
  if (flags < 0) fail_errno("socket activation: fcntl(F_GETFD)");
  if (fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) fail_errno("socket activation: fcntl(F_SETFD)");
  return fd;
}

void notify(std::string_view state) {
  const char* target = std::getenv("NOTIFY_SOCKET");
  if (target == nullptr) return;

  const std::string_view name(target);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  socklen_t addr_len = 0;
  if (!name.empty() && name.front() == '/') {
    if (name.size() >= sizeof(addr.sun_path)) {
      fail("notify: NOTIFY_SOCKET path too long");
    }
    std::memcpy(addr.sun_path, name.data(), name.size());
    addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + 1);
  } else if (!name.empty() && name.front() == '@') {
    // Abstract names are length-delimited: no trailing NUL may be counted.
    if (name.size() > sizeof(addr.sun_path)) {
      fail("notify: NOTIFY_SOCKET abstract name too long");
    }
    addr.sun_path[0] = '\0';
    std::memcpy(addr.sun_path + 1, name.data() + 1, name.size() - 1);
    addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  } else {
    fail("notify: NOTIFY_SOCKET must be an absolute path or start with '@'");
  }

  UniqueFd sock(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (sock.get() < 0) fail_errno("notify: socket");
  const ssize_t sent = sendto(sock.get(), state.data(), state.size(), MSG_NOSIGNAL,
                              reinterpret_cast<const sockaddr*>(&addr), addr_len);
  if (sent < 0) fail_errno("notify: sendto " + std::string(name));
  if (static_cast<size_t>(sent) != state.size()) {
    fail("notify: short datagram to " + std::string(name));
  }
}

}  // namespace pando::daemon
