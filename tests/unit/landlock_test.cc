// Landlock on its own (no namespaces, no user switch): the ruleset built from
// a plan whose project and HOME are temporary directories, on the real system
// paths. The temporary tree lives under /var/tmp because /tmp is writable by
// rule.

#include "daemon/sandbox/landlock.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "proto/error.h"
#include "tests/unit/child_process.h"

namespace {

using pando::helper::sandbox::v1::SandboxPlan;
using pando::sandbox::apply_landlock;
using pando::sandbox::landlock_abi_version;
using pando::testing::Child;
using pando::testing::ChildResult;
using pando::testing::RunInChild;

// Opens `path` for writing (creating it) and reports the errno, 0 on success.
int write_errno(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  const int rc = write(fd, "x", 1) == 1 ? 0 : errno;
  close(fd);
  return rc;
}

int read_errno(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  char c;
  const int rc = read(fd, &c, 1) >= 0 ? 0 : errno;
  close(fd);
  return rc;
}

int list_errno(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  close(fd);
  return 0;
}

class LandlockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    abi_ = landlock_abi_version();
    ASSERT_GT(abi_, 0) << "this kernel has no Landlock";
    char tmpl[] = "/var/tmp/pandotest-landlock-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << std::strerror(errno);
    root_ = tmpl;
    for (const char* dir : {"project", "home", "outside"}) {
      ASSERT_EQ(mkdir((root_ + "/" + dir).c_str(), 0755), 0) << std::strerror(errno);
    }
    ASSERT_EQ(write_errno(root_ + "/project/existing"), 0);
  }

  void TearDown() override {
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }

  SandboxPlan plan(bool project_writable) const {
    SandboxPlan plan;
    plan.set_project_root(root_ + "/project");
    plan.set_project_writable(project_writable);
    plan.set_sandbox_home(root_ + "/home");
    plan.set_require_landlock(true);
    return plan;
  }

  // Sets no_new_privs (drop_to_role_user does it in the launcher) and
  // applies the plan, in the calling child.
  static int restrict(const Child& child, const SandboxPlan& plan, int expected_abi) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return child.FailErrno("no_new_privs");
    const int used = apply_landlock(plan);
    if (used != std::min(expected_abi, 7)) return child.Fail("ABI used " + std::to_string(used));
    return 0;
  }

  int abi_ = 0;
  std::string root_;
};

TEST_F(LandlockTest, WorkspaceWritesOnlyInsideItsTrees) {
  {
    std::ofstream secret(root_ + "/outside/secret");
    secret << "outside";
  }
  const auto result = RunInChild([&](const Child& child) {
    if (int rc = restrict(child, plan(true), abi_); rc != 0) return rc;
    if (int e = write_errno(root_ + "/project/new"))
      return child.Fail("project: " + std::to_string(e));
    if (mkdir((root_ + "/project/sub").c_str(), 0755) != 0) return child.FailErrno("mkdir project");
    if (int e = write_errno(root_ + "/home/new")) return child.Fail("home: " + std::to_string(e));
    if (write_errno(root_ + "/outside/new") != EACCES) return child.Fail("outside not EACCES");
    if (read_errno(root_ + "/outside/secret") != EACCES) return child.Fail("outside readable");
    // `/` is listable (the view's own root), and rights add up along the tree: on its own
    // Landlock lets the role list names anywhere, never read a file outside its rules.
    if (int e = list_errno(root_ + "/outside")) {
      return child.Fail("outside not listable: " + std::to_string(e));
    }
    if (int e = list_errno("/")) return child.Fail("/ not listable: " + std::to_string(e));
    if (write_errno("/etc/hostname") != EACCES) return child.Fail("/etc writable");
    if (int e = read_errno("/etc/hostname"))
      return child.Fail("/etc/hostname: " + std::to_string(e));
    if (int e = write_errno("/dev/null")) return child.Fail("/dev/null: " + std::to_string(e));
    const int truncating = open("/dev/null", O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (truncating < 0) return child.FailErrno("/dev/null with O_TRUNC");
    close(truncating);
    return 0;
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

// Binds a Unix stream socket at `path`; the errno, 0 on success.
int bind_errno(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return ENAMETOOLONG;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ? 0 : errno;
  close(fd);
  return rc;
}

int mkfifo_errno(const std::string& path) { return mkfifo(path.c_str(), 0644) == 0 ? 0 : errno; }

// A FIFO left in the project hangs host tools that open it, and a socket bound there is a channel
// from the sandbox to any process that connects, another session of the caller's included. The
// sandbox home sits inside the project on disk, as in the real layout, shared by the role's
// sessions: it grants neither. Only /tmp and /dev/shm (private to the session) do.
TEST_F(LandlockTest, WorkspaceMakesNoFifoOrSocketInTheProject) {
  const std::string project = root_ + "/project";
  const std::string home = project + "/.pando-sandbox/workspace";
  ASSERT_EQ(mkdir((project + "/.pando-sandbox").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(mkdir(home.c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(mkdir((project + "/sub").c_str(), 0755), 0) << std::strerror(errno);
  const std::string tag = "pandotest-landlock-" + std::to_string(getpid());
  const std::string tmp = "/tmp/" + tag;
  const std::string shm = "/dev/shm/" + tag;
  ASSERT_EQ(mkdir(tmp.c_str(), 0755), 0) << std::strerror(errno);
  const bool has_shm = mkdir(shm.c_str(), 0755) == 0;
  SandboxPlan workspace = plan(true);
  workspace.set_sandbox_home(home);

  const auto result = RunInChild([&](const Child& child) {
    if (int rc = restrict(child, workspace, abi_); rc != 0) return rc;
    for (const std::string& dir : {project, project + "/sub", home}) {
      if (int e = mkfifo_errno(dir + "/fifo"); e != EACCES) {
        return child.Fail("mkfifo in " + dir + ": " + std::to_string(e));
      }
      if (int e = bind_errno(dir + "/sock"); e != EACCES) {
        return child.Fail("bind in " + dir + ": " + std::to_string(e));
      }
    }
    std::vector<std::string> allowed = {tmp};
    if (has_shm) allowed.push_back(shm);
    for (const std::string& dir : allowed) {
      if (int e = mkfifo_errno(dir + "/fifo")) {
        return child.Fail("mkfifo in " + dir + ": " + std::to_string(e));
      }
      if (int e = bind_errno(dir + "/sock")) {
        return child.Fail("bind in " + dir + ": " + std::to_string(e));
      }
    }
    return 0;
  });
  std::filesystem::remove_all(tmp);
  if (has_shm) std::filesystem::remove_all(shm);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (const std::string& dir : {project, project + "/sub", home}) {
    EXPECT_FALSE(std::filesystem::exists(dir + "/fifo")) << dir;
    EXPECT_FALSE(std::filesystem::exists(dir + "/sock")) << dir;
  }
}

// Rights add up along the path: a project below /tmp would get both from the /tmp rule, so
// /tmp loses them for that session and only /dev/shm keeps them.
TEST_F(LandlockTest, WorkspaceMakesNoFifoOrSocketInAProjectBelowTmp) {
  const std::string base = "/tmp/pandotest-landlock-" + std::to_string(getpid());
  const std::string project = base + "/project";
  const std::string home = project + "/.pando-sandbox/workspace";
  std::error_code ec;
  ASSERT_TRUE(std::filesystem::create_directories(home, ec)) << ec.message();
  ASSERT_EQ(mkdir((base + "/other").c_str(), 0755), 0) << std::strerror(errno);
  const std::string shm = "/dev/shm/pandotest-landlock-" + std::to_string(getpid());
  const bool has_shm = mkdir(shm.c_str(), 0755) == 0;
  SandboxPlan workspace = plan(true);
  workspace.set_project_root(project);
  workspace.set_sandbox_home(home);

  const auto result = RunInChild([&](const Child& child) {
    if (int rc = restrict(child, workspace, abi_); rc != 0) return rc;
    for (const std::string& dir : {project, base + "/other", home}) {
      if (int e = mkfifo_errno(dir + "/fifo"); e != EACCES) {
        return child.Fail("mkfifo in " + dir + ": " + std::to_string(e));
      }
      if (int e = bind_errno(dir + "/sock"); e != EACCES) {
        return child.Fail("bind in " + dir + ": " + std::to_string(e));
      }
    }
    if (int e = write_errno(base + "/other/file"))
      return child.Fail("/tmp file: " + std::to_string(e));
    std::vector<std::string> allowed;
    if (has_shm) allowed.push_back(shm);
    for (const std::string& dir : allowed) {
      if (int e = mkfifo_errno(dir + "/fifo")) {
        return child.Fail("mkfifo in " + dir + ": " + std::to_string(e));
      }
      if (int e = bind_errno(dir + "/sock")) {
        return child.Fail("bind in " + dir + ": " + std::to_string(e));
      }
    }
    return 0;
  });
  std::filesystem::remove_all(base);
  if (has_shm) std::filesystem::remove_all(shm);
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST_F(LandlockTest, CoreProjectIsReadOnly) {
  const auto result = RunInChild([&](const Child& child) {
    if (int rc = restrict(child, plan(false), abi_); rc != 0) return rc;
    if (write_errno(root_ + "/project/new") != EACCES) return child.Fail("project create allowed");
    if (write_errno(root_ + "/project/existing") != EACCES)
      return child.Fail("project write allowed");
    if (unlink((root_ + "/project/existing").c_str()) == 0 || errno != EACCES) {
      return child.Fail("project unlink not EACCES");
    }
    if (int e = read_errno(root_ + "/project/existing"))
      return child.Fail("project read " + std::to_string(e));
    if (int e = write_errno(root_ + "/home/new")) return child.Fail("home: " + std::to_string(e));
    return 0;
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST_F(LandlockTest, RequiresNoNewPrivs) {
  const auto result = RunInChild([&](const Child& child) {
    try {
      apply_landlock(plan(true));
    } catch (const pando::Error&) {
      return 0;
    }
    return child.Fail("applied without no_new_privs");
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST_F(LandlockTest, DeniesTcpConnect) {
  if (abi_ < 4) GTEST_SKIP() << "Landlock ABI " << abi_ << " has no network rights (needs 4)";
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);

  const auto result = RunInChild([&](const Child& child) {
    const int before = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(before, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return child.FailErrno("connect before Landlock");
    }
    if (int rc = restrict(child, plan(true), abi_); rc != 0) return rc;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return child.FailErrno("socket");
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      return child.Fail("TCP connect allowed");
    }
    if (errno != EACCES) return child.FailErrno("connect: expected EACCES");
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (bind(server, reinterpret_cast<sockaddr*>(&any), sizeof(any)) == 0) {
      return child.Fail("TCP bind allowed");
    }
    if (errno != EACCES) return child.FailErrno("bind: expected EACCES");
    return 0;
  });
  close(listener);
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST_F(LandlockTest, ScopesAbstractSocketsAndSignals) {
  if (abi_ < 6) GTEST_SKIP() << "Landlock ABI " << abi_ << " has no scopes (needs 6)";
  const std::string name = "pandotest-landlock-" + std::to_string(getpid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const auto addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), addr_len), 0)
      << std::strerror(errno);
  ASSERT_EQ(listen(listener, 1), 0);

  const auto result = RunInChild([&](const Child& child) {
    const int before = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(before, reinterpret_cast<sockaddr*>(&addr), addr_len) != 0) {
      return child.FailErrno("abstract connect before Landlock");
    }
    if (kill(getppid(), 0) != 0) return child.FailErrno("signal before Landlock");
    if (int rc = restrict(child, plan(true), abi_); rc != 0) return rc;
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), addr_len) == 0) {
      return child.Fail("abstract unix connect allowed");
    }
    if (errno != EPERM) return child.FailErrno("abstract connect: expected EPERM");
    if (kill(getppid(), 0) == 0) return child.Fail("signal outside the domain allowed");
    if (errno != EPERM) return child.FailErrno("kill: expected EPERM");
    return 0;
  });
  close(listener);
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST(LandlockStatusTest, DescribesTheAbi) {
  const int abi = landlock_abi_version();
  const std::string detail = pando::sandbox::landlock_status_detail();
  if (abi == 0) {
    EXPECT_EQ(detail.rfind("unavailable", 0), 0u) << detail;
    return;
  }
  EXPECT_EQ(detail.rfind("ABI " + std::to_string(abi) + ": fs", 0), 0u) << detail;
  EXPECT_EQ(detail.find("net tcp") != std::string::npos, abi >= 4) << detail;
  EXPECT_EQ(detail.find("scope") != std::string::npos, abi >= 6) << detail;
}

// Makes `nr` fail with `error` in this process and its children, as a container's or service
// manager's seccomp filter does; 0, or the errno of the install.
int refuse_syscall(long nr, int error) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | static_cast<uint32_t>(error)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  const sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) != 0) {
    return errno;
  }
  return 0;
}

// A container's or service manager's seccomp filter that refuses Landlock's calls with EPERM
// (systemd-nspawn's does) is named as such in the status line and in the refusal of a launch
// that requires Landlock: an admin told that the kernel lacks Landlock looks for a kernel, not
// for the filter that turned a layer off.
TEST(LandlockStatusTest, AFilterThatRefusesLandlockIsNotTakenForTheKernel) {
  const ChildResult result = RunInChild([](const Child& child) {
    if (const int error = refuse_syscall(SYS_landlock_create_ruleset, EPERM); error != 0) {
      return child.Fail(std::string("seccomp: ") + std::strerror(error));
    }
    const std::string detail = pando::sandbox::landlock_status_detail();
    if (detail !=
        "unavailable: landlock_create_ruleset is blocked by a seccomp filter (EPERM) "
        "of the container or service manager") {
      return child.Fail("status: " + detail);
    }
    SandboxPlan plan;
    plan.set_require_landlock(true);
    try {
      apply_landlock(plan);
      return child.Fail("applied under the filter");
    } catch (const pando::Error& e) {
      const std::string refusal = e.what();
      if (e.code() != pando::helper::v1::ERROR_SANDBOX_UNSUPPORTED ||
          refusal.find("blocked by a seccomp filter (EPERM)") == std::string::npos ||
          refusal.find("kernel") != std::string::npos) {
        return child.Fail("refusal: " + refusal);
      }
    }
    return 0;
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

// ENOSYS, which a filter can fake too (systemd's do), is said to be either.
TEST(LandlockStatusTest, AnEnosysIsSaidToBeTheKernelOrAFilter) {
  const ChildResult result = RunInChild([](const Child& child) {
    if (const int error = refuse_syscall(SYS_landlock_create_ruleset, ENOSYS); error != 0) {
      return child.Fail(std::string("seccomp: ") + std::strerror(error));
    }
    const std::string detail = pando::sandbox::landlock_status_detail();
    if (detail.rfind("unavailable: ", 0) != 0 ||
        detail.find("not supported by this kernel") == std::string::npos ||
        detail.find("seccomp filter") == std::string::npos) {
      return child.Fail("status: " + detail);
    }
    return 0;
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

}  // namespace
