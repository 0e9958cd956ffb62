#include "tests/integration/harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "common/fd_passing.h"

namespace pando::itest {

namespace fs = std::filesystem;
namespace v1 = pando::helper::v1;
using namespace std::chrono_literals;

namespace {

int run_command(const std::vector<std::string>& argv) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::optional<TestUser> lookup(const std::string& name) {
  struct passwd* pw = getpwnam(name.c_str());
  if (pw == nullptr) return std::nullopt;
  return TestUser{name, pw->pw_uid, pw->pw_gid};
}

void delete_user(const std::string& name) {
  if (!lookup(name)) return;
  run_command({"/usr/sbin/userdel", "-f", name});
  if (getgrnam(name.c_str()) != nullptr) run_command({"/usr/sbin/groupdel", name});
}

TestUser create_user(const std::string& name, bool system) {
  delete_user(name);
  std::vector<std::string> argv = {"/usr/sbin/useradd", "--user-group", "--no-create-home",
                                   "--home-dir",        "/nonexistent", "--shell",
                                   "/usr/sbin/nologin"};
  if (system) argv.push_back("--system");
  argv.push_back(name);
  if (run_command(argv) != 0) throw std::runtime_error("useradd " + name + " failed");
  return *lookup(name);
}

struct Users {
  TestUser caller, other, core, workspace;
};
Users* g_users = nullptr;

// Names carry this process's pid, so test binaries running side by side never
// share (or delete) each other's users; leftovers of dead runs are removed.
std::string user_name(const char* role, pid_t pid) {
  return "pandotest-" + std::to_string(pid) + "-" + role;
}
constexpr const char* kRoles[] = {"caller", "other", "core", "ws"};

void remove_stale_users() {
  std::ifstream passwd("/etc/passwd");
  for (std::string line; std::getline(passwd, line);) {
    const std::string name = line.substr(0, line.find(':'));
    if (name.rfind("pandotest-", 0) != 0) continue;
    const std::string rest = name.substr(10);
    const auto dash = rest.find('-');
    if (dash == std::string::npos || dash == 0 ||
        rest.substr(0, dash).find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    const pid_t pid = static_cast<pid_t>(std::stol(rest.substr(0, dash)));
    if (pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH) delete_user(name);
  }
}

// <cgroup_parent_name()> below the root of every mounted hierarchy: on cgroup v2 the unified
// one at /sys/fs/cgroup, on v1 each controller's at /sys/fs/cgroup/<name> (and the unified one
// beside them on a hybrid host).
std::vector<std::string> hierarchy_parents() {
  std::vector<std::string> parents = {"/sys/fs/cgroup/" + cgroup_parent_name()};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/sys/fs/cgroup", ec)) {
    parents.push_back(entry.path().string() + "/" + cgroup_parent_name());
  }
  return parents;
}

// This process's cgroup v2 directory, from /proc/self/cgroup and the cgroup2 mount; nullopt
// without a cgroup2 mount.
std::optional<std::string> own_unified_cgroup() {
  std::string own;
  std::ifstream cgroup("/proc/self/cgroup");
  for (std::string line; std::getline(cgroup, line);) {
    if (line.starts_with("0::")) own = line.substr(3);
  }
  std::ifstream mountinfo("/proc/self/mountinfo");
  for (std::string line; std::getline(mountinfo, line);) {
    if (line.find(" - cgroup2 ") == std::string::npos) continue;
    // "<id> <parent> <major:minor> <root> <mount point> ...": the mount shows <root> of the
    // hierarchy, and /proc/self/cgroup paths start at the hierarchy's root.
    std::istringstream fields(line);
    std::string id, parent, device, root, mount_point;
    fields >> id >> parent >> device >> root >> mount_point;
    if (root != "/" && !own.starts_with(root + "/") && own != root) continue;
    const std::string below = root == "/" ? own : own.substr(root.size());
    return below == "/" ? mount_point : mount_point + below;
  }
  return std::nullopt;
}

// Removes a cgroup tree that holds no process, deepest first (a cgroup directory goes with
// rmdir, never with its files).
void remove_cgroup_tree(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec) && !entry.is_symlink(ec)) remove_cgroup_tree(entry.path());
  }
  rmdir(dir.c_str());
}

// The cgroup parents of test binaries that died before their teardown (a run killed by a
// timeout): their daemons' session cgroups would stay on this host forever.
void remove_stale_cgroups() {
  std::vector<fs::path> hierarchies = {"/sys/fs/cgroup"};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/sys/fs/cgroup", ec)) {
    hierarchies.push_back(entry.path());
  }
  for (const fs::path& hierarchy : hierarchies) {
    for (const auto& entry : fs::directory_iterator(hierarchy, ec)) {
      const std::string name = entry.path().filename();
      if (name.rfind("pandotest-i", 0) != 0 || name.size() == 11 ||
          name.find_first_not_of("0123456789", 11) != std::string::npos) {
        continue;
      }
      const pid_t pid = static_cast<pid_t>(std::stol(name.substr(11)));
      if (pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH) remove_cgroup_tree(entry.path());
    }
  }
}

class UsersEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (geteuid() != 0) return;
    remove_stale_users();
    remove_stale_cgroups();
    const pid_t me = getpid();
    g_users = new Users{
        create_user(user_name("caller", me), false), create_user(user_name("other", me), false),
        create_user(user_name("core", me), true), create_user(user_name("ws", me), true)};
  }
  void TearDown() override {
    // Daemons of this process share one cgroup parent; it goes once they all have.
    for (const auto& parent : hierarchy_parents()) rmdir(parent.c_str());
    for (const char* role : kRoles) delete_user(user_name(role, getpid()));
    delete g_users;
    g_users = nullptr;
  }
};

const bool g_registered = [] {
  ::testing::AddGlobalTestEnvironment(new UsersEnvironment);
  return true;
}();

const Users& users() {
  if (g_users == nullptr) throw std::runtime_error("integration tests must run as root");
  return *g_users;
}

void copy_file(const std::string& from, const std::string& to, mode_t mode) {
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  chmod(to.c_str(), mode);
}

void become(const TestUser& user) {
  const gid_t groups[] = {user.gid};
  if (setgroups(1, groups) != 0 || setresgid(user.gid, user.gid, user.gid) != 0 ||
      setresuid(user.uid, user.uid, user.uid) != 0) {
    _exit(126);
  }
}

std::vector<char*> c_strings(std::vector<std::string>& items) {
  std::vector<char*> out;
  for (auto& item : items) out.push_back(item.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

const TestUser& caller() { return users().caller; }
const TestUser& other_user() { return users().other; }
const TestUser& core_user() { return users().core; }
const TestUser& workspace_user() { return users().workspace; }

// --- TempDir -----------------------------------------------------------------

TempDir::TempDir() {
  char templ[] = "/tmp/pandotest-XXXXXX";
  if (mkdtemp(templ) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = templ;
  chmod(path_.c_str(), 0755);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::make_dir(const std::string& name, const TestUser& owner, mode_t mode) const {
  const std::string path = path_ + "/" + name;
  fs::create_directories(path);
  chown(path.c_str(), owner.uid, owner.gid);
  chmod(path.c_str(), mode);
  return path;
}

std::string TempDir::write_file(const std::string& name, const std::string& content,
                                const TestUser& owner, mode_t mode) const {
  const std::string path = path_ + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  chown(path.c_str(), owner.uid, owner.gid);
  chmod(path.c_str(), mode);
  return path;
}

// --- Daemon ------------------------------------------------------------------

Daemon::Daemon(DaemonOptions options) {
  bin_dir_ = dir_.path() + "/bin";
  fs::create_directories(bin_dir_);
  chmod(bin_dir_.c_str(), 0755);
  copy_file(PANDO_CLIENT_BIN, client(), 0755);
  copy_file(PANDO_PROBE_BIN, probe(), 0755);
  socket_ = options.socket_path.empty() ? dir_.path() + "/run/helper.sock" : options.socket_path;
  log_path_ = dir_.path() + "/daemon.log";

  auto role = [&](const std::string& name, const std::string& user, const std::string& argv_text) {
    std::string text = name + " {\n  user: \"" + user + "\"\n";
    if (argv_text.empty()) {
      text += kDispatchArgv;
    } else {
      text += argv_text + "\n";
    }
    text += "  runtime_paths: \"" + bin_dir_ + "\"\n}\n";
    return text;
  };
  std::ostringstream config;
  config << "sandbox_helper_path: \""
         << (options.sandbox_helper_path.empty() ? PANDO_SANDBOX_BIN : options.sandbox_helper_path)
         << "\"\n"
         << "handshake_timeout_ms: " << options.handshake_timeout_ms << "\n"
         << "max_sessions: " << options.max_sessions << "\n"
         << "max_sessions_per_uid: " << options.max_sessions_per_uid << "\n"
         << "max_pending_per_uid: " << options.max_pending_per_uid << "\n"
         << "log_level: \"debug\"\n"
         << role("core", core_user().name, options.core_argv_text)
         << role("workspace", workspace_user().name, options.workspace_argv_text)
         << "cgroups { parent: \"pandotest-i" << getpid() << "\""
         << (options.without_cgroups ? " allow_unlimited: true" : "") << " }\n"
         << options.extra_config << "\n";
  const std::string config_path = dir_.path() + "/helperd.conf";
  std::ofstream(config_path) << config.str();
  chmod(config_path.c_str(), 0644);

  // Built before fork(): the child only installs it.
  std::vector<sock_filter> filter = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
  };
  for (const auto& [syscalls, error] :
       {std::pair(&options.enosys_syscalls, ENOSYS), std::pair(&options.eperm_syscalls, EPERM)}) {
    for (int nr : *syscalls) {
      filter.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
      filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | static_cast<uint32_t>(error)));
    }
  }
  filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  const sock_fprog program{static_cast<unsigned short>(filter.size()), filter.data()};

  pid_ = fork();
  if (pid_ == 0) {
    if ((!options.enosys_syscalls.empty() || !options.eperm_syscalls.empty()) &&
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) != 0) {
      _exit(125);
    }
    if (options.shared_mounts &&
        (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_REC | MS_SHARED, nullptr) != 0)) {
      _exit(124);
    }
    if (options.without_cgroups &&
        (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
         umount2("/sys/fs/cgroup", MNT_DETACH) != 0)) {
      _exit(123);
    }
    if (!options.files_over.empty() &&
        (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)) {
      _exit(122);
    }
    for (const auto& [file, target] : options.files_over) {
      if (mount(file.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) _exit(121);
    }
    const int log = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(log, 1);
    dup2(log, 2);
    for (int capability : options.drop_capabilities) {
      if (prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0) _exit(126);
    }
    execl(PANDO_DAEMON_BIN, "pando-helperd", "--config", config_path.c_str(), "--socket",
          socket_.c_str(), "--foreground", nullptr);
    _exit(127);
  }
  if (!options.expect_start) return;
  const bool up = eventually(
      [&] {
        UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strncpy(addr.sun_path, socket_.c_str(), sizeof(addr.sun_path) - 1);
        return connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      },
      20s);
  if (!up) throw std::runtime_error("pando-helperd did not come up: " + log());
}

Daemon::~Daemon() {
  int status = 0;
  const bool had_exited = running() && waitpid(pid_, &status, WNOHANG) == pid_;
  if (had_exited) pid_ = -1;
  if (running()) stop();
  // CI shows a failed test's output only: the daemon's side of the failure goes with it.
  if (!::testing::Test::HasFailure()) return;
  std::string text = log();
  std::size_t start = text.size();
  for (int lines = 0; lines < 30 && start > 0; ++lines) {
    start = text.rfind('\n', start - 1);
    if (start == std::string::npos) {
      start = 0;
      break;
    }
  }
  std::string how;
  if (had_exited) {
    how = WIFSIGNALED(status)
              ? " (it had died of signal " + std::to_string(WTERMSIG(status)) + ")"
              : " (it had exited with status " + std::to_string(WEXITSTATUS(status)) + ")";
  }
  std::fprintf(stderr, "--- the daemon's log, last lines%s:\n%s\n", how.c_str(),
               text.substr(start).c_str());
}

bool Daemon::running() const { return pid_ > 0; }

std::string Daemon::log() const {
  std::ifstream in(log_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Daemon::log_with(const std::string& needle, size_t count,
                             std::chrono::milliseconds timeout) const {
  std::string text;
  auto complete = [&] {
    text = log();
    size_t lines = 0;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line) && lines < count;) {
      if (line.find(needle) != std::string::npos) ++lines;
    }
    return lines >= count;
  };
  eventually(complete, timeout);
  return text;
}

int Daemon::stop(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      status = -1;
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  pid_ = -1;
  return status;
}

int Daemon::wait_exit(std::chrono::milliseconds timeout) {
  int status = -1;
  const bool exited = eventually([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
  if (!exited) return -1;
  pid_ = -1;
  return status;
}

void Daemon::kill_hard() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

// --- running clients -----------------------------------------------------------

RunResult run_as(const TestUser& user, const std::vector<std::string>& argv, RunOptions options) {
  RunningClient client(user, argv, options.env);
  RunResult result;
  size_t written = 0;
  if (options.stdin_data.empty() && options.close_stdin_after) client.close_stdin();
  if (client.stdin_fd() >= 0) fcntl(client.stdin_fd(), F_SETFL, O_NONBLOCK);
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  int readers[2] = {client.stdout_fd(), client.stderr_fd()};
  std::string* sinks[2] = {&result.out, &result.err};
  for (;;) {
    pollfd fds[3];
    nfds_t n = 0;
    for (int fd : readers) fds[n++] = {fd, POLLIN, 0};
    const bool writing = client.stdin_fd() >= 0 && written < options.stdin_data.size();
    if (writing) fds[n++] = {client.stdin_fd(), POLLOUT, 0};
    if (readers[0] < 0 && readers[1] < 0) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      break;
    }
    if (poll(fds, n, static_cast<int>(std::min<long>(left.count(), 1000))) < 0 && errno != EINTR) {
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (readers[i] < 0 || fds[i].revents == 0) continue;
      char buffer[65536];
      const ssize_t r = read(readers[i], buffer, sizeof(buffer));
      if (r > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(r));
      } else if (r == 0 || errno != EINTR) {
        readers[i] = -1;
      }
    }
    if (writing && fds[2].revents) {
      const ssize_t w = write(client.stdin_fd(), options.stdin_data.data() + written,
                              options.stdin_data.size() - written);
      if (w > 0) written += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EINTR) written = options.stdin_data.size();
      if (written == options.stdin_data.size() && options.close_stdin_after) client.close_stdin();
    }
  }
  const int status = client.wait(result.timed_out ? 1ms : options.timeout);
  result.err += client.err();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

RunResult launch(const Daemon& daemon, const TestUser& user, const std::string& role,
                 const std::string& project, RunOptions options) {
  return run_as(user,
                {daemon.client(), "security", "launch", "--role", role, "--project-root", project,
                 "--stdio", "--socket", daemon.socket_path()},
                std::move(options));
}

RunningClient::RunningClient(const TestUser& user, const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& env) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe2 failed");
  }
  std::vector<std::string> args = argv;
  // Client logging stays off unless a test asks for it.
  std::vector<std::string> environment;
  if (env.count("PANDO_DEBUG") == 0 && env.count("PANDO_GATEWAY_LOG_FILE") == 0) {
    environment.push_back("PANDO_DEBUG=0");
  }
  for (const auto& [key, value] : env) environment.push_back(key + "=" + value);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    if (chdir("/") != 0) _exit(126);
    become(user);
    auto cargs = c_strings(args);
    auto cenv = c_strings(environment);
    execve(cargs[0], cargs.data(), cenv.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  stdin_.reset(in[1]);
  stdout_.reset(out[0]);
  stderr_.reset(err[0]);
}

RunningClient::~RunningClient() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool RunningClient::write_all(const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(stdin_.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd pfd{stdin_.get(), POLLOUT, 0};
      poll(&pfd, 1, 1000);
      continue;
    }
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool read_fd_until(int fd, std::string& seen, const std::string& needle,
                   std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (seen.find(needle) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    char buffer[4096];
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) return false;
    seen.append(buffer, static_cast<size_t>(n));
  }
  return true;
}

bool RunningClient::read_until(const std::string& needle, std::chrono::milliseconds timeout) {
  return read_fd_until(stdout_.get(), out_, needle, timeout);
}

int RunningClient::wait(std::chrono::milliseconds timeout) {
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Drain stderr meanwhile so the client never blocks on it.
  fcntl(stderr_.get(), F_SETFL, O_NONBLOCK);
  auto drain = [this] {
    char buffer[4096];
    ssize_t n;
    while ((n = read(stderr_.get(), buffer, sizeof(buffer))) > 0) {
      err_.append(buffer, static_cast<size_t>(n));
    }
  };
  for (;;) {
    drain();
    if (waitpid(pid_, &status, WNOHANG) == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(2ms);
  }
  drain();
  reaped_ = true;
  return status;
}

// --- raw clients ---------------------------------------------------------------

RawClient::RawClient(const std::string& socket, const TestUser& as) {
  fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
  // Per-thread effective ids (raw syscalls): the kernel records them at connect.
  if (syscall(SYS_setresgid, -1, as.gid, -1) != 0 || syscall(SYS_setresuid, -1, as.uid, -1) != 0) {
    throw std::runtime_error("cannot take the test user's ids");
  }
  const int rc = connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  if (syscall(SYS_setresuid, -1, 0, -1) != 0 || syscall(SYS_setresgid, -1, 0, -1) != 0)
    std::abort();
  if (rc != 0) throw std::runtime_error(std::string("connect: ") + std::strerror(err));
}

bool RawClient::send_bytes(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = send(fd_.get(), bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool RawClient::send_preface() {
  const auto preface = wire::make_preface();
  return send_bytes(std::string(preface.begin(), preface.end()));
}

bool RawClient::send_frame(v1::FrameType type, const std::string& payload) {
  const auto header = wire::encode_header(type, static_cast<uint32_t>(payload.size()));
  return send_bytes(std::string(header.begin(), header.end()) + payload);
}

bool RawClient::send_frame_with_fds(v1::FrameType type, const std::string& payload,
                                    const std::vector<int>& fds) {
  const auto header = wire::encode_header(type, static_cast<uint32_t>(payload.size()));
  std::string bytes = std::string(header.begin(), header.end()) + payload;
  const ssize_t n = send_with_fds(fd_.get(), bytes.data(), bytes.size(), fds);
  if (n < 0) return false;
  return send_bytes(bytes.substr(static_cast<size_t>(n)));
}

std::string RawClient::launch_request(v1::Role role, const std::string& root) {
  v1::LaunchRequest request;
  request.set_role(role);
  request.set_project_root(root);
  return request.SerializeAsString();
}

std::optional<testing::FrameDecoder::Frame> RawClient::read_frame(
    std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto frame = decoder_.next()) return frame;
    if (decoder_.error() != testing::FrameDecoder::Error::kNone) return std::nullopt;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd pfd{fd_.get(), POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    uint8_t buffer[65536];
    const ssize_t n = recv(fd_.get(), buffer, sizeof(buffer), 0);
    if (n <= 0) return std::nullopt;
    decoder_.feed(std::span<const uint8_t>(buffer, static_cast<size_t>(n)));
  }
}

std::optional<testing::FrameDecoder::Frame> RawClient::read_until(
    uint8_t type, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto frame = read_frame(std::max(left, 1ms));
    if (!frame) return std::nullopt;
    if (frame->type == type) return frame;
  }
}

bool RawClient::closed_by_peer(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd_.get(), POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    uint8_t buffer[4096];
    const ssize_t n = recv(fd_.get(), buffer, sizeof(buffer), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0) return false;
  }
}

// --- utilities -------------------------------------------------------------------

v1::Rejected expect_rejected(RawClient& client, const Daemon& daemon) {
  auto frame = client.read_frame(10s);
  EXPECT_TRUE(frame.has_value()) << daemon.log();
  v1::Rejected rejected;
  if (!frame) return rejected;
  EXPECT_EQ(frame->type, v1::FRAME_REJECTED);
  EXPECT_TRUE(
      rejected.ParseFromArray(frame->payload.data(), static_cast<int>(frame->payload.size())));
  EXPECT_FALSE(rejected.message().empty());
  EXPECT_EQ(rejected.message().find('\n'), std::string::npos);
  EXPECT_TRUE(client.closed_by_peer(5s));
  return rejected;
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string sha256(const std::string& data) {
  char templ[] = "/tmp/pandotest-sha-XXXXXX";
  const int fd = mkstemp(templ);
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  std::string out;
  FILE* pipe = popen((std::string("sha256sum ") + templ).c_str(), "r");
  char buffer[256];
  if (pipe != nullptr && fgets(buffer, sizeof(buffer), pipe) != nullptr) out = buffer;
  if (pipe != nullptr) pclose(pipe);
  unlink(templ);
  return out.substr(0, 64);
}

std::vector<pid_t> processes_of(uid_t uid) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st {};
    if (stat(entry.path().c_str(), &st) == 0 && st.st_uid == uid) {
      pids.push_back(static_cast<pid_t>(std::stol(name)));
    }
  }
  return pids;
}

size_t open_fd_count(pid_t pid) {
  size_t count = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    ++count;
  }
  return count;
}

std::string sandbox_binary() { return PANDO_SANDBOX_BIN; }

std::vector<std::string> host_mounts() {
  std::ifstream in("/proc/self/mountinfo");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::map<std::string, std::string> parse_probe_lines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto space = line.find_first_of(" \t");
    if (space == std::string::npos) continue;
    const auto value = line.find_first_not_of(" \t", space);
    out[line.substr(0, space)] = value == std::string::npos ? "" : line.substr(value);
  }
  return out;
}

std::string cgroup_parent_name() { return "pandotest-i" + std::to_string(getpid()); }

namespace {

// Subdirectories of `dir` whose names start with `prefix`, each by its canonical path (cpu and
// cpuacct are often one hierarchy reached through two symlinked names).
void add_dirs_named(const fs::path& dir, const std::string& prefix, std::set<std::string>& out) {
  std::error_code list_ec;
  for (const auto& entry : fs::directory_iterator(dir, list_ec)) {
    if (!entry.path().filename().string().starts_with(prefix)) continue;
    std::error_code canonical_ec;
    const fs::path real = fs::canonical(entry.path(), canonical_ec);
    out.insert(canonical_ec ? entry.path().string() : real.string());
  }
}

// Where the daemons of this process put sessions: the parent of their config in every
// hierarchy, and on cgroup v2 in a unit with Delegate=yes, <unit>/sessions (the daemon, a child
// of this process, starts in this process's cgroup and moves the unit's processes into
// <unit>/daemon).
std::vector<std::string> cgroup_parents() {
  std::vector<std::string> parents = hierarchy_parents();
  if (auto unit = own_unified_cgroup()) {
    if (unit->ends_with("/daemon")) unit->resize(unit->size() - std::string("/daemon").size());
    parents.push_back(*unit + "/sessions");
  }
  return parents;
}

}  // namespace

std::vector<std::string> caller_cgroup_dirs() {
  std::set<std::string> dirs;
  for (const auto& parent : cgroup_parents()) add_dirs_named(parent, "caller-", dirs);
  return {dirs.begin(), dirs.end()};
}

std::vector<std::string> session_cgroup_dirs() {
  std::set<std::string> dirs;
  for (const auto& parent : cgroup_parents()) add_dirs_named(parent, "session-", dirs);
  for (const auto& caller : caller_cgroup_dirs()) add_dirs_named(caller, "session-", dirs);
  return {dirs.begin(), dirs.end()};
}

uint64_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmRSS:")) return std::stoull(line.substr(6));
  }
  return 0;
}

}  // namespace pando::itest
