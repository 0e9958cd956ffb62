#include "daemon/service_manager.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>

#include "proto/error.h"

namespace pando::daemon {
namespace {

// Exit codes of the forked children; each names the check that failed.
enum ChildResult : int {
  kOk = 0,
  kSetupFailed = 10,
  kWrongResult = 11,
  kNotCloexec = 12,
  kEnvLeft = 13,
  kUnexpectedThrow = 14,
  kDidNotThrow = 15,
  kWrongSocket = 16,
  kFdTouched = 17,
};

// Socket activation reads and rewrites process-wide state (fd 3, environment),
// so each scenario runs in its own forked child and reports through its exit code.
int run_in_child(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int code = kUnexpectedThrow;
    try {
      code = body();
    } catch (...) {
      code = kUnexpectedThrow;
    }
    _exit(code);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class TempDir {
 public:
  TempDir() {
    char templ[] = "/tmp/pandotest-sm-XXXXXX";
    if (mkdtemp(templ) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

int bound_unix_socket(int type, const std::string& path) {
  const int fd = socket(AF_UNIX, type, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Puts `fd` at 3 without close-on-exec, as a service manager would hand it over.
bool install_as_fd3(int fd) {
  if (fd < 0) return false;
  if (fd == 3) return fcntl(3, F_SETFD, 0) == 0;
  if (dup2(fd, 3) != 3) return false;
  close(fd);
  return true;
}

void set_activation_env(pid_t pid, const char* fds) {
  setenv("LISTEN_PID", std::to_string(pid).c_str(), 1);
  setenv("LISTEN_FDS", fds, 1);
  setenv("LISTEN_FDNAMES", "helper.sock", 1);
}

bool activation_env_cleared() {
  return std::getenv("LISTEN_PID") == nullptr && std::getenv("LISTEN_FDS") == nullptr &&
         std::getenv("LISTEN_FDNAMES") == nullptr;
}

// Expects take_socket_activation_fd() to throw pando::Error for whatever
// sits at fd 3, with otherwise valid variables.
int expect_rejected(const std::function<int()>& make_fd, const char* fds = "1") {
  if (!install_as_fd3(make_fd())) return kSetupFailed;
  set_activation_env(getpid(), fds);
  try {
    take_socket_activation_fd();
  } catch (const pando::Error&) {
    return activation_env_cleared() ? kOk : kEnvLeft;
  }
  return kDidNotThrow;
}

TEST(SocketActivation, AbsentVariablesMeanNotActivated) {
  EXPECT_EQ(run_in_child([] {
              unsetenv("LISTEN_PID");
              unsetenv("LISTEN_FDS");
              return take_socket_activation_fd().has_value() ? kWrongResult : kOk;
            }),
            kOk);
}

TEST(SocketActivation, TakesListeningUnixStreamSocket) {
  TempDir dir;
  const std::string path = dir.path() + "/helper.sock";
  EXPECT_EQ(run_in_child([&] {
              const int fd = bound_unix_socket(SOCK_STREAM, path);
              if (fd < 0 || listen(fd, 4) != 0 || !install_as_fd3(fd)) return kSetupFailed;
              set_activation_env(getpid(), "1");
              const std::optional<int> got = take_socket_activation_fd();
              if (got != 3) return kWrongResult;
              const int flags = fcntl(3, F_GETFD);
              if (flags < 0 || (flags & FD_CLOEXEC) == 0) return kNotCloexec;
              if (!activation_env_cleared()) return kEnvLeft;
              sockaddr_un addr{};
              socklen_t len = sizeof(addr);
              if (getsockname(3, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
                  path != addr.sun_path) {
                return kWrongSocket;
              }
              return kOk;
            }),
            kOk);
}

TEST(SocketActivation, VariablesForAnotherProcessAreIgnoredAndCleared) {
  TempDir dir;
  const std::string path = dir.path() + "/helper.sock";
  EXPECT_EQ(run_in_child([&] {
              const int fd = bound_unix_socket(SOCK_STREAM, path);
              if (fd < 0 || listen(fd, 4) != 0 || !install_as_fd3(fd)) return kSetupFailed;
              set_activation_env(getppid(), "1");
              if (take_socket_activation_fd().has_value()) return kWrongResult;
              if (!activation_env_cleared()) return kEnvLeft;
              // The fd belongs to whoever the variables were meant for: left as found.
              const int flags = fcntl(3, F_GETFD);
              if (flags < 0 || (flags & FD_CLOEXEC) != 0) return kFdTouched;
              return kOk;
            }),
            kOk);
}

TEST(SocketActivation, RejectsOtherSocketCounts) {
  TempDir dir;
  for (const char* count : {"0", "2"}) {
    EXPECT_EQ(run_in_child([&] {
                return expect_rejected(
                    [&] {
                      const int fd = bound_unix_socket(SOCK_STREAM, dir.path() + "/s" + count);
                      return fd >= 0 && listen(fd, 4) == 0 ? fd : -1;
                    },
                    count);
              }),
              kOk)
        << "LISTEN_FDS=" << count;
  }
}

TEST(SocketActivation, RejectsMalformedVariables) {
  TempDir dir;
  int round = 0;
  for (const char* pid_text : {"", "12abc", "-1", "99999999999999999999"}) {
    const std::string path = dir.path() + "/s" + std::to_string(round++);
    EXPECT_EQ(run_in_child([&] {
                const int fd = bound_unix_socket(SOCK_STREAM, path);
                if (fd < 0 || listen(fd, 4) != 0 || !install_as_fd3(fd)) return kSetupFailed;
                setenv("LISTEN_PID", pid_text, 1);
                setenv("LISTEN_FDS", "1", 1);
                try {
                  take_socket_activation_fd();
                } catch (const pando::Error&) {
                  return activation_env_cleared() ? kOk : kEnvLeft;
                }
                return kDidNotThrow;
              }),
              kOk)
        << "LISTEN_PID=\"" << pid_text << "\"";
  }
  EXPECT_EQ(run_in_child([&] {
              const int fd = bound_unix_socket(SOCK_STREAM, dir.path() + "/t");
              if (fd < 0 || listen(fd, 4) != 0 || !install_as_fd3(fd)) return kSetupFailed;
              setenv("LISTEN_PID", std::to_string(getpid()).c_str(), 1);
              unsetenv("LISTEN_FDS");
              try {
                take_socket_activation_fd();
              } catch (const pando::Error&) {
                return kOk;
              }
              return kDidNotThrow;
            }),
            kOk);
}

TEST(SocketActivation, RejectsUnixSocketThatIsNotListening) {
  TempDir dir;
  EXPECT_EQ(
      run_in_child([&] {
        return expect_rejected([&] { return bound_unix_socket(SOCK_STREAM, dir.path() + "/s"); });
      }),
      kOk);
}

TEST(SocketActivation, RejectsDatagramSocket) {
  TempDir dir;
  EXPECT_EQ(
      run_in_child([&] {
        return expect_rejected([&] { return bound_unix_socket(SOCK_DGRAM, dir.path() + "/s"); });
      }),
      kOk);
}

TEST(SocketActivation, RejectsListeningTcpSocket) {
  EXPECT_EQ(run_in_child([] {
              return expect_rejected([] {
                const int fd = socket(AF_INET, SOCK_STREAM, 0);
                sockaddr_in addr{};
                addr.sin_family = AF_INET;
                addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
                    listen(fd, 4) != 0) {
                  return -1;
                }
                return fd;
              });
            }),
            kOk);
}

TEST(SocketActivation, RejectsNonSocketAndClosedFd) {
  EXPECT_EQ(run_in_child([] { return expect_rejected([] { return open("/dev/null", O_RDWR); }); }),
            kOk);
  EXPECT_EQ(run_in_child([] {
              if (close(3) != 0 && errno != EBADF) return static_cast<int>(kSetupFailed);
              set_activation_env(getpid(), "1");
              try {
                take_socket_activation_fd();
              } catch (const pando::Error&) {
                return static_cast<int>(kOk);
              }
              return static_cast<int>(kDidNotThrow);
            }),
            kOk);
}

class Notify : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("NOTIFY_SOCKET")) saved_ = old;
    unsetenv("NOTIFY_SOCKET");
  }
  void TearDown() override {
    if (receiver_ >= 0) close(receiver_);
    if (saved_) {
      setenv("NOTIFY_SOCKET", saved_->c_str(), 1);
    } else {
      unsetenv("NOTIFY_SOCKET");
    }
  }

  // The datagram is queued by the time sendto() returns, so a non-blocking read
  // either finds it or proves it was never sent.
  std::string receive() {
    char buf[512];
    const ssize_t n = recv(receiver_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) return "<errno " + std::to_string(errno) + ">";
    return std::string(buf, static_cast<size_t>(n));
  }

  int receiver_ = -1;
  std::optional<std::string> saved_;
};

TEST_F(Notify, UnsetIsNoOp) { EXPECT_NO_THROW(notify("READY=1")); }

TEST_F(Notify, SendsToPathSocket) {
  TempDir dir;
  const std::string path = dir.path() + "/notify";
  receiver_ = bound_unix_socket(SOCK_DGRAM, path);
  ASSERT_GE(receiver_, 0) << std::strerror(errno);
  setenv("NOTIFY_SOCKET", path.c_str(), 1);

  notify("READY=1");
  EXPECT_EQ(receive(), "READY=1");
  notify("STATUS=3 sessions running");
  EXPECT_EQ(receive(), "STATUS=3 sessions running");
  notify("STOPPING=1");
  EXPECT_EQ(receive(), "STOPPING=1");
}

TEST_F(Notify, SendsToAbstractSocket) {
  const std::string name = "pandotest-notify-" + std::to_string(getpid());
  receiver_ = socket(AF_UNIX, SOCK_DGRAM, 0);
  ASSERT_GE(receiver_, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  ASSERT_EQ(bind(receiver_, reinterpret_cast<sockaddr*>(&addr), len), 0) << std::strerror(errno);
  setenv("NOTIFY_SOCKET", ("@" + name).c_str(), 1);

  notify("READY=1");
  EXPECT_EQ(receive(), "READY=1");
}

TEST_F(Notify, RejectsRelativeName) {
  setenv("NOTIFY_SOCKET", "run/notify", 1);
  EXPECT_THROW(notify("READY=1"), pando::Error);
}

TEST_F(Notify, ReportsMissingListener) {
  TempDir dir;
  setenv("NOTIFY_SOCKET", (dir.path() + "/nobody").c_str(), 1);
  EXPECT_THROW(notify("READY=1"), pando::Error);
}

}  // namespace
}  // namespace pando::daemon
