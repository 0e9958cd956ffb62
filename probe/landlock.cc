// pando-helper-probe: what only Landlock refuses (writes outside the view's
// writable paths, TCP, signals out of the session).

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "probe/probe.h"

namespace pando::probe {

namespace {

// /proc is mounted read-write, so only Landlock refuses writing there.
void check_landlock_write(int abi) {
  if (abi < 1) return skip("landlock.write_outside", "Landlock unavailable on this kernel");
  const int fd = open("/proc/self/comm", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) close(fd);
  expect_errno("landlock.write_outside", fd, EACCES);
}

void check_landlock_tcp(int abi) {
  if (abi < 4) {
    skip("landlock.tcp_bind", "Landlock ABI " + std::to_string(abi) + " < 4 has no TCP rules");
    return skip("landlock.tcp_connect",
                "Landlock ABI " + std::to_string(abi) + " < 4 has no TCP rules");
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(47811);
  if (const int fd = socket_for("landlock.tcp_bind", AF_INET, SOCK_STREAM); fd >= 0) {
    expect_errno("landlock.tcp_bind", bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
                 EACCES);
    close(fd);
  }
  // Without Landlock this is ECONNREFUSED (nothing listens on the session's own lo).
  if (const int fd = socket_for("landlock.tcp_connect", AF_INET, SOCK_STREAM); fd >= 0) {
    expect_errno("landlock.tcp_connect",
                 connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), EACCES);
    close(fd);
  }
}

// The session's init runs as the role user too: only Landlock's signal
// scope (ABI 6) keeps the role from signalling it.
void check_landlock_signal(int abi) {
  if (abi < 6) {
    return skip("landlock.signal_scope",
                "Landlock ABI " + std::to_string(abi) + " < 6 does not scope signals");
  }
  expect_errno("landlock.signal_scope", kill(1, 0), EPERM);
}

}  // namespace

void landlock_checks(int abi) {
  check_landlock_write(abi);
  check_landlock_tcp(abi);
  check_landlock_signal(abi);
}

}  // namespace pando::probe
