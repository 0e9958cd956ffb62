#include "daemon/sandbox/namespaces.h"

#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common/unique_fd.h"
#include "daemon/sandbox/setup_error.h"

namespace pando::sandbox {

namespace {

constexpr char kHostName[] = "pando-sandbox";

void bring_up_loopback() {
  // Any AF_INET socket of this (private) network namespace reaches its devices.
  UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) throw_errno("socket(AF_INET) for loopback setup");
  ifreq req{};
  std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(sock.get(), SIOCGIFFLAGS, &req) != 0) throw_errno("SIOCGIFFLAGS lo");
  req.ifr_flags = static_cast<short>(req.ifr_flags | IFF_UP);
  if (ioctl(sock.get(), SIOCSIFFLAGS, &req) != 0) throw_errno("SIOCSIFFLAGS lo");
  ifreq check{};
  std::strncpy(check.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(sock.get(), SIOCGIFFLAGS, &check) != 0) throw_errno("SIOCGIFFLAGS lo");
  if ((check.ifr_flags & IFF_UP) == 0) {
    throw SetupError(pando::helper::v1::ERROR_LAUNCH_FAILED, "loopback interface did not come up");
  }
}

}  // namespace

void set_up_namespaces() {
  if (sethostname(kHostName, sizeof(kHostName) - 1) != 0) throw_errno("sethostname");
  if (setdomainname(kHostName, sizeof(kHostName) - 1) != 0) throw_errno("setdomainname");
  bring_up_loopback();
}

void enter_cgroup_namespace() {
  if (unshare(CLONE_NEWCGROUP) != 0) throw_errno("unshare(CLONE_NEWCGROUP)");
}

}  // namespace pando::sandbox
