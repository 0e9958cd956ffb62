#include "daemon/sandbox/process_state.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "proto/error.h"
#include "tests/unit/child_process.h"

namespace {

using pando::helper::sandbox::v1::SandboxPlan;
using pando::sandbox::reset_process_state;
using pando::testing::Child;
using pando::testing::RunInChild;

int check_limit(const Child& child, int resource, const char* name, rlim_t expected) {
  rlimit limit{};
  if (getrlimit(resource, &limit) != 0) return child.FailErrno(name);
  if (limit.rlim_cur != expected || limit.rlim_max != expected) {
    return child.Fail(std::string(name) + " " + std::to_string(limit.rlim_cur) + "/" +
                      std::to_string(limit.rlim_max));
  }
  return 0;
}

TEST(ProcessStateTest, ResetsWhatAProcessInherits) {
  const auto result = RunInChild([](const Child& child) {
    // Inherited state a launcher could carry: an ignored and a blocked signal,
    // a tight umask, a stray fd, the control fd to keep.
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) return child.FailErrno("signal");
    if (signal(SIGUSR1, [](int) {}) == SIG_ERR) return child.FailErrno("signal");
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    if (sigprocmask(SIG_BLOCK, &block, nullptr) != 0) return child.FailErrno("sigprocmask");
    umask(077);
    const int stray = open("/dev/null", O_RDONLY);
    const int keep = open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int above = fcntl(stray, F_DUPFD, 40);
    if (stray < 3 || keep < 3 || above < 40) return child.FailErrno("open");

    SandboxPlan plan;
    plan.set_rlimit_nofile(512);
    plan.set_rlimit_core(0);
    reset_process_state(plan, keep);

    sigset_t now;
    if (sigprocmask(SIG_SETMASK, nullptr, &now) != 0) return child.FailErrno("sigprocmask");
    if (!sigisemptyset(&now)) return child.Fail("signals still blocked");
    for (int sig : {SIGPIPE, SIGUSR1, SIGHUP, SIGRTMIN, SIGRTMAX}) {
      struct sigaction action {};
      if (sigaction(sig, nullptr, &action) != 0) return child.FailErrno("sigaction");
      if (action.sa_handler != SIG_DFL) return child.Fail("signal " + std::to_string(sig));
    }
    const mode_t mask = umask(0);
    if (mask != 022) return child.Fail("umask " + std::to_string(mask));
    if (int rc = check_limit(child, RLIMIT_NOFILE, "RLIMIT_NOFILE", 512); rc != 0) return rc;
    if (int rc = check_limit(child, RLIMIT_CORE, "RLIMIT_CORE", 0); rc != 0) return rc;
    if (getsid(0) != getpid()) return child.Fail("not a session leader");
    if (prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) return child.Fail("dumpable");
    int deathsig = 0;
    if (prctl(PR_GET_PDEATHSIG, &deathsig, 0, 0, 0) != 0 || deathsig != SIGKILL) {
      return child.Fail("parent-death signal " + std::to_string(deathsig));
    }
    for (int fd : {stray, above}) {
      if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) return child.Fail("fd left open");
    }
    if (fcntl(keep, F_GETFD) != FD_CLOEXEC) return child.Fail("kept fd closed");
    for (int fd = 0; fd <= 2; ++fd) {
      if (fcntl(fd, F_GETFD) == -1) return child.Fail("stdio fd closed");
    }
    return 0;
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST(ProcessStateTest, DefaultLimitsWhenThePlanHasNone) {
  const auto result = RunInChild([](const Child& child) {
    reset_process_state(SandboxPlan(), -1);
    if (int rc = check_limit(child, RLIMIT_NOFILE, "RLIMIT_NOFILE", 4096); rc != 0) return rc;
    return check_limit(child, RLIMIT_CORE, "RLIMIT_CORE", 0);
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST(ProcessStateTest, RefusesToKeepAnFdThatWouldSurviveExec) {
  const auto result = RunInChild([](const Child& child) {
    const int leaky = open("/dev/null", O_RDONLY);
    if (leaky < 3) return child.FailErrno("open");
    try {
      reset_process_state(SandboxPlan(), leaky);
    } catch (const pando::Error&) {
      return 0;
    }
    return child.Fail("kept an fd without close-on-exec");
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

}  // namespace
