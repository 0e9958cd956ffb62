// pando-helper-probe: the session's own network namespace (lo only, no route).

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "probe/probe.h"

namespace pando::probe {

namespace {

void check_interfaces() {
  struct if_nameindex* names = if_nameindex();
  if (!names) return fail("net.interfaces", "if_nameindex: " + errno_name(errno));
  std::vector<std::string> found;
  for (struct if_nameindex* entry = names; entry->if_index != 0; ++entry)
    found.push_back(entry->if_name);
  if_freenameindex(names);
  if (found.size() != 1 || found[0] != "lo")
    return fail("net.interfaces", "interfaces: " + join(found));
  pass("net.interfaces", "only lo");
}

// A UDP connect sends nothing; it only needs a route.
void check_no_route() {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(53);
  inet_pton(AF_INET, "1.1.1.1", &addr.sin_addr);
  const int fd = socket_for("net.no_route_ipv4", AF_INET, SOCK_DGRAM);
  if (fd < 0) return;
  expect_errno("net.no_route_ipv4", connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
               ENETUNREACH);
  close(fd);
}

void check_no_route_ipv6() {
  const int fd = socket_for("net.no_route_ipv6", AF_INET6, SOCK_DGRAM);
  if (fd < 0) return;
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_port = htons(53);
  inet_pton(AF_INET6, "2606:4700:4700::1111", &addr.sin6_addr);
  expect_errno("net.no_route_ipv6", connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
               ENETUNREACH);
  close(fd);
}

// The host's listening sockets (sshd, databases on 127.0.0.1) would be listed
// here in the host's network namespace.
void check_host_listeners() {
  std::vector<std::string> listening;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6", "/proc/net/unix"}) {
    std::istringstream lines(read_file(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      if (!line.empty()) listening.push_back(table);
    }
  }
  if (!listening.empty()) {
    return fail("net.host_sockets", std::to_string(listening.size()) + " sockets visible (" +
                                        listening.front() + "...)");
  }
  pass("net.host_sockets", "no TCP or Unix socket of the host visible (own network namespace)");
}

}  // namespace

void network_checks() {
  check_interfaces();
  check_no_route();
  check_no_route_ipv6();
  check_host_listeners();
}

}  // namespace pando::probe
