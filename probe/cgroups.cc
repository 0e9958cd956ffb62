// pando-helper-probe: the session's cgroup and its pids limit.

#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "probe/probe.h"

namespace pando::probe {

namespace {

// The view has no /sys, so the limits themselves cannot be read from inside;
// what shows is that the session is the root of its own cgroup namespace.
void check_cgroup_namespace() {
  if (!options().cgroups) {
    return skip("cgroup.session", "the daemon runs without usable cgroups on this host");
  }
  std::istringstream lines(read_file("/proc/self/cgroup"));
  std::string line;
  size_t count = 0;
  while (std::getline(lines, line)) {
    ++count;
    if (line.size() < 2 || line.substr(line.size() - 2) != ":/") {
      return fail("cgroup.session", "/proc/self/cgroup: " + line);
    }
  }
  if (count == 0) return fail("cgroup.session", "/proc/self/cgroup is empty");
  pass("cgroup.session", "the session cgroup is this process's cgroup namespace root");
}

// The limit is not readable from inside (no /sys in the view), so it is
// found the hard way: children that wait on a pipe are forked until fork()
// fails, which must happen before the session holds pids.max processes.
void check_pids_limit() {
  if (options().pids_max == 0) {
    return skip("cgroup.pids_max", options().cgroups
                                       ? "this host's cgroups have no pids controller"
                                       : "the daemon runs without usable cgroups on this host");
  }
  int hold[2];
  if (pipe2(hold, O_CLOEXEC) != 0) return fail("cgroup.pids_max", "pipe: " + errno_name(errno));
  std::vector<pid_t> children;
  int err = 0;
  while (static_cast<long>(children.size()) <= options().pids_max) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(hold[1]);
      char byte;
      while (read(hold[0], &byte, 1) < 0 && errno == EINTR) {
      }
      _exit(0);
    }
    if (pid < 0) {
      err = errno;
      break;
    }
    children.push_back(pid);
  }
  close(hold[0]);
  close(hold[1]);
  for (const pid_t pid : children) {
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  // The session's init and this process count too.
  const std::string made = std::to_string(children.size()) + " more processes";
  if (err == 0) return fail("cgroup.pids_max", "fork never failed: " + made);
  if (err != EAGAIN) return fail("cgroup.pids_max", "fork failed with " + errno_name(err));
  if (static_cast<long>(children.size()) + 2 > options().pids_max) {
    return fail("cgroup.pids_max", made + " beyond pids.max " + std::to_string(options().pids_max));
  }
  pass("cgroup.pids_max", "fork refused (EAGAIN) after " + made + " (pids.max " +
                              std::to_string(options().pids_max) + ")");
}

}  // namespace

void cgroup_checks() {
  check_cgroup_namespace();
  check_pids_limit();
}

}  // namespace pando::probe
