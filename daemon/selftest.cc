#include "daemon/selftest.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "daemon/daemon.h"
#include "proto/error.h"

namespace pando::daemon {

namespace v1 = pando::helper::v1;
namespace sbv1 = pando::helper::sandbox::v1;

namespace {

constexpr const char* kProbeName = "pando-helper-probe";

// The config checked the sandbox helper's directory to be root's alone all
// the way up, so no one else can swap the name checked here.
void check_probe(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    throw Error(v1::ERROR_SELFTEST_UNAVAILABLE,
                "selftest probe " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) != 0) {
    throw Error(v1::ERROR_SELFTEST_UNAVAILABLE,
                "selftest probe " + path +
                    " must be a regular file owned by root and writable only by root");
  }
}

}  // namespace

void make_selftest_plan(const Daemon& daemon, const PeerIdentity& peer, sbv1::SandboxPlan& plan) {
  const std::string& helper = daemon.config().sandbox_helper_path();
  const std::string dir = helper.substr(0, helper.rfind('/'));
  const std::string probe = dir + "/" + kProbeName;
  check_probe(probe);
  plan.clear_argv();
  for (const std::string& arg :
       {probe, std::string("--role"), plan.role(), std::string("--caller-uid"),
        std::to_string(peer.uid), std::string("--caller-gid"), std::to_string(peer.gid),
        std::string("--socket"), daemon.client_socket_path(), std::string("--cgroups"),
        std::string(daemon.has_cgroups() ? "yes" : "no")}) {
    plan.add_argv(arg);
  }
  // Without a usable cgroup (cgroups.allow_unlimited) or, on cgroup v1, a
  // pids hierarchy, the session has no process limit to find: the probe
  // reports that check skipped.
  if (daemon.limits_session_pids()) {
    plan.add_argv("--pids-max");
    plan.add_argv(std::to_string(daemon.role_config(plan.role()).limits().pids_max()));
  }
  // Its directory, not the file: the launcher binds a directory that the view
  // already holds (/usr/libexec/pando-helper is in /usr) over itself, but would
  // have to create a file's mount point, which a read-only /usr refuses.
  plan.add_runtime_paths(dir);
  // What the view holds besides the project, so the probe can tell it from
  // what it must not hold.
  for (const std::string& path : plan.runtime_paths()) {
    plan.add_argv("--runtime-path");
    plan.add_argv(path);
  }
}

}  // namespace pando::daemon
