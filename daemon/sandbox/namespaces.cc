#include "daemon/sandbox/namespaces.h"

#include <linux/sched.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "common/blocked_syscall.h"
#include "common/unique_fd.h"
#include "proto/error.h"

namespace pando::sandbox {

namespace {

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
    throw Error(pando::helper::v1::ERROR_LAUNCH_FAILED, "loopback interface did not come up");
  }
}

}  // namespace

// The raw syscall: glibc has no fork() that takes namespace flags. glibc
// (>= 2.25) caches no pid, and the one thread-id cache it keeps (in the
// thread control block) is not used for signals a thread sends itself
// (raise, abort), so a single-threaded copy may go on running C++ code. The
// cgroup namespace comes later (enter_cgroup_namespace), once the daemon has
// moved the launcher into the session's cgroups.
pid_t fork_into_new_namespaces(int* pidfd) noexcept {
  clone_args args{};
  args.flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |
               CLONE_PARENT | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<std::uintptr_t>(pidfd);
  // No exit_signal with CLONE_PARENT (EINVAL): the copy inherits the
  // template's, SIGCHLD to the daemon.
  return static_cast<pid_t>(syscall(SYS_clone3, &args, sizeof(args)));
}

std::optional<std::string> namespaces_refused() {
  for (const ProbedSyscall& call : {kClone3Call, kUnshareCall}) {
    if (std::optional<std::string> why = refused_by_environment(call)) return why;
  }
  return std::nullopt;
}

void set_up_namespaces() {
  if (sethostname(kSandboxHostName, sizeof(kSandboxHostName) - 1) != 0) throw_errno("sethostname");
  if (setdomainname(kSandboxHostName, sizeof(kSandboxHostName) - 1) != 0)
    throw_errno("setdomainname");
  bring_up_loopback();
}

// A write of "0" to a v1 `tasks` file moves the writing thread alone, which
// for the single-threaded launcher is the whole process.
void join_session_cgroups(std::vector<UniqueFd>& tasks_files) {
  for (UniqueFd& file : tasks_files) {
    if (write(file.get(), "0", 1) != 1) throw_errno("joining the session's cgroup (tasks)");
    file.reset();
  }
}

void enter_cgroup_namespace() {
  if (unshare(CLONE_NEWCGROUP) != 0) {
    throw_if_refused_by_environment(kUnshareCall, "the session's cgroup namespace");
    throw_errno("unshare(CLONE_NEWCGROUP)");
  }
}

}  // namespace pando::sandbox
