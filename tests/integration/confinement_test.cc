// Issues 3 and 4: what a session can see and do, end to end through the real
// daemon and client, as an unprivileged caller. Every check runs inside a
// sandbox and prints one marker line; the tests compare those lines.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "tests/integration/harness.h"

namespace pando::itest {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
namespace v1 = pando::helper::v1;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

struct stat stat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
  return st;
}

// "+line" / "-line" for every mount that appeared / disappeared.
std::string mount_changes(const std::vector<std::string>& before,
                          const std::vector<std::string>& after) {
  const std::set<std::string> old_set(before.begin(), before.end());
  const std::set<std::string> new_set(after.begin(), after.end());
  std::string changes;
  for (const auto& line : new_set) {
    if (!old_set.count(line)) changes += "+" + line + "\n";
  }
  for (const auto& line : old_set) {
    if (!new_set.count(line)) changes += "-" + line + "\n";
  }
  return changes;
}

// "<pid> <cmdline>" of each pid, for failure messages.
std::string describe(const std::vector<pid_t>& pids) {
  std::string text;
  for (pid_t pid : pids) {
    std::string cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    text += std::to_string(pid) + " " + cmdline + "\n";
  }
  return text;
}

// Pids of live processes whose parent is `parent`.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("PPid:", 0) == 0 && std::stol(line.substr(5)) == parent) {
        pids.push_back(static_cast<pid_t>(std::stol(name)));
      }
    }
  }
  return pids;
}

std::string status_field(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0) {
      const auto start = line.find_first_not_of(" \t", key.size() + 1);
      return start == std::string::npos ? "" : line.substr(start);
    }
  }
  return "";
}

std::set<std::string> fd_names(pid_t pid) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

std::string ns_of(pid_t pid, const std::string& kind) {
  std::error_code ec;
  return fs::read_symlink("/proc/" + std::to_string(pid) + "/ns/" + kind, ec).string();
}

// A launcher the daemon started ahead of requests (see SECURITY.md): root, in
// a mount namespace of its own, no child, /dev/null as 0-2, its control socket
// as 3 and otherwise only its own new root (attached on /tmp of its mount
// namespace until pivot_root), in no session cgroup. Nothing of a caller.
bool is_waiting_launcher(pid_t pid) {
  const std::string base = "/proc/" + std::to_string(pid);
  if (status_field(pid, "Name") != "pando-helper-sa") return false;
  if (status_field(pid, "Uid").rfind("0\t0\t0\t0", 0) != 0) return false;
  const std::string mnt = ns_of(pid, "mnt");
  if (mnt.empty() || mnt == ns_of(getpid(), "mnt")) return false;
  if (!children_of(pid).empty()) return false;
  for (const std::string& fd : fd_names(pid)) {
    std::error_code ec;
    const std::string target = fs::read_symlink(base + "/fd/" + fd, ec).string();
    const bool expected = fd == "0" || fd == "1" || fd == "2" ? target == "/dev/null"
                          : fd == "3"                         ? target.rfind("socket:", 0) == 0
                                      : target == "/tmp" || target.rfind("/tmp/", 0) == 0;
    if (!expected) return false;
  }
  return read_file(base + "/cgroup").find("session-") == std::string::npos;
}

// The launcher template (see SECURITY.md): root, in the host's mount and pid
// namespaces, no child of its own (its launchers are the daemon's), /dev/null
// as 0-2, its control socket as 3 and no other fd.
bool is_launcher_template(pid_t pid) {
  const std::string base = "/proc/" + std::to_string(pid);
  if (status_field(pid, "Name") != "pando-helper-sa") return false;
  if (status_field(pid, "Uid").rfind("0\t0\t0\t0", 0) != 0) return false;
  if (ns_of(pid, "mnt") != ns_of(getpid(), "mnt") || ns_of(pid, "pid") != ns_of(getpid(), "pid")) {
    return false;
  }
  if (!children_of(pid).empty()) return false;
  std::set<std::string> fds = fd_names(pid);
  if (fds != std::set<std::string>{"0", "1", "2", "3"}) return false;
  for (const std::string fd : {"0", "1", "2"}) {
    std::error_code ec;
    if (fs::read_symlink(base + "/fd/" + fd, ec).string() != "/dev/null") return false;
  }
  std::error_code ec;
  return fs::read_symlink(base + "/fd/3", ec).string().rfind("socket:", 0) == 0;
}

// The daemon's children that are neither waiting launchers nor the template.
std::vector<pid_t> session_children_of(pid_t daemon) {
  std::vector<pid_t> out;
  for (pid_t pid : children_of(daemon)) {
    if (!is_waiting_launcher(pid) && !is_launcher_template(pid)) out.push_back(pid);
  }
  return out;
}

// The daemon's waiting launchers.
std::vector<pid_t> waiting_launchers_of(pid_t daemon) {
  std::vector<pid_t> out;
  for (pid_t pid : children_of(daemon)) {
    if (is_waiting_launcher(pid)) out.push_back(pid);
  }
  return out;
}

// The first process whose argv is exactly `args`; -1 when none.
pid_t process_with_args(const std::vector<std::string>& args) {
  std::string wanted;
  for (const std::string& arg : args) wanted += arg + '\0';
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (read_file(entry.path().string() + "/cmdline") == wanted) return std::stoi(name);
  }
  return -1;
}

// Whether the freezer of `pid`'s cgroup holds it (v1 freezer.state, v2 cgroup.events);
// nullopt when neither can be read.
std::optional<bool> cgroup_frozen(pid_t pid) {
  std::istringstream lines(read_file("/proc/" + std::to_string(pid) + "/cgroup"));
  std::string unified;
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find(':');
    const size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers == "freezer") {
      const std::string state = read_file("/sys/fs/cgroup/freezer" + path + "/freezer.state");
      if (state.empty()) return std::nullopt;
      return state == "FROZEN\n";
    }
    if (controllers.empty()) unified = path;
  }
  const std::string events = read_file("/sys/fs/cgroup" + unified + "/cgroup.events");
  if (unified.empty() || events.empty()) return std::nullopt;
  return events.find("frozen 1") != std::string::npos;
}

class ConfinementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
    start_daemon();
  }
  void start_daemon(DaemonOptions options = {}) {
    daemon_.reset();
    daemon_ = std::make_unique<Daemon>(options);
    project_ = daemon_->dir().make_dir("proj", caller());
  }
  // A workspace session on `project` whose role ends up as `sleep <seconds>`, and that
  // process's pid.
  std::pair<std::unique_ptr<RunningClient>, pid_t> start_sleeper(const std::string& project,
                                                                 const std::string& seconds) {
    auto client = std::make_unique<RunningClient>(
        caller(), std::vector<std::string>{daemon_->client(), "security", "launch", "--role",
                                           "workspace", "--project-root", project, "--stdio",
                                           "--socket", daemon_->socket_path()});
    EXPECT_TRUE(client->write_all("echo ready; exec sleep " + seconds + "\n"));
    EXPECT_TRUE(client->read_until("ready", 20s)) << daemon_->log();
    pid_t pid = -1;
    EXPECT_TRUE(eventually(
        [&] {
          pid = process_with_args({"sleep", seconds});
          return pid > 0;
        },
        10s));
    return {std::move(client), pid};
  }
  RunResult sh(const std::string& script, const std::string& role = "workspace",
               RunOptions options = {}) {
    options.stdin_data = script + "\n" + options.stdin_data;
    return launch(*daemon_, caller(), role, project_, options);
  }
  RunResult sh_in(const std::string& project, const std::string& script,
                  const std::string& role = "workspace") {
    RunOptions options;
    options.stdin_data = script + "\n";
    return launch(*daemon_, caller(), role, project, options);
  }
  std::string probe() const { return daemon_->probe(); }
  void expect_sessions_leave_nothing(unsigned prestarted);

  std::unique_ptr<Daemon> daemon_;
  std::string project_;
};

// --- issue 3: what must stay out of reach ---------------------------------------

TEST_F(ConfinementTest, HostFilesAndNeighboursAreOutOfReach) {
  const std::string parent = daemon_->dir().path();
  const std::string others = daemon_->dir().make_dir("others", other_user(), 0755);
  daemon_->dir().write_file("others/their-notes.txt", "other-user-secret", other_user(), 0644);
  daemon_->dir().write_file("neighbour-marker", "neighbour-secret", caller(), 0644);

  for (const std::string role : {"workspace", "core"}) {
    SCOPED_TRACE(role);
    const RunResult r = sh(std::string(kCheck) + "P=" + parent + " O=" + others + " R=" + role +
                               "; "
                               "t read-shadow cat /etc/shadow; "
                               "t list-home ls /home; "
                               "t list-root ls /root; "
                               "t list-other ls $O; "
                               "t read-other cat $O/their-notes.txt; "
                               "t read-marker cat $P/neighbour-marker; "
                               "t write-usr touch /usr/pandotest-$R; "
                               "t write-etc touch /etc/pandotest-$R; "
                               "t write-parent touch $P/pandotest-$R; "
                               "t list-daemon-run ls $P/run; "
                               "echo \"parent $(ls -a $P | tr '\\n' ' ')\"; "
                               "echo \"etc $(ls -a /etc | tr '\\n' ' ')\"",
                           role);
    ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
    EXPECT_EQ(r.err, "");
    const auto lines = lines_of(r.out);
    const std::vector<std::string> want_denied = {
        "read-shadow no", "list-home no", "list-root no", "list-other no",   "read-other no",
        "read-marker no", "write-usr no", "write-etc no", "write-parent no", "list-daemon-run no"};
    ASSERT_GE(lines.size(), want_denied.size() + 2) << r.out;
    for (size_t i = 0; i < want_denied.size(); ++i) EXPECT_EQ(lines[i], want_denied[i]);
    // The project's parent holds only what the view put there: the project and the bin dir.
    EXPECT_EQ(lines[want_denied.size()], "parent . .. bin proj ") << r.out;
    const std::string& etc = lines[want_denied.size() + 1];
    for (const char* host_only : {" shadow ", " gshadow ", " sudoers ", " ssh "}) {
      EXPECT_EQ(etc.find(host_only), std::string::npos) << etc;
    }
    EXPECT_EQ(r.out.find("secret"), std::string::npos) << r.out;
    for (const std::string& path :
         {"/usr/pandotest-" + role, "/etc/pandotest-" + role, parent + "/pandotest-" + role}) {
      EXPECT_FALSE(fs::exists(path)) << path;
    }
  }
}

TEST_F(ConfinementTest, DotEnvFilesInTheProjectAreMasked) {
  daemon_->dir().write_file("proj/.env", "API_KEY=dotenv-secret-1\n", caller(), 0600);
  daemon_->dir().make_dir("proj/sub", caller());
  daemon_->dir().write_file("proj/sub/.env.local", "API_KEY=dotenv-secret-2\n", caller(), 0600);
  daemon_->dir().write_file("proj/visible.txt", "plain-content\n", caller(), 0644);
  for (const std::string role : {"workspace", "core"}) {
    SCOPED_TRACE(role);
    const RunResult r = sh("cat .env sub/.env.local; cat visible.txt; echo done", role);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "plain-content\ndone\n");
  }
  EXPECT_EQ(read_file(project_ + "/.env"), "API_KEY=dotenv-secret-1\n");
}

TEST_F(ConfinementTest, HostListenersAndTheDaemonSocketAreUnreachable) {
  UniqueFd tcp(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in in_addr{};
  in_addr.sin_family = AF_INET;
  in_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(tcp.get(), reinterpret_cast<sockaddr*>(&in_addr), sizeof(in_addr)), 0);
  ASSERT_EQ(listen(tcp.get(), 8), 0);
  socklen_t in_length = sizeof(in_addr);
  ASSERT_EQ(getsockname(tcp.get(), reinterpret_cast<sockaddr*>(&in_addr), &in_length), 0);
  const std::string port = std::to_string(ntohs(in_addr.sin_port));

  const std::string abstract_name = "pandotest-abstract-" + std::to_string(getpid());
  UniqueFd unix_listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_un un_addr{};
  un_addr.sun_family = AF_UNIX;
  std::memcpy(un_addr.sun_path + 1, abstract_name.data(), abstract_name.size());
  const auto un_length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract_name.size());
  ASSERT_EQ(bind(unix_listener.get(), reinterpret_cast<sockaddr*>(&un_addr), un_length), 0);
  ASSERT_EQ(listen(unix_listener.get(), 8), 0);

  // Control: the same probe on the host, as the caller, reaches all three.
  const RunResult host = run_as(
      caller(), {"/bin/sh", "-c",
                 probe() + " connect-tcp " + port + "; " + probe() + " connect-abstract " +
                     abstract_name + "; " + probe() + " connect-unix " + daemon_->socket_path()});
  ASSERT_EQ(host.out, "connect-tcp ok\nconnect-abstract ok\nconnect-unix ok\n") << host.err;
  for (int fd : {tcp.get(), unix_listener.get()}) {
    for (;;) {
      const int accepted = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (accepted < 0) break;
      close(accepted);
    }
  }

  for (const std::string role : {"workspace", "core"}) {
    SCOPED_TRACE(role);
    const RunResult r =
        sh(probe() + " connect-tcp " + port + "; " + probe() + " connect-abstract " +
               abstract_name + "; " + probe() + " connect-unix " + daemon_->socket_path(),
           role);
    ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
    // TCP: Landlock (ABI >= 4) denies every TCP connect with EACCES; without it
    // the separate network namespace's own loopback refuses. The abstract
    // socket namespace is per network namespace. The daemon's socket path does
    // not exist in the view.
    const auto lines = lines_of(r.out);
    ASSERT_EQ(lines.size(), 3u) << r.out;
    EXPECT_TRUE(lines[0] == "connect-tcp errno=EACCES" ||
                lines[0] == "connect-tcp errno=ECONNREFUSED")
        << lines[0];
    EXPECT_EQ(lines[1], "connect-abstract errno=ECONNREFUSED");
    EXPECT_EQ(lines[2], "connect-unix errno=ENOENT");
    EXPECT_LT(accept4(tcp.get(), nullptr, nullptr, SOCK_CLOEXEC), 0) << "a connection arrived";
    EXPECT_LT(accept4(unix_listener.get(), nullptr, nullptr, SOCK_CLOEXEC), 0)
        << "a connection arrived";
  }
}

TEST_F(ConfinementTest, OnlyTheSessionsProcessesAreVisible) {
  // A long-running process of the same role user in another session.
  RunningClient other(
      caller(), {daemon_->client(), "security", "launch", "--role", "workspace", "--project-root",
                 project_, "--stdio", "--socket", daemon_->socket_path()});
  ASSERT_TRUE(other.write_all("echo ready; exec sleep 1000\n"));
  ASSERT_TRUE(other.read_until("ready", 30s));

  for (const std::string role : {"workspace", "core"}) {
    SCOPED_TRACE(role);
    // After exec, the session holds init (1) and ls itself ($$).
    const RunResult r = sh("echo self $$; exec ls /proc", role);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto lines = lines_of(r.out);
    ASSERT_FALSE(lines.empty());
    ASSERT_EQ(lines[0].rfind("self ", 0), 0u);
    std::set<std::string> pids;
    for (size_t i = 1; i < lines.size(); ++i) {
      if (lines[i].find_first_not_of("0123456789") == std::string::npos) pids.insert(lines[i]);
    }
    // Init (1) is not dumpable, so hidepid=invisible may hide it from the role too.
    const std::string self = lines[0].substr(5);
    EXPECT_TRUE(pids == (std::set<std::string>{self}) || pids == (std::set<std::string>{"1", self}))
        << r.out;
    const RunResult ps = sh("exec ps -e -o pid=,comm=", role);
    EXPECT_EQ(ps.exit_code, 0) << ps.err;
    EXPECT_NE(ps.out.find(" ps\n"), std::string::npos) << ps.out;
    for (const std::string& line : lines_of(ps.out)) {
      const std::string comm = line.substr(line.find_last_of(' ') + 1);
      EXPECT_TRUE(comm == "ps" || comm == "pando-helper-sa") << ps.out;
    }
  }
  other.close_stdin();
  kill(other.pid(), SIGTERM);
  other.wait(20s);
}

// --- issue 3: what must work ------------------------------------------------------

TEST_F(ConfinementTest, WorkspaceReadsAndWritesTheProjectAsTheCaller) {
  daemon_->dir().write_file("proj/private.txt", "caller-private\n", caller(), 0600);
  const RunResult r = sh("cat private.txt && echo made-inside > created.txt && echo wrote");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "caller-private\nwrote\n");
  const struct stat st = stat_of(project_ + "/created.txt");
  EXPECT_EQ(st.st_uid, caller().uid);
  EXPECT_EQ(st.st_gid, caller().gid);
  EXPECT_EQ(read_file(project_ + "/created.txt"), "made-inside\n");
}

TEST_F(ConfinementTest, CoreReadsButCannotWriteTheProject) {
  daemon_->dir().write_file("proj/private.txt", "caller-private\n", caller(), 0600);
  const RunResult r = sh(std::string(kCheck) +
                             "cat private.txt; t write-new touch core-made.txt; "
                             "t append sh -c 'echo more >> private.txt'; t mkdir mkdir core-dir; "
                             "t remove rm -f private.txt",
                         "core");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "caller-private\nwrite-new no\nappend no\nmkdir no\nremove no\n");
  EXPECT_FALSE(fs::exists(project_ + "/core-made.txt"));
  EXPECT_FALSE(fs::exists(project_ + "/core-dir"));
  EXPECT_EQ(read_file(project_ + "/private.txt"), "caller-private\n");
}

TEST_F(ConfinementTest, HomeAndTmpdirAreWritableInBothRoles) {
  for (const std::string role : {"workspace", "core"}) {
    SCOPED_TRACE(role);
    const std::string private_tmp_file =
        "/tmp/pandotest-private-" + std::to_string(getpid()) + "-" + role;
    const RunResult r = sh(std::string(kCheck) +
                               "t home sh -c 'echo h > \"$HOME/h.txt\"'; "
                               "t tmpdir sh -c 'echo t > \"$TMPDIR/t.txt\"'; "
                               "t tmp sh -c 'echo t > " +
                               private_tmp_file + "'",
                           role);
    ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
    EXPECT_EQ(r.out, "home yes\ntmpdir yes\ntmp yes\n");
    // /tmp (TMPDIR) inside is the session's own tmpfs; HOME is on disk, the caller's.
    EXPECT_FALSE(fs::exists(private_tmp_file)) << private_tmp_file;
    const std::string home_file = project_ + "/.pando-sandbox/" + role + "/home/h.txt";
    const struct stat st = stat_of(home_file);
    EXPECT_EQ(st.st_uid, caller().uid) << home_file;
    EXPECT_EQ(st.st_gid, caller().gid) << home_file;
  }
}

TEST_F(ConfinementTest, NetworkHasOnlyLoopbackAndItIsUp) {
  for (const std::string role : {"workspace", "core"}) {
    SCOPED_TRACE(role);
    const RunResult r = sh("exec " + probe() + " interfaces", role);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "lo up\n");
  }
}

// `prestarted`: the daemon's prestarted_sandboxes; that many waiting
// launchers and the launcher template (and nothing else) may remain its
// children.
void ConfinementTest::expect_sessions_leave_nothing(unsigned prestarted) {
  // Orphans of the daemon (a launcher or role process that outlived it) are
  // reparented to this process instead of init, where they can be counted.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  const auto mounts_before = host_mounts();
  for (const std::string role : {"workspace", "core"}) {
    const RunResult r = sh("echo x > $TMPDIR/x; sleep 1000 & (sleep 1000 &); echo started", role);
    EXPECT_EQ(r.out, "started\n") << r.err;
  }
  {
    RunningClient killed(
        caller(), {daemon_->client(), "security", "launch", "--role", "workspace", "--project-root",
                   project_, "--stdio", "--socket", daemon_->socket_path()});
    ASSERT_TRUE(killed.write_all("sleep 1000 & echo ready; exec sleep 1000\n"));
    ASSERT_TRUE(killed.read_until("ready", 30s));
    kill(killed.pid(), SIGKILL);
    killed.wait(10s);
  }
  EXPECT_TRUE(eventually(
      [] {
        return processes_of(workspace_user().uid).empty() && processes_of(core_user().uid).empty();
      },
      10s))
      << describe(processes_of(workspace_user().uid)) << describe(processes_of(core_user().uid));
  EXPECT_TRUE(eventually(
      [&] {
        return session_children_of(daemon_->pid()).empty() &&
               children_of(daemon_->pid()).size() <= prestarted + 1;
      },
      10s))
      << "still children of the daemon:\n"
      << describe(children_of(daemon_->pid()));
  EXPECT_EQ(mount_changes(mounts_before, host_mounts()), "");
  const pid_t daemon_pid = daemon_->pid();
  const int status = daemon_->stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::vector<pid_t> orphans = children_of(getpid());
  for (pid_t pid : orphans) {
    ADD_FAILURE() << "outlived daemon " << daemon_pid << ": " << describe({pid});
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  EXPECT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0), 0);
}

TEST_F(ConfinementTest, SessionsLeaveNothingOnTheHost) { expect_sessions_leave_nothing(2); }

TEST_F(ConfinementTest, SessionsLeaveNothingOnTheHostWithoutPrestartedLaunchers) {
  DaemonOptions options;
  options.extra_config = "prestarted_sandboxes: 0\n";
  start_daemon(options);
  expect_sessions_leave_nothing(0);
}

// Each prestarted launcher serves exactly one session: its namespaces are
// never seen by a second one, and it holds nothing of a caller while it waits.
TEST_F(ConfinementTest, PrestartedLaunchersServeOneSessionEach) {
  DaemonOptions options;
  options.extra_config = "prestarted_sandboxes: 1\n";
  start_daemon(options);
  auto waiting = [&] {
    const auto launchers = waiting_launchers_of(daemon_->pid());
    return launchers.size() == 1 ? launchers[0] : pid_t{-1};
  };
  // Take one whose namespaces can be read (a launcher may exit between the
  // listing and the readlink).
  pid_t first = -1;
  std::string first_net;
  ASSERT_TRUE(eventually(
      [&] {
        first = waiting();
        first_net = first > 0 ? ns_of(first, "net") : "";
        return !first_net.empty() && waiting() == first;
      },
      10s))
      << describe(children_of(daemon_->pid())) << daemon_->log();
  EXPECT_NE(first_net, ns_of(getpid(), "net"));
  EXPECT_NE(ns_of(first, "mnt"), ns_of(getpid(), "mnt"));
  EXPECT_NE(ns_of(first, "pid_for_children"), ns_of(getpid(), "pid_for_children"));
  // Preparing ahead of requests never takes CPU from a session (the policy
  // is the launcher's first step)...
  EXPECT_TRUE(eventually([&] { return sched_getscheduler(first) == SCHED_IDLE; }, 10s))
      << sched_getscheduler(first);

  // Two sessions alive at once (namespace numbers are reused once freed):
  // the first gets the waiting launcher, and they share no namespace.
  const std::string show =
      "readlink /proc/self/ns/net /proc/self/ns/mnt /proc/self/ns/ipc; chrt -p $$; echo ready; "
      "read x || true\n";
  auto start = [&] {
    return std::make_unique<RunningClient>(
        caller(), std::vector<std::string>{daemon_->client(), "security", "launch", "--role",
                                           "workspace", "--project-root", project_, "--stdio",
                                           "--socket", daemon_->socket_path()});
  };
  auto one = start();
  ASSERT_TRUE(one->write_all(show));
  ASSERT_TRUE(one->read_until("ready\n", 30s)) << one->out();
  auto two = start();
  ASSERT_TRUE(two->write_all(show));
  ASSERT_TRUE(two->read_until("ready\n", 30s)) << two->out();
  // Seen from the host while both run: every process of the role user is in
  // one of two mount namespaces.
  std::set<std::string> host_mnt;
  for (pid_t pid : processes_of(workspace_user().uid)) host_mnt.insert(ns_of(pid, "mnt"));
  host_mnt.erase("");
  EXPECT_EQ(host_mnt.size(), 2u) << describe(processes_of(workspace_user().uid));
  const auto one_ns = lines_of(one->out());
  const auto two_ns = lines_of(two->out());
  one->close_stdin();
  two->close_stdin();
  EXPECT_EQ(one->wait(), 0);
  EXPECT_EQ(two->wait(), 0);
  ASSERT_GE(one_ns.size(), 4u) << one->out();
  ASSERT_GE(two_ns.size(), 4u) << two->out();
  EXPECT_EQ(one_ns[0], first_net) << "the first session did not get the waiting launcher";
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NE(one_ns[i], two_ns[i]) << one->out() << two->out();
  }
  // ...and the role itself runs with the normal policy.
  EXPECT_NE(one_ns[3].find("SCHED_OTHER"), std::string::npos) << one_ns[3];

  // The used launcher is gone; a fresh one waits with a namespace no live
  // session has.
  EXPECT_TRUE(eventually([&] { return kill(first, 0) != 0; }, 10s));
  ASSERT_TRUE(eventually([&] { return waiting() > 0; }, 10s))
      << describe(children_of(daemon_->pid()));
  EXPECT_NE(waiting(), first);

  // A waiting launcher that died is not handed out: the session gets a new one.
  const pid_t crashed = waiting();
  ASSERT_EQ(kill(crashed, SIGKILL), 0);
  ASSERT_TRUE(eventually([&] { return status_field(crashed, "State").rfind("Z", 0) == 0; }, 10s));
  const RunResult after_crash = sh("echo alive");
  EXPECT_EQ(after_crash.exit_code, 0) << after_crash.err;
  EXPECT_EQ(after_crash.out, "alive\n");
  EXPECT_NE(daemon_->log().find("prestarted_sandbox_exited"), std::string::npos);
}

// A daemon without CAP_SYS_NICE (a unit that does not grant it) could not take
// a launcher out of SCHED_IDLE: its launchers prepare at the normal policy.
TEST_F(ConfinementTest, PrestartedLaunchersWorkWithoutCapSysNice) {
  DaemonOptions options;
  options.extra_config = "prestarted_sandboxes: 1\n";
  options.drop_capabilities = {CAP_SYS_NICE};
  start_daemon(options);
  pid_t waiting = -1;
  ASSERT_TRUE(eventually(
      [&] {
        const auto launchers = waiting_launchers_of(daemon_->pid());
        waiting = launchers.size() == 1 ? launchers[0] : -1;
        return waiting > 0;
      },
      10s))
      << describe(children_of(daemon_->pid()));
  EXPECT_EQ(sched_getscheduler(waiting), SCHED_OTHER);
  for (pid_t pid : children_of(daemon_->pid())) {
    if (is_launcher_template(pid)) {
      EXPECT_EQ(sched_getscheduler(pid), SCHED_OTHER);
    }
  }
  const RunResult r = sh("chrt -p $$");
  EXPECT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_NE(r.out.find("SCHED_OTHER"), std::string::npos) << r.out;
}

// The launcher template is the daemon's one long-lived helper: killed, it is
// started again by the next launch, which still succeeds, and sessions never
// see it.
TEST_F(ConfinementTest, LauncherTemplateIsRestartedWhenItDies) {
  DaemonOptions options;
  options.extra_config = "prestarted_sandboxes: 0\n";
  start_daemon(options);
  auto templates = [&] {
    std::vector<pid_t> out;
    for (pid_t pid : children_of(daemon_->pid())) {
      if (is_launcher_template(pid)) out.push_back(pid);
    }
    return out;
  };
  // Until it has read the seccomp program the template still holds fd 4.
  ASSERT_TRUE(eventually([&] { return templates().size() == 1; }, 10s))
      << describe(children_of(daemon_->pid()));
  const pid_t first = templates()[0];
  const RunResult before = sh("echo one");
  EXPECT_EQ(before.out, "one\n") << before.err;
  EXPECT_EQ(templates(), std::vector<pid_t>{first});

  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_TRUE(eventually([&] { return status_field(first, "State").rfind("Z", 0) == 0; }, 10s));
  const RunResult after = sh("echo two; ps -e -o args=");
  EXPECT_EQ(after.exit_code, 0) << after.err << daemon_->log();
  EXPECT_EQ(after.out.rfind("two\n", 0), 0u) << after.out;
  EXPECT_EQ(after.out.find("--template"), std::string::npos) << after.out;
  EXPECT_TRUE(eventually([&] { return kill(first, 0) != 0; }, 10s))
      << "the dead template was not reaped";
  EXPECT_NE(daemon_->log().find("launcher_template_restarted"), std::string::npos);
  ASSERT_TRUE(eventually([&] { return templates().size() == 1; }, 10s))
      << describe(children_of(daemon_->pid()));
  EXPECT_NE(templates()[0], first);
  EXPECT_TRUE(eventually([&] { return session_children_of(daemon_->pid()).empty(); }, 10s))
      << describe(children_of(daemon_->pid()));
}

// The daemon asks the template for prestarted launchers and goes on serving:
// a template that does not answer (stopped here; slow on a busy machine) holds
// up no request. Waiting for it used to block the event loop until the
// template's answer timed out, and the template was then killed.
TEST_F(ConfinementTest, ATemplateThatDoesNotAnswerHoldsUpNoRequest) {
  DaemonOptions options;
  options.extra_config = "prestarted_sandboxes: 1\n";
  start_daemon(options);
  pid_t template_pid = -1;
  ASSERT_TRUE(eventually(
      [&] {
        template_pid = -1;
        for (pid_t pid : children_of(daemon_->pid())) {
          if (is_launcher_template(pid)) template_pid = pid;
        }
        return template_pid > 0 && waiting_launchers_of(daemon_->pid()).size() == 1;
      },
      10s))
      << describe(children_of(daemon_->pid()));
  // Launchers are prepared at SCHED_IDLE, the template's clone() included.
  EXPECT_EQ(sched_getscheduler(template_pid), SCHED_IDLE);

  ASSERT_EQ(kill(template_pid, SIGSTOP), 0);
  // Takes the waiting launcher; the daemon then asks the stopped template for
  // the next one.
  const RunResult first = sh("echo one");
  EXPECT_EQ(first.out, "one\n") << first.err << daemon_->log();
  const RunResult status = run_as(
      caller(), {daemon_->client(), "security", "status", "--socket", daemon_->socket_path()});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  ASSERT_EQ(kill(template_pid, SIGCONT), 0);

  ASSERT_TRUE(eventually([&] { return waiting_launchers_of(daemon_->pid()).size() == 1; }, 10s))
      << describe(children_of(daemon_->pid()));
  const RunResult second = sh("echo two");
  EXPECT_EQ(second.out, "two\n") << second.err << daemon_->log();
  EXPECT_EQ(daemon_->log().find("prestart_failed"), std::string::npos) << daemon_->log();
  EXPECT_EQ(daemon_->log().find("launcher_template_restarted"), std::string::npos);
  // (While it answers a request it briefly holds more fds than a waiting template.)
  EXPECT_TRUE(eventually([&] { return is_launcher_template(template_pid); }, 10s))
      << "the template was replaced";
  EXPECT_EQ(sched_getscheduler(template_pid), SCHED_IDLE);
}

// A launcher walks the project for secret files by path (step 12): another session of the
// caller that can write the project could move a directory out of the walk's way meanwhile
// and a `.env` in it would go unmasked. So from the plan until the launcher reports, such a
// session is paused in its freezer. Here the waiting launchers are stopped, so the next launch
// holds its walk open; the caller's workspace session on the same project is frozen, one on
// another project is not, and both run again once the launch is through.
TEST_F(ConfinementTest, AnotherWriterOfTheProjectIsPausedWhileALauncherWalksIt) {
  DaemonOptions options;
  options.extra_config = "prestarted_sandboxes: 2\n";
  start_daemon(options);
  const std::string other = daemon_->dir().make_dir("other", caller());
  const auto [same, same_pid] = start_sleeper(project_, "1001");
  const auto [elsewhere, elsewhere_pid] = start_sleeper(other, "1002");
  ASSERT_GT(same_pid, 0);
  ASSERT_GT(elsewhere_pid, 0);
  ASSERT_EQ(cgroup_frozen(same_pid), std::optional<bool>(false)) << daemon_->log();

  std::vector<pid_t> waiting;
  ASSERT_TRUE(eventually(
      [&] {
        waiting = waiting_launchers_of(daemon_->pid());
        return waiting.size() == 2;
      },
      10s))
      << describe(children_of(daemon_->pid()));
  for (pid_t pid : waiting) ASSERT_EQ(kill(pid, SIGSTOP), 0);
  RunningClient walker(caller(),
                       {daemon_->client(), "security", "launch", "--role", "core", "--project-root",
                        project_, "--stdio", "--socket", daemon_->socket_path()});
  ASSERT_TRUE(walker.write_all("echo walked\n"));
  EXPECT_TRUE(eventually([&] { return cgroup_frozen(same_pid) == std::optional<bool>(true); }, 10s))
      << daemon_->log();
  EXPECT_EQ(cgroup_frozen(elsewhere_pid), std::optional<bool>(false));
  for (pid_t pid : waiting) kill(pid, SIGCONT);

  EXPECT_TRUE(walker.read_until("walked", 20s)) << walker.out() << daemon_->log();
  EXPECT_TRUE(
      eventually([&] { return cgroup_frozen(same_pid) == std::optional<bool>(false); }, 10s));
  EXPECT_EQ(daemon_->log().find("walk_unpaused"), std::string::npos);
}

// A workspace role that starts while another launch of its project still walks it waits in the
// freezer until that walk is through. The walking launch takes the one prestarted launcher,
// stopped here, so its walk window stays open; the writer's launch gets a fresh launcher.
TEST_F(ConfinementTest, AWriterStartingDuringAnotherWalkWaitsForIt) {
  DaemonOptions options;
  options.extra_config = "prestarted_sandboxes: 1\n";
  start_daemon(options);
  std::vector<pid_t> waiting;
  ASSERT_TRUE(eventually(
      [&] {
        waiting = waiting_launchers_of(daemon_->pid());
        return waiting.size() == 1;
      },
      10s))
      << describe(children_of(daemon_->pid()));
  const pid_t stopped = waiting.front();
  ASSERT_EQ(kill(stopped, SIGSTOP), 0);
  RunningClient walker(caller(),
                       {daemon_->client(), "security", "launch", "--role", "core", "--project-root",
                        project_, "--stdio", "--socket", daemon_->socket_path()});
  ASSERT_TRUE(walker.write_all("echo walked\n"));
  // The walker's session cgroup is made right before it takes the stopped launcher, on the
  // event loop: once it is there, its walk window is open.
  ASSERT_TRUE(eventually([] { return !session_cgroup_dirs().empty(); }, 10s)) << daemon_->log();

  RunningClient writer(
      caller(), {daemon_->client(), "security", "launch", "--role", "workspace", "--project-root",
                 project_, "--stdio", "--socket", daemon_->socket_path()});
  ASSERT_TRUE(writer.write_all("echo ready; exec sleep 1004\n"));
  EXPECT_TRUE(eventually(
      [&] {
        const auto processes = processes_of(workspace_user().uid);
        return !processes.empty() && std::all_of(processes.begin(), processes.end(), [](pid_t pid) {
          return cgroup_frozen(pid) == std::optional<bool>(true);
        });
      },
      10s))
      << daemon_->log();
  ASSERT_EQ(kill(stopped, SIGCONT), 0);
  EXPECT_TRUE(walker.read_until("walked", 20s)) << walker.out() << daemon_->log();
  EXPECT_TRUE(writer.read_until("ready", 20s)) << writer.out() << daemon_->log();
  EXPECT_TRUE(eventually(
      [] {
        const pid_t sleeper = process_with_args({"sleep", "1004"});
        return sleeper > 0 && cgroup_frozen(sleeper) == std::optional<bool>(false);
      },
      10s));
}

// Without cgroups (`allow_unlimited`) there is no freezer: the launch goes on beside the
// writer, and the log says so.
TEST_F(ConfinementTest, WithoutAFreezerAWalkBesideAWriterIsLogged) {
  DaemonOptions options;
  options.without_cgroups = true;
  start_daemon(options);
  const auto [same, same_pid] = start_sleeper(project_, "1003");
  ASSERT_GT(same_pid, 0);
  const RunResult r = sh("echo walked", "core");
  EXPECT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "walked\n");
  EXPECT_NE(daemon_->log().find("_walk_unpaused\",\"session\""), std::string::npos)
      << daemon_->log();
}

// Only the daemon starts pando-helper-sandbox (as its launcher template, with
// a control socket as fd 3): run by hand it must refuse before doing anything.
TEST_F(ConfinementTest, LauncherRefusesToRunOutsideTheDaemon) {
  const auto mounts_before = host_mounts();
  struct stat own {};
  ASSERT_EQ(stat("/proc/self/ns/mnt", &own), 0);
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {}, {"1"}, {std::to_string(own.st_ino)}, {"--template"}, {"--template", "x"}}) {
    std::vector<std::string> args{sandbox_binary()};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // fd 3 is no control socket.
      const int null = open("/dev/null", O_RDWR);
      if (null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 || dup2(null, 3) < 0) _exit(125);
      execv(argv[0], argv.data());
      _exit(126);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 64)
        << "argv[1] " << (extra.empty() ? "(none)" : extra[0]) << ": status " << status;
  }
  EXPECT_EQ(mount_changes(mounts_before, host_mounts()), "");
}

// --- issue 3: caller-controlled paths -------------------------------------------

class HostTreeWatch {
 public:
  explicit HostTreeWatch(std::string dir) : dir_(std::move(dir)), before_(names_in(dir_)) {}
  // Names the launch would create if it followed a planted symlink.
  void expect_unchanged() const {
    const auto after = names_in(dir_);
    for (const char* name : {".pando-sandbox", "workspace", "core", "home", "tmp", "cache",
                             "config", "data", "pando-auth"}) {
      EXPECT_EQ(after.count(name), before_.count(name)) << dir_ << "/" << name << " appeared";
    }
  }

 private:
  std::string dir_;
  std::set<std::string> before_;
};

TEST_F(ConfinementTest, PlantedSymlinksAreNeverFollowed) {
  const HostTreeWatch etc("/etc"), root("/root");
  auto expect_rejected = [&](const std::string& project, const std::string& code) {
    const RunResult r = sh_in(project, "echo launched");
    EXPECT_EQ(r.exit_code, 77) << r.out << r.err;
    EXPECT_NE(r.err.find(code), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  };
  {  // the project root itself: the client resolves it as the caller (and /etc is refused as
     // a system location); the daemon never follows one in what it receives
    const std::string link = daemon_->dir().path() + "/root-link";
    ASSERT_EQ(symlink("/etc", link.c_str()), 0);
    expect_rejected(link, "ERROR_PATH_FORBIDDEN");
    RawClient raw(daemon_->socket_path(), caller());
    ASSERT_TRUE(raw.send_preface());
    ASSERT_TRUE(
        raw.send_frame(v1::FRAME_LAUNCH_REQUEST, raw.launch_request(v1::ROLE_WORKSPACE, link)));
    const auto frame = raw.read_frame(10s);
    ASSERT_TRUE(frame.has_value());
    v1::Rejected rejected;
    ASSERT_EQ(frame->type, v1::FRAME_REJECTED);
    ASSERT_TRUE(
        rejected.ParseFromArray(frame->payload.data(), static_cast<int>(frame->payload.size())));
    EXPECT_EQ(rejected.code(), v1::ERROR_PATH_SYMLINK) << rejected.message();
  }
  for (const char* target : {"/root", "/etc"}) {  // .pando-sandbox
    SCOPED_TRACE(target);
    const std::string project = daemon_->dir().make_dir(
        std::string("top-link") + (target[1] == 'r' ? "-root" : "-etc"), caller());
    ASSERT_EQ(symlink(target, (project + "/.pando-sandbox").c_str()), 0);
    expect_rejected(project, "ERROR_PATH_SYMLINK");
  }
  {  // .pando-sandbox/<role>
    const std::string project = daemon_->dir().make_dir("role-link", caller());
    daemon_->dir().make_dir("role-link/.pando-sandbox", caller(), 0700);
    ASSERT_EQ(symlink("/etc", (project + "/.pando-sandbox/workspace").c_str()), 0);
    expect_rejected(project, "ERROR_PATH_SYMLINK");
  }
  {  // .pando-sandbox/<role>/home
    const std::string project = daemon_->dir().make_dir("home-link", caller());
    daemon_->dir().make_dir("home-link/.pando-sandbox/workspace", caller(), 0700);
    chown((project + "/.pando-sandbox").c_str(), caller().uid, caller().gid);
    ASSERT_EQ(symlink("/root", (project + "/.pando-sandbox/workspace/home").c_str()), 0);
    expect_rejected(project, "ERROR_PATH_SYMLINK");
  }
  {  // .env pointing at a host secret: launched, but the target is not in the view
    daemon_->dir().make_dir("proj/deep", caller());
    ASSERT_EQ(symlink("/etc/shadow", (project_ + "/.env").c_str()), 0);
    ASSERT_EQ(symlink("/etc/shadow", (project_ + "/deep/.env").c_str()), 0);
    const std::string shadow = read_file("/etc/shadow");
    ASSERT_FALSE(shadow.empty());
    const RunResult r = sh(std::string(kCheck) + "t dotenv cat .env; t deep cat deep/.env");
    ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
    EXPECT_EQ(r.out, "dotenv no\ndeep no\n");
    EXPECT_EQ(r.out.find(shadow.substr(0, shadow.find(':'))), std::string::npos);
  }
  etc.expect_unchanged();
  root.expect_unchanged();
}

// The workspace role cannot touch .pando-sandbox/core (read-only and pinned, see
// persistence_test.cc), so it cannot plant symlinks there for the next core session.
TEST_F(ConfinementTest, WorkspaceCannotRedirectTheNextCoreSession) {
  const HostTreeWatch etc("/etc"), root("/root");
  ASSERT_EQ(sh("echo first", "core").out, "first\n");
  const RunResult plant = sh(std::string(kCheck) +
                             "t move mv .pando-sandbox/core .pando-sandbox/core-old; "
                             "t remove-home rm -r .pando-sandbox/core/home; "
                             "t link ln -s /etc .pando-sandbox/core/home/etc");
  EXPECT_EQ(plant.out, "move no\nremove-home no\nlink no\n") << plant.err;
  const RunResult r = sh("echo launched", "core");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "launched\n");
  etc.expect_unchanged();
  root.expect_unchanged();
}

// The caller's home is /nonexistent for the test users; this gives it a real one.
class CallerHome {
 public:
  explicit CallerHome(const TempDir& dir) {
    path_ = dir.make_dir("callerhome", caller(), 0755);
    set(path_);
  }
  ~CallerHome() { set("/nonexistent"); }
  CallerHome(const CallerHome&) = delete;
  CallerHome& operator=(const CallerHome&) = delete;
  const std::string& path() const { return path_; }

 private:
  static void set(const std::string& home) {
    const std::string command = "/usr/sbin/usermod -d '" + home + "' " + caller().name;
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  std::string path_;
};

TEST_F(ConfinementTest, AuthHomeIsMountedReadOnlyButNeverThroughASymlink) {
  const CallerHome home(daemon_->dir());
  const std::string auth = home.path() + "/.pando-ai";
  // Positive control: a real directory owned by the caller appears read-only at /pando-auth.
  daemon_->dir().make_dir("callerhome/.pando-ai", caller(), 0700);
  daemon_->dir().write_file("callerhome/.pando-ai/token", "auth-token\n", caller(), 0600);
  {
    const RunResult r = sh(std::string(kCheck) +
                           "echo \"override=$PANDO_AUTH_HOME_OVERRIDE\"; cat /pando-auth/token; "
                           "t write touch /pando-auth/new");
    ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
    EXPECT_EQ(r.out, "override=/pando-auth\nauth-token\nwrite no\n");
    EXPECT_FALSE(fs::exists(auth + "/new"));
  }
  const HostTreeWatch root("/root");
  for (const char* target : {"/root", "/etc"}) {
    SCOPED_TRACE(target);
    fs::remove_all(auth);
    ASSERT_EQ(symlink(target, auth.c_str()), 0);
    const RunResult r = sh(std::string(kCheck) +
                           "echo \"override=$PANDO_AUTH_HOME_OVERRIDE\"; t list ls /pando-auth; "
                           "t passwd-visible grep -q '^root:' /pando-auth/passwd");
    ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
    EXPECT_EQ(r.out, "override=\nlist no\npasswd-visible no\n");
  }
  EXPECT_NE(daemon_->log().find("auth_home_skipped"), std::string::npos);
  root.expect_unchanged();
}

// --- issue 3: filesystems without idmap support -------------------------------------

class RamfsMount {
 public:
  explicit RamfsMount(std::string path) : path_(std::move(path)) {
    fs::create_directories(path_);
    mounted_ = mount("ramfs", path_.c_str(), "ramfs", 0, "mode=0755") == 0;
  }
  ~RamfsMount() {
    if (mounted_) {
      EXPECT_EQ(umount2(path_.c_str(), MNT_DETACH), 0) << std::strerror(errno);
    }
  }
  RamfsMount(const RamfsMount&) = delete;
  RamfsMount& operator=(const RamfsMount&) = delete;
  bool mounted() const { return mounted_; }

 private:
  std::string path_;
  bool mounted_ = false;
};

TEST_F(ConfinementTest, ProjectOnRamfsIsRefusedAndStatusSaysWhy) {
  const std::string ram = daemon_->dir().path() + "/ramproj";
  const auto mounts_before = host_mounts();
  {
    const RamfsMount mount(ram);
    ASSERT_TRUE(mount.mounted()) << std::strerror(errno);
    ASSERT_EQ(chown(ram.c_str(), caller().uid, caller().gid), 0);

    const RunResult r = sh_in(ram, "echo launched");
    EXPECT_EQ(r.exit_code, 77) << r.out << r.err;
    EXPECT_NE(r.err.find("ERROR_IDMAP_UNSUPPORTED"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("ramfs"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");

    auto status = [&](const std::string& root) {
      return run_as(caller(), {daemon_->client(), "security", "status", "--socket",
                               daemon_->socket_path(), "--project-root", root});
    };
    const RunResult ram_status = status(ram);
    EXPECT_EQ(ram_status.exit_code, 0) << ram_status.err;
    EXPECT_NE(ram_status.out.find("layer idmapped_mounts: unavailable (" + ram +
                                  ": filesystem ramfs does not support idmapped mounts)"),
              std::string::npos)
        << ram_status.out;
    const RunResult ext4_status = status(project_);
    EXPECT_EQ(ext4_status.exit_code, 0) << ext4_status.err;
    EXPECT_NE(
        ext4_status.out.find("layer idmapped_mounts: available (" + project_ + ": ext2/ext3/ext4)"),
        std::string::npos)
        << ext4_status.out;
    // The idmap check's user-namespace holder is gone too.
    EXPECT_TRUE(eventually([&] { return session_children_of(daemon_->pid()).empty(); }, 10s))
        << describe(children_of(daemon_->pid()));
  }
  EXPECT_EQ(mount_changes(mounts_before, host_mounts()), "");
  EXPECT_EQ(sh("echo alive").out, "alive\n");
}

// --- issue 4: identity, capabilities, seccomp ------------------------------------

TEST_F(ConfinementTest, RunsWithTheRolesIdsAndNoCapabilities) {
  for (const std::string role : {"workspace", "core"}) {
    SCOPED_TRACE(role);
    const TestUser& user = role == "workspace" ? workspace_user() : core_user();
    const RunResult r = sh("id -u; id -g; id -G; exec " + probe() + " status", role);
    ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
    const std::string uid = std::to_string(user.uid);
    const std::string gid = std::to_string(user.gid);
    const auto lines = lines_of(r.out);
    ASSERT_GE(lines.size(), 3u) << r.out;
    EXPECT_EQ(lines[0], uid);
    EXPECT_EQ(lines[1], gid);
    EXPECT_EQ(lines[2], gid);
    // "<key>:\t<value>", where the value may be empty (Groups: with no supplementary group).
    std::map<std::string, std::string> status;
    for (size_t i = 3; i < lines.size(); ++i) {
      const auto tab = lines[i].find('\t');
      ASSERT_NE(tab, std::string::npos) << lines[i];
      status[lines[i].substr(0, tab)] = lines[i].substr(tab + 1);
    }
    EXPECT_EQ(status.at("Uid:"), uid + "\t" + uid + "\t" + uid + "\t" + uid);
    EXPECT_EQ(status.at("Gid:"), gid + "\t" + gid + "\t" + gid + "\t" + gid);
    // The kernel ends every group with a space; no supplementary group at all
    // (setgroups(0)) or only the role's own group are both fine.
    std::istringstream group_list(status.at("Groups:"));
    std::set<std::string> groups;
    for (std::string group; group_list >> group;) groups.insert(group);
    EXPECT_TRUE(groups.empty() || groups == std::set<std::string>{gid}) << status.at("Groups:");
    for (const char* cap : {"CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"}) {
      EXPECT_EQ(status.at(cap), "0000000000000000") << cap;
    }
    EXPECT_EQ(status.at("NoNewPrivs:"), "1");
    EXPECT_EQ(status.at("Seccomp:"), "2");
  }
}

TEST_F(ConfinementTest, DeniedSyscallsFailWithTheDocumentedErrno) {
  for (const std::string role : {"workspace", "core"}) {
    SCOPED_TRACE(role);
    const RunResult r = sh("exec " + probe() + " denied-syscalls", role);
    ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
    std::map<std::string, std::string> results;
    for (const std::string& line : lines_of(r.out)) {
      const auto space = line.find(' ');
      ASSERT_NE(space, std::string::npos) << line;
      results[line.substr(0, space)] = line.substr(space + 1);
    }
    // seccomp.cc: every table row fails with EPERM, clone3 and openat2 with ENOSYS, the
    // extended attribute writes with EOPNOTSUPP; allow-* must work.
    for (const auto& [check, result] : results) {
      const bool xattr_write = check.find("xattr") != std::string::npos;
      const std::string want = check.rfind("allow-", 0) == 0             ? "ok"
                               : check == "clone3" || check == "openat2" ? "errno=ENOSYS"
                               : xattr_write                             ? "errno=EOPNOTSUPP"
                                                                         : "errno=EPERM";
      EXPECT_EQ(result, want) << check;
    }
    for (const char* check : {"ptrace",
                              "mount",
                              "umount2",
                              "pivot_root",
                              "open_tree",
                              "move_mount",
                              "fsopen",
                              "mount_setattr",
                              "clone3",
                              "unshare",
                              "setns",
                              "bpf",
                              "io_uring_setup",
                              "keyctl",
                              "userfaultfd",
                              "open_by_handle_at",
                              "vhangup",
                              "clone-newuser",
                              "clone-newns",
                              "unshare-newuser",
                              "ioctl-tiocsti",
                              "ioctl-tiocsti-high",
                              "ioctl-tioclinux-high",
                              "personality-linux32",
                              "chmod-setuid",
                              "fchmodat2-setgid",
                              "openat-setuid-high",
                              "mknodat-setgid",
                              "openat2",
                              "chmod-other-write",
                              "fchmodat-other-write-high",
                              "setxattr",
                              "fremovexattr",
                              "allow-fork",
                              "allow-thread"}) {
      EXPECT_EQ(results.count(check), 1u) << "no probe line for " << check;
    }
  }
}

TEST_F(ConfinementTest, ForeignAbisKillTheProcess) {
  // Without a filter, int 0x80 survives when the kernel has the i386 ABI and
  // dies by SIGSEGV when it was built or booted without it.
  const RunResult host = run_as(caller(), {probe(), "int80"});
  const bool i386_abi = host.exit_code == 0;
  ASSERT_TRUE(i386_abi || host.signal == SIGSEGV) << host.out << host.signal;
  for (const std::string role : {"workspace", "core"}) {
    SCOPED_TRACE(role);
    const RunResult int80 = sh("exec " + probe() + " int80", role);
    EXPECT_EQ(int80.exit_code, 128 + (i386_abi ? SIGSYS : SIGSEGV)) << int80.out << int80.err;
    EXPECT_EQ(int80.out, "");
    const RunResult x32 = sh("exec " + probe() + " x32", role);
    EXPECT_EQ(x32.exit_code, 128 + SIGSYS) << x32.out << x32.err;
    EXPECT_EQ(x32.out, "");
  }
}

TEST_F(ConfinementTest, SetuidBinaryGivesNoPrivilege) {
  const std::string setuid_id = daemon_->bin_dir() + "/id-setuid";
  fs::copy_file("/usr/bin/id", setuid_id, fs::copy_options::overwrite_existing);
  ASSERT_EQ(chown(setuid_id.c_str(), 0, 0), 0);
  ASSERT_EQ(chmod(setuid_id.c_str(), 04755), 0);
  // Control: on the host it really raises the caller to euid 0.
  const RunResult host = run_as(caller(), {setuid_id, "-u"});
  ASSERT_EQ(host.out, "0\n") << host.err;

  const RunResult r =
      sh(setuid_id + " -u; grep -c ' " + daemon_->bin_dir() +
         " .*nosuid' /proc/self/mountinfo; exec " + probe() + " setuid-exec " + setuid_id + " -u");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  const std::string uid = std::to_string(workspace_user().uid);
  // Two layers stop it: the runtime path is mounted nosuid (the 1 below), and
  // no_new_privs (RunsWithTheRolesIdsAndNoCapabilities) would stop it on any mount.
  EXPECT_EQ(r.out, uid + "\n1\n" + uid + "\n");
}

TEST_F(ConfinementTest, OnlyStdioFdsAreOpen) {
  for (const std::string role : {"workspace", "core"}) {
    SCOPED_TRACE(role);
    const RunResult r = sh("exec " + probe() + " fds", role);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> fds;
    for (const std::string& line : lines_of(r.out)) fds.push_back(line.substr(0, line.find(' ')));
    EXPECT_EQ(fds, (std::vector<std::string>{"0", "1", "2"})) << r.out;
  }
}

const std::map<std::string, std::string> kHostileClientEnv = {
    {"LD_PRELOAD", "/nonexistent.so"},
    {"NODE_OPTIONS", "--require=/x"},
    {"PYTHONPATH", "/x"},
    {"https_proxy", "http://proxy.invalid:3128"},
    {"GITHUB_TOKEN", "ghp_fake"},
    {"PATH", "/evil/bin"},
    {"HOME", "/evil/home"},
    {"PANDO_PROCESS_ROLE", "evil"}};

std::set<std::string> variable_names(const std::string& out) {
  std::set<std::string> names;
  for (const std::string& line : lines_of(out)) names.insert(line.substr(0, line.find('=')));
  return names;
}

const std::set<std::string> kDocumentedEnv = {
    "PATH", "HOME",    "TMPDIR", "XDG_CACHE_HOME",     "XDG_CONFIG_HOME",   "XDG_DATA_HOME",
    "USER", "LOGNAME", "LANG",   "PANDO_PROCESS_ROLE", "PANDO_PROJECT_ROOT"};

TEST_F(ConfinementTest, EnvironmentIsOnlyTheDocumentedVariables) {
  RunOptions options;
  options.env = kHostileClientEnv;
  {  // through sh, which adds PWD
    options.stdin_data = "exec " + probe() + " env\n";
    const RunResult r = launch(*daemon_, caller(), "core", project_, options);
    ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
    auto want = kDocumentedEnv;
    want.insert("PWD");
    EXPECT_EQ(variable_names(r.out), want) << r.out;
    for (const char* leaked : {"evil", "ghp_fake", "proxy.invalid", "nonexistent.so", "require"}) {
      EXPECT_EQ(r.out.find(leaked), std::string::npos) << leaked << " in " << r.out;
    }
  }
  // The role's argv is env itself: exactly what execve received.
  DaemonOptions daemon_options;
  daemon_options.workspace_argv_text = "  argv: \"/usr/bin/env\"";
  start_daemon(daemon_options);
  options.stdin_data.clear();
  const RunResult r = launch(*daemon_, caller(), "workspace", project_, options);
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(variable_names(r.out), kDocumentedEnv) << r.out;
  const std::string sandbox = project_ + "/.pando-sandbox/workspace";
  const auto values = [&] {
    std::map<std::string, std::string> map;
    for (const std::string& line : lines_of(r.out)) {
      map[line.substr(0, line.find('='))] = line.substr(line.find('=') + 1);
    }
    return map;
  }();
  EXPECT_EQ(values.at("HOME"), sandbox + "/home");
  EXPECT_EQ(values.at("TMPDIR"), "/tmp");
  EXPECT_EQ(values.at("XDG_CACHE_HOME"), sandbox + "/cache");
  EXPECT_EQ(values.at("XDG_CONFIG_HOME"), sandbox + "/config");
  EXPECT_EQ(values.at("XDG_DATA_HOME"), sandbox + "/data");
  EXPECT_EQ(values.at("USER"), workspace_user().name);
  EXPECT_EQ(values.at("LOGNAME"), workspace_user().name);
  EXPECT_EQ(values.at("PANDO_PROCESS_ROLE"), "workspace");
  EXPECT_EQ(values.at("PANDO_PROJECT_ROOT"), project_);
  EXPECT_EQ(values.at("PATH").find("evil"), std::string::npos);
  for (const char* leaked : {"evil", "ghp_fake", "proxy.invalid", "nonexistent.so", "require"}) {
    EXPECT_EQ(r.out.find(leaked), std::string::npos) << leaked << " in " << r.out;
  }
}

// Issue 12: a project reached through a symbolic link (Silverblue's /home -> var/home,
// ~/src -> /data/src) is resolved by the client, as the caller; the role sees the real path.
TEST_F(ConfinementTest, SymlinkedProjectPathIsResolvedByTheClient) {
  const std::string link = daemon_->dir().path() + "/src-link";
  ASSERT_EQ(symlink(project_.c_str(), link.c_str()), 0);
  const RunResult r = sh_in(link, "pwd; echo \"$PANDO_PROJECT_ROOT\"");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, project_ + "\n" + project_ + "\n");
  RunOptions relative;
  relative.stdin_data = "pwd\n";
  const RunResult from_cwd =
      run_as(caller(),
             {"/bin/sh", "-c",
              "cd " + daemon_->dir().path() + " && exec " + daemon_->client() +
                  " security launch --role workspace --project-root src-link --stdio --socket " +
                  daemon_->socket_path()},
             relative);
  EXPECT_EQ(from_cwd.exit_code, 0) << from_cwd.err;
  EXPECT_EQ(from_cwd.out, project_ + "\n");
}

// Issue 12: tools that walk from / (an MCP filesystem server given / as its root) list it
// first. It is the view's own root: nothing of the host's / beyond the view.
TEST_F(ConfinementTest, RootOfTheViewIsListable) {
  std::string expected = ". .. bin dev etc lib ";
  for (const char* lib : {"lib32", "lib64", "libx32"}) {
    if (fs::exists(std::string("/") + lib)) expected += std::string(lib) + " ";
  }
  expected += "proc sbin tmp usr \n";  // the project and the runtime paths live below /tmp here
  for (const std::string role : {"workspace", "core"}) {
    SCOPED_TRACE(role);
    const RunResult r = sh("LC_ALL=C ls -a / | tr '\\n' ' '; echo", role);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, expected) << r.err;
  }
}

// --- issue 4: ordinary tools still work ------------------------------------------------

TEST_F(ConfinementTest, ShellGitAndCompilerWorkInTheWorkspace) {
  // The caller's repository (a role cannot create one at the project root: persistence_test.cc).
  ASSERT_EQ(run_as(caller(), {"/usr/bin/git", "init", "-q", project_}).exit_code, 0);
  const RunResult r =
      sh("git status -s >/dev/null && echo git-init-ok; echo hi > tracked.txt; "
         "git add tracked.txt && git -c user.name=t -c user.email=t@t commit -q -m first && "
         "echo git-commit-ok; "
         "git status --porcelain -- tracked.txt && echo git-status-ok; "
         "printf '#include <stdio.h>\\nint main(void) { puts(\"hello-from-cc\"); return 0; }\\n' "
         "> \"$TMPDIR/h.c\" && cc -o \"$TMPDIR/h\" \"$TMPDIR/h.c\" && \"$TMPDIR/h\"");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "git-init-ok\ngit-commit-ok\ngit-status-ok\nhello-from-cc\n") << r.err;
  EXPECT_EQ(stat_of(project_ + "/.git/HEAD").st_uid, caller().uid);

  if (!fs::exists("/usr/bin/node")) {
    std::cout << "[ NOTE     ] /usr/bin/node is not installed: node check not run\n";
    return;
  }
  const RunResult node = sh("node --version");
  EXPECT_EQ(node.exit_code, 0) << node.err;
  EXPECT_EQ(node.out.rfind("v", 0), 0u) << node.out;
}

}  // namespace
}  // namespace pando::itest
