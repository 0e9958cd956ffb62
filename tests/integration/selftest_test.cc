// Issue 12: `pando-helper security selftest` through the real daemon: the daemon runs its own
// probe as each role in a real session, the probe's escape attempts all fail on this host, a
// probe whose check does succeed makes the command fail, and the request is refused exactly
// like a launch.

#include <glob.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace pando::itest {
namespace {

namespace fs = std::filesystem;
namespace v1 = pando::helper::v1;

size_t count_lines_starting(const std::string& text, const std::string& prefix) {
  std::istringstream lines(text);
  size_t count = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) ++count;
  }
  return count;
}

// The temporary projects the client makes (and must remove).
std::vector<std::string> temporary_projects() {
  glob_t found{};
  std::vector<std::string> paths;
  if (glob("/tmp/pando-selftest-*", 0, nullptr, &found) == 0) {
    for (size_t i = 0; i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
  }
  globfree(&found);
  return paths;
}

// A root-owned directory holding a copy of the launcher and, when given, a probe: a
// sandbox_helper_path whose pando-helper-probe the test chooses.
class ToolsDir {
 public:
  explicit ToolsDir(const std::string& probe, mode_t probe_mode = 0755) {
    parent_ = dir_.path() + "/libexec";
    const std::string dir = parent_ + "/tools";
    fs::create_directories(dir);
    chmod(parent_.c_str(), 0755);
    chmod(dir.c_str(), 0755);
    helper_ = dir + "/pando-helper-sandbox";
    fs::copy_file(sandbox_binary(), helper_);
    chmod(helper_.c_str(), 0755);
    if (!probe.empty()) {
      const std::string target = dir + "/pando-helper-probe";
      fs::copy_file(probe, target);
      chmod(target.c_str(), probe_mode);
    }
  }
  const std::string& helper() const { return helper_; }
  // Holds the tools directory.
  const std::string& parent() const { return parent_; }

 private:
  TempDir dir_;
  std::string parent_;
  std::string helper_;
};

class SelftestTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(geteuid(), 0u) << "integration tests run as root"; }

  RunResult selftest(const Daemon& daemon, std::vector<std::string> args = {},
                     RunOptions options = {}) {
    std::vector<std::string> argv = {daemon.client(), "security", "selftest", "--socket",
                                     daemon.socket_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_as(caller(), argv, options);
  }

  // The code a raw request of `type` for `root` is rejected with.
  v1::ErrorCode rejection(const Daemon& daemon, v1::FrameType type, const std::string& root) {
    RawClient client(daemon.socket_path(), caller());
    EXPECT_TRUE(client.send_preface());
    EXPECT_TRUE(client.send_frame(type, client.launch_request(v1::ROLE_CORE, root)));
    const auto frame = client.read_until(v1::FRAME_REJECTED, std::chrono::seconds(10));
    if (!frame) return v1::ERROR_UNSPECIFIED;
    v1::Rejected rejected;
    rejected.ParseFromArray(frame->payload.data(), static_cast<int>(frame->payload.size()));
    return rejected.code();
  }
};

TEST_F(SelftestTest, BothRolesPassOnThisHostAndTheTemporaryProjectIsRemoved) {
  const auto before = temporary_projects();
  Daemon daemon;
  const RunResult r = selftest(daemon);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count_lines_starting(r.out, "FAIL "), 0u) << r.out;
  EXPECT_GE(count_lines_starting(r.out, "PASS core/"), 30u) << r.out;
  EXPECT_GE(count_lines_starting(r.out, "PASS workspace/"), 30u) << r.out;
  // Each role's view of the other role's home, the hidden .env and the pinned git metadata
  // of the temporary project were checked, not skipped.
  for (const char* check :
       {"PASS core/project.hidden_env", "PASS workspace/project.hidden_env",
        "PASS workspace/project.git_config", "PASS workspace/project.git_hooks",
        "PASS workspace/project.git_rename", "PASS core/project.other_role_home",
        "PASS workspace/project.other_role_home", "PASS core/view.shadow",
        "PASS workspace/seccomp.unshare_user", "PASS workspace/seccomp.other_write_chmod",
        "PASS workspace/seccomp.acl", "PASS core/view.proc_masked",
        "PASS workspace/view.proc_masked"}) {
    EXPECT_NE(r.out.find(check), std::string::npos) << check << "\n" << r.out;
  }
  EXPECT_NE(r.out.find("selftest: "), std::string::npos) << r.out;
  EXPECT_EQ(temporary_projects(), before);
}

// The caller's own git closes what the sandbox cannot (a bare repository or a submodule the role
// makes): the selftest asks it, as the caller, and warns while either setting is missing. The
// test caller has no git config: both warn, and a warning fails nothing.
TEST_F(SelftestTest, WarnsWhileTheCallersGitWouldUseARepositoryTheRoleMade) {
  Daemon daemon;
  const std::string project = daemon.dir().make_dir("proj", caller());
  const std::vector<std::string> args = {"--role", "workspace", "--project-root", project};
  RunOptions bare;
  bare.env = {
      {"PATH", "/usr/bin:/bin"}, {"GIT_CONFIG_NOSYSTEM", "1"}, {"GIT_CONFIG_GLOBAL", "/dev/null"}};
  const RunResult unset = selftest(daemon, args, bare);
  EXPECT_EQ(unset.exit_code, 0) << unset.out << unset.err;
  EXPECT_NE(unset.out.find("WARN caller/git.safe_bare_repository safe.bareRepository is not set"),
            std::string::npos)
      << unset.out;
  EXPECT_NE(unset.out.find("git config --global diff.ignoreSubmodules dirty"), std::string::npos)
      << unset.out;
  EXPECT_NE(unset.out.find(", 2 warnings\n"), std::string::npos) << unset.out;

  const std::string config = daemon.dir().path() + "/gitconfig";
  {
    std::ofstream out(config);
    out << "[safe]\n\tbareRepository = explicit\n[diff]\n\tignoreSubmodules = dirty\n";
  }
  ASSERT_EQ(chmod(config.c_str(), 0644), 0);
  RunOptions hardened = bare;
  hardened.env["GIT_CONFIG_GLOBAL"] = config;
  const RunResult set = selftest(daemon, args, hardened);
  EXPECT_EQ(set.exit_code, 0) << set.out << set.err;
  EXPECT_NE(set.out.find("PASS caller/git.safe_bare_repository"), std::string::npos) << set.out;
  EXPECT_NE(set.out.find("PASS caller/git.ignore_submodules"), std::string::npos) << set.out;
  EXPECT_NE(set.out.find(", 0 warnings\n"), std::string::npos) << set.out;

  // No git to ask: nothing of the caller's to harden, said as a skip.
  RunOptions no_git = bare;
  no_git.env["PATH"] = "/nonexistent";
  const RunResult missing = selftest(daemon, args, no_git);
  EXPECT_EQ(missing.exit_code, 0) << missing.out << missing.err;
  EXPECT_NE(missing.out.find("SKIP caller/git.ignore_submodules git is not installed"),
            std::string::npos)
      << missing.out;
}

TEST_F(SelftestTest, RunsInAGivenProjectForOneRole) {
  Daemon daemon;
  const std::string project = daemon.dir().make_dir("proj", caller());
  const RunResult r = selftest(daemon, {"--role", "workspace", "--project-root", project});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count_lines_starting(r.out, "FAIL "), 0u) << r.out;
  EXPECT_EQ(count_lines_starting(r.out, "PASS core/"), 0u) << r.out;
  EXPECT_GE(count_lines_starting(r.out, "PASS workspace/"), 30u) << r.out;
  EXPECT_TRUE(fs::exists(project)) << "a given project is the caller's and stays";
}

// What the daemon reports unavailable comes first, and the checks of a missing layer are
// skipped with the reason, never passed.
TEST_F(SelftestTest, UnavailableLayersAreListedFirstAndTheirChecksSkipped) {
  DaemonOptions options;
  options.without_cgroups = true;
  Daemon daemon(options);
  const RunResult r = selftest(daemon, {"--role", "core"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("UNAVAILABLE cgroups ", 0), 0u) << r.out;
  EXPECT_EQ(count_lines_starting(r.out, "FAIL "), 0u) << r.out;
  EXPECT_EQ(count_lines_starting(r.out,
                                 "SKIP core/cgroup.session the daemon runs without usable "
                                 "cgroups on this host"),
            1u)
      << r.out;
  EXPECT_EQ(count_lines_starting(r.out,
                                 "SKIP core/cgroup.pids_max the daemon runs without usable "
                                 "cgroups on this host"),
            1u)
      << r.out;
  EXPECT_EQ(count_lines_starting(r.out, "PASS core/cgroup."), 0u) << r.out;
}

TEST_F(SelftestTest, JsonOutputIsJsonLines) {
  Daemon daemon;
  const RunResult r = selftest(daemon, {"--role", "core", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_GE(count_lines_starting(r.out, "{\"check\":\"core/"), 30u) << r.out;
  RunOptions parse;
  parse.stdin_data = r.out;
  const RunResult parsed = run_as(caller(),
                                  {"/usr/bin/python3", "-c",
                                   "import json,sys\n"
                                   "rows=[json.loads(l) for l in sys.stdin]\n"
                                   "checks=[r for r in rows if 'check' in r]\n"
                                   "assert all(r['result'] in ('PASS','FAIL','SKIP','WARN') and "
                                   "'detail' in r for r in checks)\n"
                                   "print(len(checks))\n"},
                                  parse);
  EXPECT_EQ(parsed.exit_code, 0) << parsed.err << r.out;
  EXPECT_GE(std::stoi(parsed.out.empty() ? "0" : parsed.out), 30) << parsed.out;
}

// A probe built to look for /etc/shadow at /etc/passwd, which the view does hold: that one
// check fails, and so does the command.
TEST_F(SelftestTest, AFailingCheckFailsTheCommand) {
  ToolsDir tools(PANDO_FAILING_PROBE_BIN);
  DaemonOptions options;
  options.sandbox_helper_path = tools.helper();
  Daemon daemon(options);
  const RunResult r = selftest(daemon, {"--role", "core"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(count_lines_starting(r.out, "FAIL "), 1u) << r.out;
  EXPECT_EQ(count_lines_starting(r.out, "FAIL core/view.shadow /etc/passwd exists"), 1u) << r.out;
  EXPECT_NE(r.out.find("selftest: "), std::string::npos);
  EXPECT_NE(r.out.find(" 1 failed"), std::string::npos) << r.out;
}

// As installed, the probe is in a directory the view already holds read-only (/usr/libexec is
// in /usr): it is bound there all the same.
TEST_F(SelftestTest, TheProbeRunsFromADirectoryTheViewHoldsReadOnly) {
  ToolsDir tools(PANDO_PROBE_HELPER_BIN);
  DaemonOptions options;
  options.sandbox_helper_path = tools.helper();
  options.core_argv_text = "argv: \"/bin/true\"\nruntime_paths: \"" + tools.parent() + "\"";
  Daemon daemon(options);
  const RunResult r = selftest(daemon, {"--role", "core"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count_lines_starting(r.out, "FAIL "), 0u) << r.out;
  EXPECT_GE(count_lines_starting(r.out, "PASS core/"), 30u) << r.out;
}

TEST_F(SelftestTest, WithoutARootOwnedProbeTheSelftestIsUnavailable) {
  for (const auto& [probe, mode] :
       std::vector<std::pair<std::string, mode_t>>{{"", 0}, {PANDO_FAILING_PROBE_BIN, 0775}}) {
    ToolsDir tools(probe, mode);
    DaemonOptions options;
    options.sandbox_helper_path = tools.helper();
    Daemon daemon(options);
    const RunResult r = selftest(daemon, {"--role", "core"});
    EXPECT_EQ(r.exit_code, 77) << r.out << r.err;
    EXPECT_NE(r.err.find("ERROR_SELFTEST_UNAVAILABLE"), std::string::npos) << r.err;
    // A launch through the same daemon is unaffected.
    const std::string project = daemon.dir().make_dir("proj", caller());
    RunOptions run;
    run.stdin_data = "echo launched\n";
    const RunResult launched = launch(daemon, caller(), "core", project, run);
    EXPECT_EQ(launched.exit_code, 0) << launched.err;
    EXPECT_EQ(launched.out, "launched\n");
  }
}

// The project root goes through the launch's own validation, resolution and caller checks.
TEST_F(SelftestTest, RefusedWithTheSameCodesAsALaunch) {
  Daemon daemon;
  const std::string others = daemon.dir().make_dir("others", other_user());
  const std::string missing = daemon.dir().path() + "/missing";
  for (const std::string& root :
       {std::string("/etc"), std::string("relative"), std::string("/tmp//x"), others, missing}) {
    const v1::ErrorCode launch_code = rejection(daemon, v1::FRAME_LAUNCH_REQUEST, root);
    EXPECT_NE(launch_code, v1::ERROR_UNSPECIFIED) << root;
    EXPECT_EQ(rejection(daemon, v1::FRAME_SELFTEST_REQUEST, root), launch_code) << root;
  }
  EXPECT_EQ(rejection(daemon, v1::FRAME_SELFTEST_REQUEST, "/etc"), v1::ERROR_PATH_FORBIDDEN);
  const RunResult r = selftest(daemon, {"--project-root", "/etc"});
  EXPECT_EQ(r.exit_code, 77) << r.out << r.err;
  EXPECT_NE(r.err.find("ERROR_PATH_FORBIDDEN"), std::string::npos) << r.err;
}

TEST_F(SelftestTest, ABadCommandLineIs64) {
  Daemon daemon;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--role", "root"}, {"--json=yes"}, {"--argv", "x"}}) {
    const RunResult r = selftest(daemon, args);
    EXPECT_EQ(r.exit_code, 64) << args[0] << ": " << r.out << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST_F(SelftestTest, ASelftestRequestTakesNoFileDescriptors) {
  Daemon daemon;
  const std::string project = daemon.dir().make_dir("proj", caller());
  int in[2], out[2];
  ASSERT_EQ(pipe(in), 0);
  ASSERT_EQ(pipe(out), 0);
  RawClient client(daemon.socket_path(), caller());
  ASSERT_TRUE(client.send_preface());
  ASSERT_TRUE(client.send_frame_with_fds(
      v1::FRAME_SELFTEST_REQUEST, client.launch_request(v1::ROLE_CORE, project), {in[0], out[1]}));
  for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
  const auto frame = client.read_until(v1::FRAME_REJECTED, std::chrono::seconds(10));
  ASSERT_TRUE(frame);
  v1::Rejected rejected;
  rejected.ParseFromArray(frame->payload.data(), static_cast<int>(frame->payload.size()));
  EXPECT_EQ(rejected.code(), v1::ERROR_BAD_STDIO_FDS) << rejected.message();
}

}  // namespace
}  // namespace pando::itest
