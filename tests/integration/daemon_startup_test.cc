// pando-helperd itself, the real binary as root and as a caller: its command line and
// --check-config, what it refuses at start (exit codes, one-line messages, nothing left
// behind), the socket it creates, SIGINT, its open-file limit, socket activation with
// sd_notify and idle exit, a host without cgroups, and role users that cannot run a role.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace pando::itest {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const TestUser kRoot{"root", 0, 0};

// The built daemon, run directly (not through the harness's Daemon).
RunResult daemon_command(const TestUser& user, std::vector<std::string> args) {
  args.insert(args.begin(), PANDO_DAEMON_BIN);
  return run_as(user, args);
}

// A config every check accepts: both roles run /bin/sh as the test's role users.
std::string valid_config() {
  return "core { user: \"" + core_user().name + "\" argv: \"/bin/sh\" }\n" +
         "workspace { user: \"" + workspace_user().name + "\" argv: \"/bin/sh\" }\n" +
         "sandbox_helper_path: \"" + sandbox_binary() + "\"\n" +
         // Never the default parent: a daemon removes the stale sessions it finds there.
         "cgroups { parent: \"" + cgroup_parent_name() + "\" }\n";
}

// The same with its socket in `dir`: a daemon started on it by mistake stays off the host's.
std::string valid_config(const TempDir& dir) {
  return valid_config() + "socket_path: \"" + dir.path() + "/helper.sock\"\n";
}

// The harness's daemon, expected to refuse to start: returns its exit code (-1 when it did not
// exit by itself) and leaves its log in `log`.
int start_failure(DaemonOptions options, std::string& log) {
  options.expect_start = false;
  Daemon daemon(options);
  const int status = daemon.wait_exit(20s);
  log = daemon.log();
  return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    names.push_back(entry.path().filename());
  }
  return names;
}

UniqueFd unix_socket(int type, const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (!fd.valid() || bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return UniqueFd();
  }
  return fd;
}

// pando-helperd started the way a service manager starts it: `prepare` runs in the child before
// exec (a socket on fd 3, a mount namespace of its own) and adds to its environment; its
// stderr goes to `log_path`. SIGTERM and reaped when it goes out of scope.
class ManagedDaemon {
 public:
  ManagedDaemon(const std::string& config, const std::string& log_path,
                const std::function<bool(std::vector<std::string>& env)>& prepare)
      : log_path_(log_path) {
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<std::string> env;
      const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (log < 0 || dup2(log, 2) < 0 || !prepare(env)) _exit(125);
      std::vector<char*> envp;
      for (auto& item : env) envp.push_back(item.data());
      envp.push_back(nullptr);
      const char* argv[] = {"pando-helperd", "--config", config.c_str(), nullptr};
      execve(PANDO_DAEMON_BIN, const_cast<char**>(argv), envp.data());
      _exit(127);
    }
  }
  ~ManagedDaemon() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      wait_exit(20s);
    }
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  ManagedDaemon(const ManagedDaemon&) = delete;
  ManagedDaemon& operator=(const ManagedDaemon&) = delete;

  pid_t pid() const { return pid_; }
  std::string log() const { return read_file(log_path_); }
  bool log_has(const std::string& needle) const {
    return eventually([&] { return log().find(needle) != std::string::npos; }, 20s);
  }
  // The wait status once it exited by itself, or -1.
  int wait_exit(std::chrono::milliseconds timeout) {
    int status = -1;
    if (!eventually([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout)) return -1;
    pid_ = -1;
    return status;
  }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
};

class DaemonStartupTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(geteuid(), 0u) << "integration tests run as root"; }
  TempDir dir_;
};

TEST_F(DaemonStartupTest, HelpVersionAndBadCommandLines) {
  const RunResult help = daemon_command(kRoot, {"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out.rfind("usage: pando-helperd --config FILE", 0), 0u) << help.out;
  EXPECT_EQ(daemon_command(kRoot, {"-h"}).out, help.out);

  const RunResult version = daemon_command(kRoot, {"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("pando-helperd ", 0), 0u) << version.out;

  const RunResult unknown = daemon_command(kRoot, {"--frobnicate"});
  EXPECT_EQ(unknown.exit_code, 64);
  EXPECT_NE(unknown.err.find("unknown argument --frobnicate"), std::string::npos) << unknown.err;
  EXPECT_TRUE(unknown.out.empty()) << unknown.out;

  const RunResult no_config = daemon_command(kRoot, {"--foreground"});
  EXPECT_EQ(no_config.exit_code, 64);
  EXPECT_NE(no_config.err.find("--config is required"), std::string::npos) << no_config.err;

  // --check-config takes its file and nothing else.
  const std::string config = dir_.write_file("ok.conf", valid_config(dir_), kRoot);
  const RunResult check_and_more =
      daemon_command(kRoot, {"--check-config", config, "--foreground"});
  EXPECT_EQ(check_and_more.exit_code, 64) << check_and_more.err;
  EXPECT_NE(check_and_more.err.find("unknown argument --check-config"), std::string::npos)
      << check_and_more.err;
}

TEST_F(DaemonStartupTest, RefusesToRunAsAnotherUserThanRoot) {
  const std::string config = dir_.write_file("ok.conf", valid_config(dir_), kRoot);
  const RunResult r = daemon_command(caller(), {"--config", config});
  EXPECT_EQ(r.exit_code, 77) << r.err;
  EXPECT_NE(r.err.find("must run as root"), std::string::npos) << r.err;
}

TEST_F(DaemonStartupTest, CheckConfigAcceptsAValidFileAndNamesTheFieldOfABadOne) {
  const std::string ok = dir_.write_file("ok.conf", valid_config(dir_), kRoot);
  const RunResult good = daemon_command(kRoot, {"--check-config", ok});
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_EQ(good.out, "pando-helperd: " + ok + ": config OK\n");

  const std::string bad = dir_.write_file("bad.conf", valid_config() + "max_sessions: 0\n", kRoot);
  const RunResult invalid = daemon_command(kRoot, {"--check-config", bad});
  EXPECT_EQ(invalid.exit_code, 78);
  EXPECT_NE(invalid.err.find(bad + ":5: max_sessions: must be at least 1"), std::string::npos)
      << invalid.err;
  EXPECT_TRUE(invalid.out.empty()) << invalid.out;
}

// The file itself, before its content: only root may be able to change what runs.
TEST_F(DaemonStartupTest, ConfigFileMustBeARegularFileOnlyRootCanWrite) {
  const auto refused = [](const std::string& path, const std::string& why) {
    const RunResult check = daemon_command(kRoot, {"--check-config", path});
    EXPECT_EQ(check.exit_code, 78) << path;
    EXPECT_NE(check.err.find(path + ": " + why), std::string::npos) << check.err;
    // The daemon itself loads it the same way.
    const RunResult start = daemon_command(kRoot, {"--config", path});
    EXPECT_EQ(start.exit_code, 78) << path;
    EXPECT_NE(start.err.find("invalid config: " + path + ": " + why), std::string::npos)
        << start.err;
  };
  const std::string writable = dir_.write_file("writable.conf", valid_config(dir_), kRoot, 0666);
  refused(writable, "must be owned by root and writable only by root");
  const std::string callers = dir_.write_file("callers.conf", valid_config(dir_), caller());
  refused(callers, "must be owned by root and writable only by root");
  refused(dir_.make_dir("a-directory.conf", kRoot), "not a regular file");
  refused(dir_.path() + "/missing.conf", "cannot be opened: No such file or directory");
  const std::string link = dir_.path() + "/link.conf";
  ASSERT_EQ(
      symlink(dir_.write_file("target.conf", valid_config(dir_), kRoot).c_str(), link.c_str()), 0);
  refused(link, "cannot be opened: Too many levels of symbolic links");

  // Any user may check a file they can read; only root's ownership rule is root's to apply.
  const RunResult as_caller = daemon_command(caller(), {"--check-config", callers});
  EXPECT_EQ(as_caller.exit_code, 0) << as_caller.err;
  EXPECT_NE(as_caller.out.find("config OK"), std::string::npos) << as_caller.out;
}

TEST_F(DaemonStartupTest, LogFileThatCannotBeOpenedIsAConfigError) {
  const std::string log_dir = dir_.make_dir("logs", kRoot);
  const std::string config =
      dir_.write_file("log.conf", valid_config(dir_) + "log_file: \"" + log_dir + "\"\n", kRoot);
  const RunResult r = daemon_command(kRoot, {"--config", config});
  EXPECT_EQ(r.exit_code, 78) << r.err;
  EXPECT_NE(r.err.find("cannot open log " + log_dir), std::string::npos) << r.err;
}

TEST_F(DaemonStartupTest, SandboxHelperMustBeARegularFileOwnedByRoot) {
  std::string log;
  DaemonOptions options;
  options.sandbox_helper_path = dir_.make_dir("not-a-launcher", kRoot);
  EXPECT_EQ(start_failure(options, log), 1) << log;
  EXPECT_NE(log.find("must be a regular file owned by root and writable only by root"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("security_helper_daemon_start_failed"), std::string::npos) << log;

  options.sandbox_helper_path = dir_.path() + "/no-launcher";
  EXPECT_EQ(start_failure(options, log), 1) << log;
  EXPECT_NE(log.find("sandbox helper " + options.sandbox_helper_path + ": No such file"),
            std::string::npos)
      << log;
}

TEST_F(DaemonStartupTest, SocketPathsItRefuses) {
  std::string log;
  DaemonOptions options;

  options.socket_path = dir_.make_dir("open-to-all", kRoot, 01777) + "/helper.sock";
  EXPECT_EQ(start_failure(options, log), 1) << log;
  EXPECT_NE(log.find(dir_.path() +
                     "/open-to-all must be a directory owned by root and writable only by root"),
            std::string::npos)
      << log;
  EXPECT_TRUE(entries_of(dir_.path() + "/open-to-all").empty());

  options.socket_path = dir_.write_file("a-file.sock", "", kRoot);
  EXPECT_EQ(start_failure(options, log), 1) << log;
  EXPECT_NE(log.find(options.socket_path + " exists and is not a socket; not replacing it"),
            std::string::npos)
      << log;
  struct stat st {};
  ASSERT_EQ(lstat(options.socket_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the file was replaced";

  options.socket_path = dir_.path() + "/" + std::string(110, 's');
  EXPECT_EQ(start_failure(options, log), 1) << log;
  EXPECT_NE(log.find("is too long"), std::string::npos) << log;

  options.socket_path = "helper.sock";
  EXPECT_EQ(start_failure(options, log), 1) << log;
  EXPECT_NE(log.find("socket path helper.sock must be inside a directory"), std::string::npos)
      << log;
}

TEST_F(DaemonStartupTest, MissingSocketGroupFailsTheStartAndLeavesNoSocket) {
  std::string log;
  DaemonOptions options;
  const std::string run = dir_.make_dir("run", kRoot);
  options.socket_path = run + "/helper.sock";
  options.extra_config = "socket_group: \"pandotest-no-such-group\"";
  EXPECT_EQ(start_failure(options, log), 1) << log;
  EXPECT_NE(log.find("socket_group pandotest-no-such-group does not exist"), std::string::npos)
      << log;
  EXPECT_TRUE(entries_of(run).empty()) << "left in " << run << ": " << entries_of(run).front();
}

TEST_F(DaemonStartupTest, SocketGetsTheConfiguredModeAndGroup) {
  DaemonOptions options;
  options.extra_config = "socket_mode: 0660 socket_group: \"" + caller().name + "\"";
  Daemon daemon(options);
  struct stat st {};
  ASSERT_EQ(lstat(daemon.socket_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, caller().gid);

  const auto status_as = [&](const TestUser& user) {
    return run_as(user, {daemon.client(), "security", "status", "--socket", daemon.socket_path()});
  };
  const RunResult member = status_as(caller());
  EXPECT_EQ(member.exit_code, 0) << member.err;
  const RunResult outsider = status_as(other_user());
  EXPECT_EQ(outsider.exit_code, 69) << outsider.err;
  EXPECT_NE(outsider.err.find("Permission denied"), std::string::npos) << outsider.err;
}

TEST_F(DaemonStartupTest, SigintStopsTheDaemonLikeSigterm) {
  Daemon daemon;
  ASSERT_EQ(kill(daemon.pid(), SIGINT), 0);
  const int status = daemon.wait_exit(20s);
  ASSERT_TRUE(WIFEXITED(status)) << daemon.log();
  EXPECT_EQ(WEXITSTATUS(status), 0) << daemon.log();
  const std::string log = daemon.log();
  EXPECT_NE(log.find("\"event\":\"security_helper_daemon_signal_received\",\"signal\":2"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("security_helper_daemon_stopped"), std::string::npos) << log;
  struct stat st {};
  EXPECT_NE(lstat(daemon.socket_path().c_str(), &st), 0) << "socket file left behind";
}

// The soft limit (often 1024) would cap connections and passed fds; the service unit sets the
// hard one.
TEST_F(DaemonStartupTest, RaisesItsOpenFileLimitToTheHardLimit) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_GT(saved.rlim_max, 64u);
  rlimit lowered = saved;
  lowered.rlim_cur = std::min<rlim_t>(saved.rlim_max - 1, 512);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  std::unique_ptr<Daemon> daemon;
  try {
    daemon = std::make_unique<Daemon>();
  } catch (...) {
    setrlimit(RLIMIT_NOFILE, &saved);
    throw;
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  const std::string raised = "\"event\":\"security_helper_daemon_nofile_limit_raised\",\"from\":" +
                             std::to_string(lowered.rlim_cur) +
                             ",\"to\":" + std::to_string(saved.rlim_max);
  EXPECT_NE(daemon->log().find(raised), std::string::npos) << daemon->log();
  std::istringstream limits(read_file("/proc/" + std::to_string(daemon->pid()) + "/limits"));
  std::string soft;
  for (std::string line; std::getline(limits, line);) {
    if (line.rfind("Max open files ", 0) == 0) std::istringstream(line.substr(15)) >> soft;
  }
  EXPECT_EQ(soft, std::to_string(saved.rlim_max));
}

// Under systemd: the listening socket on fd 3 (LISTEN_PID, LISTEN_FDS), READY=1 and
// STOPPING=1 to NOTIFY_SOCKET, and idle_exit_seconds. The socket stays: it is the manager's.
TEST_F(DaemonStartupTest, SocketActivatedDaemonNotifiesServesAndExitsWhenIdle) {
  const std::string socket_path = dir_.path() + "/activated.sock";
  UniqueFd listener = unix_socket(SOCK_STREAM, socket_path);
  ASSERT_TRUE(listener.valid());
  ASSERT_EQ(chmod(socket_path.c_str(), 0666), 0);
  ASSERT_EQ(listen(listener.get(), 16), 0);
  UniqueFd notify = unix_socket(SOCK_DGRAM, dir_.path() + "/notify.sock");
  ASSERT_TRUE(notify.valid());
  const std::string config = dir_.write_file(
      "activated.conf",
      valid_config() + "idle_exit_seconds: 1\nsocket_path: \"" + socket_path + "\"\n", kRoot);
  const std::string notify_path = dir_.path() + "/notify.sock";
  ManagedDaemon daemon(config, dir_.path() + "/activated.log", [&](std::vector<std::string>& env) {
    env.push_back("LISTEN_FDS=1");
    env.push_back("LISTEN_PID=" + std::to_string(getpid()));
    env.push_back("NOTIFY_SOCKET=" + notify_path);
    // dup2() onto itself would keep close-on-exec.
    return listener.get() == 3 ? fcntl(3, F_SETFD, 0) == 0 : dup2(listener.get(), 3) == 3;
  });
  listener.reset();
  // Connected before the daemon runs: until this connection ends the daemon is not idle.
  std::optional<RawClient> holder;
  holder.emplace(socket_path, caller());

  const auto next_datagram = [&] {
    pollfd pfd{notify.get(), POLLIN, 0};
    if (poll(&pfd, 1, 20000) != 1) return std::string("(none)");
    char buffer[256];
    const ssize_t n = recv(notify.get(), buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string("(none)");
  };
  EXPECT_EQ(next_datagram(), "READY=1") << daemon.log();
  const RunResult status =
      run_as(caller(), {PANDO_CLIENT_BIN, "security", "status", "--socket", socket_path});
  EXPECT_EQ(status.exit_code, 0) << status.err << daemon.log();
  EXPECT_NE(status.out.find("version: "), std::string::npos) << status.out;
  holder.reset();

  const int exit_status = daemon.wait_exit(60s);
  ASSERT_TRUE(WIFEXITED(exit_status)) << daemon.log();
  EXPECT_EQ(WEXITSTATUS(exit_status), 0);
  EXPECT_NE(daemon.log().find("\"event\":\"security_helper_daemon_idle_exit\",\"idle_seconds\":1"),
            std::string::npos)
      << daemon.log();
  EXPECT_NE(daemon.log().find("(socket activation)"), std::string::npos) << daemon.log();
  EXPECT_EQ(next_datagram(), "STOPPING=1");
  struct stat st {};
  EXPECT_EQ(lstat(socket_path.c_str(), &st), 0) << "the manager's socket was removed";
}

// A host without a usable cgroup controller and a config that does not allow unlimited
// sessions: the daemon starts, says at once that every launch will be refused, and refuses them
// with ERROR_CGROUP_UNAVAILABLE; status shows the layer unavailable.
TEST_F(DaemonStartupTest, WithoutCgroupsEveryLaunchIsRefusedUnlessAllowed) {
  const std::string socket_path = dir_.make_dir("run", kRoot) + "/helper.sock";
  const std::string config = dir_.write_file(
      "nocgroups.conf", valid_config() + "socket_path: \"" + socket_path + "\"\n", kRoot);
  ManagedDaemon daemon(config, dir_.path() + "/nocgroups.log", [](std::vector<std::string>&) {
    return unshare(CLONE_NEWNS) == 0 &&
           mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
           umount2("/sys/fs/cgroup", MNT_DETACH) == 0;
  });
  ASSERT_TRUE(daemon.log_has("security_helper_daemon_listening")) << daemon.log();
  EXPECT_NE(daemon.log().find("\"event\":\"security_helper_daemon_cgroups_unavailable\""),
            std::string::npos)
      << daemon.log();
  EXPECT_NE(daemon.log().find("every launch will be refused"), std::string::npos) << daemon.log();

  const std::string project = dir_.make_dir("project", caller());
  const RunResult launch =
      run_as(caller(), {PANDO_CLIENT_BIN, "security", "launch", "--role", "workspace",
                        "--project-root", project, "--stdio", "--socket", socket_path});
  EXPECT_EQ(launch.exit_code, 77) << launch.err;
  EXPECT_NE(launch.err.find("ERROR_CGROUP_UNAVAILABLE"), std::string::npos) << launch.err;
  EXPECT_NE(launch.err.find("launches are refused unless the config allows running without"),
            std::string::npos)
      << launch.err;

  const RunResult status =
      run_as(caller(), {PANDO_CLIENT_BIN, "security", "status", "--socket", socket_path});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("layer cgroups: unavailable"), std::string::npos) << status.out;
}

// The config names the role users; one that does not exist, or root, cannot run a role: the
// launch is refused with ERROR_ROLE_NOT_CONFIGURED and what to do about it.
TEST_F(DaemonStartupTest, RoleUsersThatCannotRunARoleAreRefusedAtLaunch) {
  const std::string socket_path = dir_.make_dir("run", kRoot) + "/helper.sock";
  const std::string config =
      dir_.write_file("users.conf",
                      "core { user: \"root\" argv: \"/bin/sh\" }\n"
                      "workspace { user: \"pandotest-no-such-user\" argv: \"/bin/sh\" }\n"
                      "sandbox_helper_path: \"" +
                          sandbox_binary() + "\"\nsocket_path: \"" + socket_path + "\"\n" +
                          "cgroups { parent: \"" + cgroup_parent_name() + "\" }\n",
                      kRoot);
  ManagedDaemon daemon(config, dir_.path() + "/users.log",
                       [](std::vector<std::string>&) { return true; });
  ASSERT_TRUE(daemon.log_has("security_helper_daemon_listening")) << daemon.log();
  const std::string project = dir_.make_dir("project", caller());
  const auto launch_as = [&](const std::string& role) {
    return run_as(caller(), {PANDO_CLIENT_BIN, "security", "launch", "--role", role,
                             "--project-root", project, "--stdio", "--socket", socket_path});
  };
  const RunResult core = launch_as("core");
  EXPECT_EQ(core.exit_code, 77) << core.err;
  EXPECT_NE(core.err.find("ERROR_ROLE_NOT_CONFIGURED"), std::string::npos) << core.err;
  EXPECT_NE(core.err.find("role user root must not be root"), std::string::npos) << core.err;
  const RunResult workspace = launch_as("workspace");
  EXPECT_EQ(workspace.exit_code, 77) << workspace.err;
  EXPECT_NE(workspace.err.find("ERROR_ROLE_NOT_CONFIGURED"), std::string::npos) << workspace.err;
  EXPECT_NE(workspace.err.find("role user pandotest-no-such-user does not exist; run "
                               "`pando-helper security setup-users` as root"),
            std::string::npos)
      << workspace.err;
}

}  // namespace
}  // namespace pando::itest
