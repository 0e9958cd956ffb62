// Issue 11: all live sessions of one caller share a caller cgroup with the caller limits, so one
// user's sessions together cannot take more than those, while another user's are unaffected;
// the caller cgroup goes with the caller's last session.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/cgroup_reader.h"
#include "tests/integration/harness.h"

namespace pando::itest {
namespace {

using namespace std::chrono_literals;

// The harness's default argv lines (one line of stdin, run by dash) with a pids limit of 30.
const std::string kRoleArgv = std::string(kDispatchArgv) + "  limits { pids_max: 30 }";

// Starts 20 background sleeps. dash exits with 2 when a fork fails.
constexpr const char* kTwentySleepers =
    "i=0; while [ $i -lt 20 ]; do sleep 1000 & i=$((i+1)); done; echo forked-all";

class CallerLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
    DaemonOptions options;
    options.core_argv_text = kRoleArgv;
    options.workspace_argv_text = kRoleArgv;
    options.extra_config = "caller_limits { pids_max: 40 }";
    daemon_ = std::make_unique<Daemon>(options);
  }

  void TearDown() override {
    daemon_.reset();
    EXPECT_TRUE(eventually([] { return processes_of(workspace_user().uid).empty(); }, 5s))
        << "role processes left after the test";
  }

  std::unique_ptr<RunningClient> open_session(const TestUser& user, const std::string& project) {
    return std::make_unique<RunningClient>(
        user, std::vector<std::string>{daemon_->client(), "security", "launch", "--role",
                                       "workspace", "--project-root", project, "--stdio",
                                       "--socket", daemon_->socket_path()});
  }

  std::unique_ptr<Daemon> daemon_;
};

TEST_F(CallerLimitsTest, OneCallersSessionsShareTheCallerLimitAndOthersAreUnaffected) {
  const std::string project = daemon_->dir().make_dir("proj", caller());
  const std::string other_project = daemon_->dir().make_dir("other-proj", other_user());

  // First session: init, the shell and 20 sleeps, 22 of the caller's 40; then it waits.
  auto first = open_session(caller(), project);
  ASSERT_TRUE(first->write_all(std::string(kTwentySleepers) + "; exec cat\n"));
  ASSERT_TRUE(first->read_until("forked-all\n", 20s)) << daemon_->log();

  // One caller cgroup per hierarchy, holding the session, with the caller limit.
  const auto callers = caller_cgroup_dirs();
  ASSERT_FALSE(callers.empty()) << daemon_->log();
  const std::string caller_name = "caller-" + std::to_string(caller().uid);
  for (const auto& dir : callers) EXPECT_TRUE(dir.ends_with("/" + caller_name)) << dir;
  const CgroupReader caller_cgroup(callers);
  const std::string missing = caller_cgroup.missing({CgroupController::kPids});
  if (!missing.empty()) GTEST_SKIP() << missing;
  EXPECT_EQ(caller_cgroup.pids_max(), 40u);

  // Second session of the same caller: its own limit (30) would allow 20 more sleeps, the
  // caller's only about 16 more tasks. The fork that fails ends its shell.
  RunOptions run;
  run.stdin_data = std::string(kTwentySleepers) + "\n";
  const RunResult second = launch(*daemon_, caller(), "workspace", project, run);
  EXPECT_EQ(second.exit_code, 2) << second.err << daemon_->log();
  EXPECT_EQ(second.out, "") << "all 20 sleeps started despite the caller limit";
  EXPECT_NE(second.err.find("process limit of all sessions of uid " + std::to_string(caller().uid) +
                            " (40 processes)"),
            std::string::npos)
      << second.err;
  // Logged once the session is closed, just after its Exit went out.
  EXPECT_TRUE(eventually(
      [&] { return daemon_->log().find("\"reason\":\"END_PIDS_LIMIT\"") != std::string::npos; },
      5s))
      << daemon_->log();

  // Another user's session, while the first still holds its 22: not held by that limit.
  RunOptions other_run;
  other_run.stdin_data = std::string(kTwentySleepers) + "; echo other-ok\n";
  const RunResult other = launch(*daemon_, other_user(), "workspace", other_project, other_run);
  EXPECT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(other.out, "forked-all\nother-ok\n") << other.err;

  // The first session never noticed.
  ASSERT_TRUE(first->write_all("still-here\n"));
  ASSERT_TRUE(first->read_until("still-here\n", 10s));
  first->close_stdin();
  const int status = first->wait(20s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << first->err();

  // Nothing is left: no session cgroup, no caller cgroup.
  EXPECT_TRUE(eventually([] { return session_cgroup_dirs().empty(); }, 5s));
  EXPECT_TRUE(eventually([] { return caller_cgroup_dirs().empty(); }, 5s))
      << caller_cgroup_dirs().size() << " caller cgroups left: " << daemon_->log();
}

}  // namespace
}  // namespace pando::itest
