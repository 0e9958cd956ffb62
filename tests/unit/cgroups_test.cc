// Session cgroups on the real kernel (needs root), below a parent named pandotest-<pid> in
// each hierarchy, removed in TearDown; limits and usage are read back through the tests'
// CgroupReader, which knows both layouts. The v1 and v2 halves (CgroupVersion) are also run on
// fake directory trees, so each file they write or read is checked on any host.

#include "daemon/cgroups.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/cgroup_version.h"
#include "proto/error.h"
#include "tests/integration/cgroup_reader.h"

namespace pando::daemon {
namespace {

using namespace std::chrono_literals;
namespace text = cgroup_text;
using itest::CgroupController;
using itest::CgroupReader;
using pando::helper::v1::ErrorCode;

// Runs `f`, which must throw pando::Error with `code`.
template <typename F>
void expect_error(ErrorCode code, F f) {
  try {
    f();
    ADD_FAILURE() << "no pando::Error thrown";
  } catch (const pando::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
  }
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

bool is_dir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<pid_t> procs_of(const std::string& dir) {
  std::vector<pid_t> out;
  std::istringstream in(slurp(dir + "/cgroup.procs"));
  for (pid_t p; in >> p;) out.push_back(p);
  return out;
}

bool listed(const std::string& dir, pid_t pid) {
  for (pid_t p : procs_of(dir)) {
    if (p == pid) return true;
  }
  return false;
}

std::vector<text::Mount> mounts() { return text::parse_mountinfo(slurp("/proc/self/mountinfo")); }

std::optional<text::Mount> unified_mount() {
  for (const auto& m : mounts()) {
    if (m.unified) return m;
  }
  return std::nullopt;
}

// A forked child that blocks until release(), then runs `body` and exits with its result.
// Unreaped children are SIGKILLed and reaped on destruction.
class Child {
 public:
  explicit Child(std::function<int()> body) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) std::abort();
    pid_ = fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      close(fds[1]);
      char c;
      if (read(fds[0], &c, 1) != 1) _exit(120);
      close(fds[0]);
      _exit(body());
    }
    close(fds[0]);
    go_ = fds[1];
  }
  ~Child() {
    if (go_ >= 0) close(go_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void release() {
    ASSERT_EQ(write(go_, "x", 1), 1);
    close(go_);
    go_ = -1;
  }
  // Waits up to 10 s; a child still alive then is a test failure and gets SIGKILLed, so a
  // broken kill path fails the test instead of hanging it.
  int wait() {
    int status = 0;
    for (int i = 0; i < 10000; ++i) {
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return status;
      }
      EXPECT_EQ(r, 0) << std::strerror(errno);
      if (r != 0) return -1;
      std::this_thread::sleep_for(1ms);
    }
    ADD_FAILURE() << "child " << pid_ << " still running";
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
};

// The child forks one grandchild, reports its pid on `report`, and both sleep forever.
int fork_grandchild_and_pause(int report) {
  pid_t gc = fork();
  if (gc < 0) return 121;
  if (gc == 0) {
    for (;;) pause();
  }
  if (write(report, &gc, sizeof gc) != sizeof gc) return 122;
  for (;;) pause();
}

pid_t read_pid(int fd) {
  pid_t pid = -1;
  if (read(fd, &pid, sizeof pid) != sizeof pid) return -1;
  return pid;
}

bool process_gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

bool wait_gone(pid_t pid) {
  for (int i = 0; i < 2000; ++i) {
    if (process_gone(pid)) return true;
    // A grandchild reparented to init becomes a zombie until init reaps it.
    std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    size_t paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z') {
      return true;
    }
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// Kills everything below `dir` (sparing this process) and removes it bottom-up.
void destroy_tree(const std::string& dir) {
  if (!is_dir(dir)) return;
  if (DIR* d = opendir(dir.c_str())) {
    std::vector<std::string> subdirs;
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (e->d_type == DT_DIR && n != "." && n != "..") subdirs.push_back(dir + "/" + n);
    }
    closedir(d);
    for (const auto& s : subdirs) destroy_tree(s);
  }
  for (int i = 0; i < 1000; ++i) {
    for (pid_t p : procs_of(dir)) {
      if (p != getpid()) kill(p, SIGKILL);
    }
    if (rmdir(dir.c_str()) == 0 || errno == ENOENT) return;
    std::this_thread::sleep_for(1ms);
  }
  ADD_FAILURE() << "cannot remove " << dir << ": " << std::strerror(errno);
}

class CgroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "cgroup tests need root";
    parent_ = "pandotest-" + std::to_string(getpid());
    config_.set_parent(parent_);
  }

  void TearDown() override {
    // A delegation test moves this process; put it back at the v2 root before removing.
    if (auto u = unified_mount()) {
      for (const auto& m : text::parse_proc_cgroup(slurp("/proc/self/cgroup"))) {
        if (m.hierarchy_id == "0" && m.path.starts_with("/" + parent_)) {
          std::ofstream(u->mount_point + "/cgroup.procs") << getpid() << std::flush;
        }
      }
    }
    for (const auto& m : mounts()) destroy_tree(m.mount_point + "/" + parent_);
    for (const auto& m : mounts()) {
      EXPECT_FALSE(is_dir(m.mount_point + "/" + parent_)) << m.mount_point << " still has it";
    }
  }

  // A manager with memory and pids limits: v1 through detect() where v1 memory is mounted
  // (this CI host), else v2 at the root with parent_. detect() is avoided on v2 because, run
  // inside a delegated unit, it would move this test process into the unit's leaf.
  std::optional<CgroupManager> limited() {
    for (const auto& m : mounts()) {
      if (!m.unified &&
          std::find(m.controllers.begin(), m.controllers.end(), "memory") != m.controllers.end()) {
        CgroupManager mgr = CgroupManager::detect(config_);
        if (mgr.mode() != CgroupMode::kLegacy) return std::nullopt;
        return mgr;
      }
    }
    auto u = unified_mount();
    if (!u) return std::nullopt;
    std::string offered = slurp(u->mount_point + "/cgroup.controllers");
    if (offered.find("memory") == std::string::npos || offered.find("pids") == std::string::npos) {
      return std::nullopt;
    }
    return CgroupManager::set_up_unified(
        {.mount_point = u->mount_point, .own_path = "/", .parent = parent_});
  }

  std::string parent_;
  pando::helper::config::v1::CgroupConfig config_;
};

#define REQUIRE_LIMITS(var)                                                             \
  auto var##_opt = limited();                                                           \
  if (!var##_opt) GTEST_SKIP() << "host has neither v1 nor v2 memory+pids controllers"; \
  CgroupManager& var = *var##_opt

constexpr uid_t kCaller = 4242;
const CallerLimits kUnlimitedCaller{};

const std::string* dir_with(const std::vector<std::string>& dirs, const std::string& file) {
  for (const auto& d : dirs) {
    if (access((d + "/" + file).c_str(), F_OK) == 0) return &d;
  }
  return nullptr;
}

// ---- pure text logic -------------------------------------------------------------------------

TEST(CgroupText, ParsesHybridMountinfo) {
  const std::string info =
      "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
      "32 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw shared:5 - cgroup cgroup rw,cpu,cpuacct\n"
      "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "39 30 0:36 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n"
      "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
      "41 30 0:38 /sub /mnt/my\\040cg rw - cgroup2 none rw\n"
      "garbage line\n";
  auto m = text::parse_mountinfo(info);
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0].mount_point, "/sys/fs/cgroup/cpu");
  EXPECT_EQ(m[0].controllers, std::vector<std::string>{"cpu"});
  EXPECT_EQ(m[1].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_FALSE(m[1].unified);
  EXPECT_EQ(m[2].controllers, std::vector<std::string>{"memory"});
  EXPECT_TRUE(m[3].controllers.empty());  // name=systemd carries no controller
  EXPECT_TRUE(m[4].unified);
  EXPECT_EQ(m[4].mount_point, "/sys/fs/cgroup/unified");
  EXPECT_EQ(m[5].mount_point, "/mnt/my cg");
  EXPECT_EQ(m[5].root, "/sub");
}

TEST(CgroupText, ParsesProcCgroup) {
  auto v = text::parse_proc_cgroup(
      "4:memory:/process_api/7c11\n2:cpu,cpuacct:/\n"
      "0::/system.slice/pando-helperd.service\nbad\n");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].controllers, std::vector<std::string>{"memory"});
  EXPECT_EQ(v[0].path, "/process_api/7c11");
  EXPECT_EQ(v[1].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ(v[2].hierarchy_id, "0");
  EXPECT_TRUE(v[2].controllers.empty());
  EXPECT_EQ(v[2].path, "/system.slice/pando-helperd.service");
}

TEST(CgroupText, FormatsCpuMax) {
  EXPECT_EQ(text::cpu_max_line(20), "20000 100000");
  EXPECT_EQ(text::cpu_max_line(200), "200000 100000");
  EXPECT_EQ(text::cpu_max_line(1), "1000 100000");
  EXPECT_EQ(text::cpu_max_line(0), "max 100000");
}

TEST(CgroupText, ValidatesParentAndSessionId) {
  EXPECT_TRUE(text::valid_parent("pando-helper"));
  EXPECT_TRUE(text::valid_parent("system.slice/pando"));
  for (const char* bad : {"", "/abs", "a//b", "a/", "..", "a/../b", ".", "a/./b", "a b", "a\nb"}) {
    EXPECT_FALSE(text::valid_parent(bad)) << bad;
  }
  EXPECT_TRUE(text::valid_session_id("0123abcdef"));
  for (const char* bad : {"", "a/b", "a.b", "..", "x y", "session\n"}) {
    EXPECT_FALSE(text::valid_session_id(bad)) << bad;
  }
  EXPECT_FALSE(text::valid_session_id(std::string(65, 'a')));
}

TEST(CgroupText, DecidesDelegation) {
  const std::string unit = "/system.slice/pando-helperd.service";
  EXPECT_EQ(text::delegated_unit(unit, true), unit);
  EXPECT_EQ(text::delegated_unit(unit + "/daemon", true), unit);  // restarted in place
  EXPECT_EQ(text::delegated_unit("/user.slice/user-1000.slice/x.scope", true),
            "/user.slice/user-1000.slice/x.scope");
  EXPECT_EQ(text::delegated_unit(unit, false), std::nullopt);  // no Delegate=yes marker
  EXPECT_EQ(text::delegated_unit("/", true), std::nullopt);
  EXPECT_EQ(text::delegated_unit("/system.slice", true), std::nullopt);
  EXPECT_EQ(text::delegated_unit("/.service", true), std::nullopt);
  EXPECT_EQ(text::delegated_unit(unit + "/other", true), std::nullopt);
}

TEST(CgroupText, MapsPathsIntoMounts) {
  text::Mount root{"/sys/fs/cgroup", "/", true, {}};
  EXPECT_EQ(text::path_in_mount(root, "/a.service"), "/sys/fs/cgroup/a.service");
  EXPECT_EQ(text::path_in_mount(root, "/"), "/sys/fs/cgroup");
  text::Mount sub{"/mnt/cg", "/sub", true, {}};
  EXPECT_EQ(text::path_in_mount(sub, "/sub/x"), "/mnt/cg/x");
  EXPECT_EQ(text::path_in_mount(sub, "/sub"), "/mnt/cg");
  EXPECT_EQ(text::path_in_mount(sub, "/subx"), std::nullopt);
  EXPECT_EQ(text::path_in_mount(sub, "/other"), std::nullopt);
}

TEST(CgroupText, ReadsKeyedValues) {
  const std::string events = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
  EXPECT_EQ(text::keyed_value(events, "max"), 12u);
  EXPECT_EQ(text::keyed_value(events, "oom"), 1u);
  EXPECT_EQ(text::keyed_value(events, "oom_kill"), 1u);
  EXPECT_EQ(text::keyed_value(events, "oom_killer"), std::nullopt);
  EXPECT_EQ(text::keyed_value("usage_usec 1234\nuser_usec 1000\n", "usage_usec"), 1234u);
}

// The defaults come from config.cc alone: here an unset limit is no limit.
TEST(CgroupText, LimitsFromConfig) {
  pando::helper::config::v1::ResourceLimits cfg;
  SessionLimits d = CgroupManager::limits_from_config(cfg);
  EXPECT_EQ(d.memory_max_bytes, 0u);
  EXPECT_EQ(d.swap_max_bytes, 0u);
  EXPECT_EQ(d.pids_max, 0u);
  EXPECT_EQ(d.cpu_max_percent, 0u);
  cfg.set_memory_max_bytes(1 << 20);
  cfg.set_swap_max_bytes(1 << 21);
  cfg.set_pids_max(7);
  cfg.set_cpu_max_percent(0);
  SessionLimits s = CgroupManager::limits_from_config(cfg);
  EXPECT_EQ(s.memory_max_bytes, 1u << 20);
  EXPECT_EQ(s.swap_max_bytes, 1u << 21);
  EXPECT_EQ(s.pids_max, 7u);
  EXPECT_EQ(s.cpu_max_percent, 0u);
  pando::helper::config::v1::CallerLimits caller;
  caller.set_memory_max_bytes(1 << 22);
  caller.set_pids_max(9);
  caller.set_cpu_max_percent(300);
  const CallerLimits c = CgroupManager::caller_limits_from_config(caller);
  EXPECT_EQ(c.memory_max_bytes, 1u << 22);
  EXPECT_EQ(c.pids_max, 9u);
  EXPECT_EQ(c.cpu_max_percent, 300u);
}

// ---- real cgroups ----------------------------------------------------------------------------

TEST_F(CgroupsTest, RejectsBadParent) {
  for (const char* bad : {"../escape", "/abs", ""}) {
    config_.set_parent(bad);
    expect_error(pando::helper::v1::ERROR_CONFIG_INVALID, [&] { CgroupManager::detect(config_); });
  }
}

TEST_F(CgroupsTest, DetectsLayoutOfThisHost) {
  bool v1_memory = false;
  std::optional<text::Mount> v2_memory;
  for (const auto& m : mounts()) {
    if (!m.unified &&
        std::find(m.controllers.begin(), m.controllers.end(), "memory") != m.controllers.end()) {
      v1_memory = true;
    }
    if (m.unified &&
        slurp(m.mount_point + "/cgroup.controllers").find("memory") != std::string::npos) {
      v2_memory = m;
    }
  }
  if (v2_memory) {
    // As detect() decides it: a unit's cgroup marked delegated by systemd, or the environment
    // saying so. In a unit without delegation detect() moves nothing.
    const char* env = std::getenv("PANDO_CGROUP_DELEGATED");
    for (const auto& own : text::parse_proc_cgroup(slurp("/proc/self/cgroup"))) {
      const auto unit =
          own.hierarchy_id == "0" ? text::delegated_unit(own.path, true) : std::nullopt;
      if (!unit) continue;
      const std::string dir = v2_memory->mount_point + *unit;
      char value[2] = {};
      const bool marked = getxattr(dir.c_str(), "trusted.delegate", value, 1) == 1 ||
                          getxattr(dir.c_str(), "user.delegate", value, 1) == 1;
      if ((marked && value[0] == '1') || (env != nullptr && std::string(env) == "1")) {
        GTEST_SKIP() << "running in unit " << *unit << ", delegated: detect() would move every"
                     << " process of the unit into its leaf";
      }
    }
  }
  CgroupManager m = CgroupManager::detect(config_);
  std::printf("detect(): %s\n", m.detail().c_str());
  if (v2_memory) {
    ASSERT_EQ(m.mode(), CgroupMode::kUnified) << m.detail();
    EXPECT_TRUE(
        m.detail().starts_with("v2 at " + v2_memory->mount_point + "/" + parent_ + ": memory pids"))
        << m.detail();
  } else if (v1_memory) {
    ASSERT_EQ(m.mode(), CgroupMode::kLegacy) << m.detail();
    EXPECT_TRUE(m.detail().starts_with("v1: memory,pids")) << m.detail();
    EXPECT_NE(m.detail().find("under /" + parent_), std::string::npos) << m.detail();
    if (unified_mount()) {
      EXPECT_NE(m.detail().find("cgroup2 at"), std::string::npos) << m.detail();
    }
    for (const auto& d : m.session_parent_dirs()) {
      EXPECT_TRUE(is_dir(d)) << d;
      EXPECT_TRUE(d.ends_with("/" + parent_)) << d;
    }
    EXPECT_NE(dir_with(m.session_parent_dirs(), "memory.limit_in_bytes"), nullptr);
    EXPECT_NE(dir_with(m.session_parent_dirs(), "pids.max"), nullptr);
  } else {
    EXPECT_EQ(m.mode(), CgroupMode::kNone) << m.detail();
    GTEST_SKIP() << "host has neither v1 nor v2 memory controller: " << m.detail();
  }
}

TEST_F(CgroupsTest, SessionLimitsProcessesAndTeardown) {
  REQUIRE_LIMITS(mgr);
  SessionLimits limits{64 << 20, 0, 32, 50};
  auto s = mgr.create_session("0123abcd", kCaller, limits, kUnlimitedCaller);
  EXPECT_EQ(s->name(), "session-0123abcd");
  std::printf("session: %s\n", s->describe().c_str());
  auto dirs = s->dirs();
  ASSERT_EQ(dirs.size(), mgr.session_parent_dirs().size());
  for (const auto& d : dirs) {
    EXPECT_TRUE(d.ends_with(parent_ + "/caller-4242/session-0123abcd")) << d;
  }
  auto value = [&](const std::string& file) -> std::string {
    const std::string* dir = dir_with(dirs, file);
    if (!dir) return "(no " + file + ")";
    return trimmed(slurp(*dir + "/" + file));
  };

  const CgroupReader reader(dirs);
  EXPECT_EQ(reader.unified(), mgr.mode() == CgroupMode::kUnified);
  EXPECT_EQ(reader.memory_max(), uint64_t{64} << 20);
  EXPECT_EQ(reader.pids_max(), 32u);
  if (reader.missing({CgroupController::kCpu}).empty()) {
    const auto cpu = reader.cpu_max();
    ASSERT_TRUE(cpu.has_value());
    EXPECT_EQ(cpu->quota_usec, 50000u);
    EXPECT_EQ(cpu->period_usec, 100000u);
  }
  // What only one version has: v2's oom.group and swap limit, v1's memory+swap limit.
  if (mgr.mode() == CgroupMode::kUnified) {
    EXPECT_EQ(value("memory.oom.group"), "1");
    if (dir_with(dirs, "memory.swap.max")) {
      EXPECT_EQ(value("memory.swap.max"), "0");
    }
  } else if (dir_with(dirs, "memory.memsw.limit_in_bytes")) {
    EXPECT_EQ(value("memory.memsw.limit_in_bytes"), std::to_string(64 << 20));
  }

  int report[2];
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  Child child([&] { return fork_grandchild_and_pause(report[1]); });
  close(report[1]);
  s->add_process(child.pid());
  for (const auto& d : dirs) EXPECT_TRUE(listed(d, child.pid())) << d;
  child.release();
  pid_t grandchild = read_pid(report[0]);
  close(report[0]);
  ASSERT_GT(grandchild, 0);
  for (const auto& d : dirs) EXPECT_TRUE(listed(d, grandchild)) << d;
  EXPECT_FALSE(s->remove());  // still populated

  s->kill_all();
  // The child is not reaped yet: a zombie no longer counts as a member.
  EXPECT_TRUE(s->wait_empty(2s));
  EXPECT_TRUE(wait_gone(grandchild));
  SessionUsage u = s->usage();
  std::printf("usage: peak %llu bytes, cpu %llu us, pids peak %llu\n",
              static_cast<unsigned long long>(u.memory_peak_bytes),
              static_cast<unsigned long long>(u.cpu_usage_usec),
              static_cast<unsigned long long>(u.pids_peak));
  EXPECT_GT(u.memory_peak_bytes, 0u);
  EXPECT_EQ(u.pids_peak, 2u);
  EXPECT_FALSE(u.oom_killed);
  EXPECT_FALSE(u.pids_limit_hit);
  // The daemon and the reader read the same counter. It can still grow a little once the
  // session is empty (a killed task's last time slice is charged after it left the cgroup's
  // count; milliseconds in an emulated guest), so the reader's value lies between two of the
  // daemon's.
  if (reader.missing({CgroupController::kCpuAccounting}).empty()) {
    const auto read = reader.cpu_usage_usec();
    ASSERT_TRUE(read.has_value());
    EXPECT_GE(*read, u.cpu_usage_usec);
    EXPECT_LE(*read, s->usage().cpu_usage_usec);
  }
  EXPECT_TRUE(s->remove());
  for (const auto& d : dirs) EXPECT_FALSE(is_dir(d)) << d;
  EXPECT_FALSE(mgr.remove_idle_callers(std::chrono::steady_clock::now(), {}));
  for (const auto& p : mgr.session_parent_dirs()) EXPECT_FALSE(is_dir(p + "/caller-4242")) << p;
  int status = child.wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

TEST_F(CgroupsTest, RejectsBadAndDuplicateSessions) {
  REQUIRE_LIMITS(mgr);
  SessionLimits limits{64 << 20, 0, 32, 50};
  for (const char* bad : {"../x", "a/b", "a.b", ""}) {
    expect_error(pando::helper::v1::ERROR_INTERNAL,
                 [&] { mgr.create_session(bad, kCaller, limits, kUnlimitedCaller); });
  }
  auto s = mgr.create_session("dup", kCaller, limits, kUnlimitedCaller);
  expect_error(pando::helper::v1::ERROR_CGROUP_UNAVAILABLE,
               [&] { mgr.create_session("dup", kCaller, limits, kUnlimitedCaller); });
  for (const auto& d : s->dirs()) EXPECT_TRUE(is_dir(d)) << d;  // the first one is intact
  EXPECT_TRUE(s->remove());
}

TEST_F(CgroupsTest, DestructorKillsAndRemoves) {
  REQUIRE_LIMITS(mgr);
  auto s =
      mgr.create_session("dtor", kCaller, SessionLimits{64 << 20, 0, 32, 50}, kUnlimitedCaller);
  auto dirs = s->dirs();
  Child child([] {
    for (;;) pause();
    return 0;
  });
  s->add_process(child.pid());
  child.release();
  s.reset();
  for (const auto& d : dirs) EXPECT_FALSE(is_dir(d)) << d;
  EXPECT_FALSE(mgr.remove_idle_callers(std::chrono::steady_clock::now(), {}));
  for (const auto& p : mgr.session_parent_dirs()) EXPECT_FALSE(is_dir(p + "/caller-4242")) << p;
  int status = child.wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

TEST_F(CgroupsTest, PidsLimitStopsForkBomb) {
  REQUIRE_LIMITS(mgr);
  auto s =
      mgr.create_session("pids", kCaller, SessionLimits{256 << 20, 0, 16, 0}, kUnlimitedCaller);
  int report[2];
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  Child child([&] {
    int forked = 0;
    for (;;) {
      pid_t p = fork();
      if (p == 0) {
        for (;;) pause();
      }
      if (p < 0) break;
      ++forked;
    }
    int result[2] = {forked, errno};
    if (write(report[1], result, sizeof result) != sizeof result) return 1;
    for (;;) pause();
  });
  close(report[1]);
  s->add_process(child.pid());
  child.release();
  int result[2] = {0, 0};
  ASSERT_EQ(read(report[0], result, sizeof result), static_cast<ssize_t>(sizeof result));
  close(report[0]);
  std::printf("forked %d children before fork failed with %s\n", result[0],
              std::strerror(result[1]));
  EXPECT_EQ(result[1], EAGAIN);
  EXPECT_EQ(result[0], 15);  // 16 tasks including the forking child
  SessionUsage u = s->usage();
  EXPECT_TRUE(u.pids_limit_hit);
  EXPECT_EQ(u.pids_peak, 16u);
  // What decides the Exit's reason, read alone.
  const SessionUsage events = s->limit_events();
  EXPECT_TRUE(events.pids_limit_hit);
  EXPECT_FALSE(events.caller_pids_limit_hit);
  EXPECT_FALSE(events.oom_killed);
  s->kill_all();
  EXPECT_TRUE(s->wait_empty(2s));
  EXPECT_TRUE(s->remove());
  int status = child.wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

TEST_F(CgroupsTest, MemoryLimitOomKills) {
  REQUIRE_LIMITS(mgr);
  auto s = mgr.create_session("mem", kCaller, SessionLimits{64 << 20, 0, 32, 0}, kUnlimitedCaller);
  Child child([] {
    const size_t size = size_t{512} << 20;
    // volatile: an optimizing compiler may drop a malloc whose memory is never read.
    volatile char* p = static_cast<volatile char*>(std::malloc(size));
    if (!p) return 3;
    for (size_t i = 0; i < size; i += 4096) p[i] = 1;
    return 0;  // not reached while the limit works
  });
  s->add_process(child.pid());
  child.release();
  int status = child.wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  SessionUsage u = s->usage();
  std::printf("oom: peak %llu bytes, oom_killed %d, memory_limit_hit %d\n",
              static_cast<unsigned long long>(u.memory_peak_bytes), u.oom_killed,
              u.memory_limit_hit);
  EXPECT_TRUE(u.oom_killed);
  EXPECT_TRUE(u.memory_limit_hit);
  const SessionUsage events = s->limit_events();
  EXPECT_TRUE(events.oom_killed);
  EXPECT_FALSE(events.caller_memory_limit_hit);
  EXPECT_FALSE(events.pids_limit_hit);
  EXPECT_LE(u.memory_peak_bytes, uint64_t{64} << 20);
  EXPECT_GT(u.memory_peak_bytes, uint64_t{32} << 20);
  EXPECT_TRUE(s->wait_empty(2s));
  EXPECT_TRUE(s->remove());
}

TEST_F(CgroupsTest, CpuQuotaThrottles) {
  REQUIRE_LIMITS(mgr);
  auto s = mgr.create_session("cpu", kCaller, SessionLimits{64 << 20, 0, 32, 20}, kUnlimitedCaller);
  const std::string missing =
      CgroupReader(s->dirs()).missing({CgroupController::kCpu, CgroupController::kCpuAccounting});
  if (!missing.empty()) GTEST_SKIP() << missing;
  Child child([] {
    for (;;) asm volatile("" ::: "memory");
    return 0;
  });
  s->add_process(child.pid());
  uint64_t before = s->usage().cpu_usage_usec;
  auto start = std::chrono::steady_clock::now();
  child.release();
  std::this_thread::sleep_for(2s);
  uint64_t used = s->usage().cpu_usage_usec - before;
  auto wall = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
  double share = static_cast<double>(used) / static_cast<double>(wall);
  std::printf("busy child at cpu 20%%: %llu us cpu over %lld us wall = %.1f%%\n",
              static_cast<unsigned long long>(used), static_cast<long long>(wall), share * 100);
  EXPECT_GT(used, 0u);
  EXPECT_LT(share, 0.6);
  s->kill_all();
  EXPECT_TRUE(s->wait_empty(2s));
  EXPECT_TRUE(s->remove());
}

TEST_F(CgroupsTest, RemovesStaleSessions) {
  REQUIRE_LIMITS(mgr);
  Child child([] {
    for (;;) pause();
    return 0;
  });
  Child caller_child([] {
    for (;;) pause();
    return 0;
  });
  std::vector<std::string> stale;
  for (const auto& p : mgr.session_parent_dirs()) {
    // The old layout, and the current one of sessions in their caller's cgroup.
    ASSERT_EQ(mkdir((p + "/session-deadbeef").c_str(), 0755), 0) << p;
    ASSERT_EQ(mkdir((p + "/caller-77").c_str(), 0755), 0) << p;
    ASSERT_EQ(mkdir((p + "/caller-77/session-cafe").c_str(), 0755), 0) << p;
    ASSERT_EQ(mkdir((p + "/caller-78").c_str(), 0755), 0) << p;
    ASSERT_EQ(mkdir((p + "/not-a-session").c_str(), 0755), 0) << p;
    std::ofstream(p + "/session-deadbeef/cgroup.procs") << child.pid() << std::flush;
    std::ofstream(p + "/caller-77/session-cafe/cgroup.procs") << caller_child.pid() << std::flush;
    EXPECT_TRUE(listed(p + "/session-deadbeef", child.pid())) << p;
    EXPECT_TRUE(listed(p + "/caller-77/session-cafe", caller_child.pid())) << p;
    for (const char* d :
         {"/session-deadbeef", "/caller-77/session-cafe", "/caller-77", "/caller-78"}) {
      stale.push_back(p + d);
    }
  }
  child.release();
  caller_child.release();
  auto found = mgr.remove_stale_sessions(kUnlimitedCaller);
  EXPECT_EQ(found.removed,
            (std::vector<std::string>{"caller-77/session-cafe", "session-deadbeef"}));
  EXPECT_TRUE(found.busy.empty());
  int status = child.wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  status = caller_child.wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  for (const auto& d : stale) EXPECT_FALSE(is_dir(d)) << d;
  for (const auto& p : mgr.session_parent_dirs()) {
    EXPECT_TRUE(is_dir(p + "/not-a-session")) << p;
    EXPECT_EQ(rmdir((p + "/not-a-session").c_str()), 0);
  }
}

// A stale session that stays busy after its kill (here a child cgroup keeps its rmdir failing;
// in CI it was a fork bomb dying slowly under its cpu.max) is handed back to be removed later,
// and its caller's stale directory becomes the caller's cgroup, with today's limits: the
// caller's next session shares it, and it goes with the caller's last session, not before.
TEST_F(CgroupsTest, AStaleSessionThatStaysBusyIsHandedBackAndItsCallerTakenOver) {
  REQUIRE_LIMITS(mgr);
  std::vector<std::string> callers;
  std::vector<std::string> blockers;
  for (const auto& p : mgr.session_parent_dirs()) {
    callers.push_back(p + "/caller-4242");
    blockers.push_back(p + "/caller-4242/session-b00c/blocker");
    ASSERT_EQ(mkdir(callers.back().c_str(), 0755), 0) << p;
    ASSERT_EQ(mkdir((callers.back() + "/session-b00c").c_str(), 0755), 0) << p;
    ASSERT_EQ(mkdir(blockers.back().c_str(), 0755), 0) << p;
  }
  const CallerLimits today{0, 40, 0};
  auto stale = mgr.remove_stale_sessions(today);
  EXPECT_TRUE(stale.removed.empty());
  ASSERT_EQ(stale.busy.size(), 1u);
  EXPECT_EQ(CgroupReader(callers).pids_max(), 40u) << "the stale caller keeps its old limits";

  auto next = mgr.create_session("0e11", kCaller, SessionLimits{}, today);
  for (size_t i = 0; i < callers.size(); ++i) {
    EXPECT_EQ(next->dirs()[i], callers[i] + "/session-0e11");
  }
  EXPECT_FALSE(stale.busy[0]->remove());
  for (const auto& b : blockers) ASSERT_EQ(rmdir(b.c_str()), 0) << b;
  EXPECT_TRUE(stale.busy[0]->remove());
  mgr.remove_idle_callers(std::chrono::steady_clock::now(), {});
  for (const auto& d : callers) EXPECT_TRUE(is_dir(d)) << d << " went with a live session";
  EXPECT_TRUE(next->remove());
  EXPECT_FALSE(mgr.remove_idle_callers(std::chrono::steady_clock::now(), {}));
  for (const auto& d : callers) EXPECT_FALSE(is_dir(d)) << d;
}

// The caller cgroup comes with a caller's first session, carries the caller limits, holds
// every session of that caller, and goes kCallerLinger after the last of them.
TEST_F(CgroupsTest, CallerCgroupHoldsItsSessionsWithTheCallerLimits) {
  REQUIRE_LIMITS(mgr);
  const SessionLimits session{64 << 20, 0, 32, 50};
  const CallerLimits caller{128 << 20, 40, 100};
  auto one = mgr.create_session("one", kCaller, session, caller);
  auto two = mgr.create_session("two", kCaller, session, caller);
  auto other = mgr.create_session("other", kCaller + 1, session, caller);
  const auto parents = mgr.session_parent_dirs();
  ASSERT_EQ(one->dirs().size(), parents.size());
  std::vector<std::string> caller_dirs;
  for (size_t i = 0; i < parents.size(); ++i) {
    caller_dirs.push_back(parents[i] + "/caller-4242");
    EXPECT_EQ(one->dirs()[i], parents[i] + "/caller-4242/session-one");
    EXPECT_EQ(two->dirs()[i], parents[i] + "/caller-4242/session-two");
    EXPECT_EQ(other->dirs()[i], parents[i] + "/caller-4243/session-other");
  }
  auto value = [&](const std::string& file) -> std::string {
    const std::string* dir = dir_with(caller_dirs, file);
    if (!dir) return "(no " + file + ")";
    return trimmed(slurp(*dir + "/" + file));
  };
  const CgroupReader caller_cgroup(caller_dirs);
  EXPECT_EQ(caller_cgroup.memory_max(), uint64_t{128} << 20);
  EXPECT_EQ(caller_cgroup.pids_max(), 40u);
  if (caller_cgroup.missing({CgroupController::kCpu}).empty()) {
    const auto cpu = caller_cgroup.cpu_max();
    ASSERT_TRUE(cpu.has_value());
    EXPECT_EQ(cpu->quota_usec, 100000u);
    EXPECT_EQ(cpu->period_usec, 100000u);
  }
  if (mgr.mode() == CgroupMode::kUnified) {
    // One OOM kill takes one session (its memory.oom.group), not all the caller's.
    EXPECT_EQ(value("memory.oom.group"), "0");
    EXPECT_NE(value("cgroup.subtree_control").find("memory pids"), std::string::npos);
  }
  // Sessions keep their own limits below.
  EXPECT_EQ(CgroupReader(one->dirs()).pids_max(), 32u);

  EXPECT_TRUE(one->remove());
  for (const auto& d : caller_dirs) EXPECT_TRUE(is_dir(d)) << d << " went with a live session";
  // A session created meanwhile joins the same caller cgroup.
  auto three = mgr.create_session("three", kCaller, session, caller);
  EXPECT_EQ(three->dirs()[0], parents[0] + "/caller-4242/session-three");
  EXPECT_TRUE(two->remove());
  EXPECT_TRUE(three->remove());
  // Idle, it lingers: the first sweep only notes when it became idle, and a session made
  // meanwhile takes it as it is.
  using std::chrono::steady_clock;
  const auto linger = CgroupManager::kCallerLinger;
  const steady_clock::time_point start = steady_clock::now();
  EXPECT_TRUE(mgr.remove_idle_callers(start, linger));
  for (const auto& d : caller_dirs) EXPECT_TRUE(is_dir(d)) << d << " did not linger";
  auto four = mgr.create_session("four", kCaller, session, caller);
  EXPECT_EQ(four->dirs()[0], parents[0] + "/caller-4242/session-four");
  EXPECT_TRUE(four->remove());
  // Taken meanwhile, its idle time starts anew.
  EXPECT_TRUE(mgr.remove_idle_callers(start + linger, linger));
  for (const auto& d : caller_dirs) EXPECT_TRUE(is_dir(d)) << d << " went while just used";
  EXPECT_TRUE(mgr.remove_idle_callers(start + linger + linger / 2, linger));
  for (const auto& d : caller_dirs) EXPECT_TRUE(is_dir(d)) << d << " went before its linger";
  EXPECT_TRUE(mgr.remove_idle_callers(start + 2 * linger, linger));
  for (const auto& d : caller_dirs) EXPECT_FALSE(is_dir(d)) << d << " outlived its linger";
  // A caller with a live session keeps its cgroup, whatever the time.
  for (const auto& p : parents) EXPECT_TRUE(is_dir(p + "/caller-4243")) << p;
  other.reset();
  EXPECT_FALSE(mgr.remove_idle_callers(start + 10 * linger, {}));
  for (const auto& p : parents) EXPECT_FALSE(is_dir(p + "/caller-4243")) << p;
  // A caller whose cgroup went gets a new one with its next session.
  auto again = mgr.create_session("again", kCaller, session, caller);
  for (const auto& d : caller_dirs) EXPECT_TRUE(is_dir(d)) << d;
  EXPECT_EQ(CgroupReader(caller_dirs).pids_max(), 40u);
  EXPECT_TRUE(again->remove());
  EXPECT_FALSE(mgr.remove_idle_callers(steady_clock::now(), {}));
  for (const auto& d : caller_dirs) EXPECT_FALSE(is_dir(d)) << d;
}

// A child in `s` that forks `count` pausing children (or until fork fails) and reports how
// many it forked and the errno that stopped it (0 if none).
class Forker {
 public:
  Forker(SessionCgroup& s, int count) {
    if (pipe2(report_, O_CLOEXEC) != 0) std::abort();
    child_ = std::make_unique<Child>([this, count] {
      int forked = 0;
      int err = 0;
      for (; forked < count; ++forked) {
        pid_t p = fork();
        if (p == 0) {
          for (;;) pause();
        }
        if (p < 0) {
          err = errno;
          break;
        }
      }
      int result[2] = {forked, err};
      if (write(report_[1], result, sizeof result) != sizeof result) return 1;
      for (;;) pause();
    });
    close(report_[1]);
    s.add_process(child_->pid());
    child_->release();
    if (read(report_[0], result_, sizeof result_) != static_cast<ssize_t>(sizeof result_)) {
      result_[0] = -1;
    }
    close(report_[0]);
  }
  int forked() const { return result_[0]; }
  int error() const { return result_[1]; }
  Child& child() { return *child_; }

 private:
  int report_[2] = {-1, -1};
  int result_[2] = {0, 0};
  std::unique_ptr<Child> child_;
};

TEST_F(CgroupsTest, CallerPidsLimitHoldsAcrossSessions) {
  REQUIRE_LIMITS(mgr);
  const SessionLimits session{256 << 20, 0, 10, 0};
  const CallerLimits caller{0, 12, 0};
  auto first = mgr.create_session("first", kCaller, session, caller);
  auto second = mgr.create_session("second", kCaller, session, caller);
  Forker a(*first, 8);  // 9 tasks, within both limits
  EXPECT_EQ(a.forked(), 8);
  EXPECT_EQ(a.error(), 0);
  Forker b(*second, 8);  // its own limit would allow 9 more; the caller's only 2 more tasks
  std::printf("second session forked %d before %s\n", b.forked(), std::strerror(b.error()));
  EXPECT_EQ(b.forked(), 2);
  EXPECT_EQ(b.error(), EAGAIN);
  const SessionUsage events = second->limit_events();
  EXPECT_TRUE(events.pids_limit_hit || events.caller_pids_limit_hit);
  EXPECT_TRUE(events.caller_pids_limit_hit);
  // Another caller is not held by this one's limit.
  auto stranger = mgr.create_session("stranger", kCaller + 1, session, caller);
  Forker c(*stranger, 8);
  EXPECT_EQ(c.forked(), 8);
  EXPECT_FALSE(stranger->limit_events().caller_pids_limit_hit);
  for (auto* s : {first.get(), second.get(), stranger.get()}) {
    s->kill_all();
    EXPECT_TRUE(s->wait_empty(2s));
    EXPECT_TRUE(s->remove());
  }
  for (auto* f : {&a, &b, &c}) {
    int status = f->child().wait();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  }
}

TEST_F(CgroupsTest, CallerMemoryLimitOomKillsASession) {
  REQUIRE_LIMITS(mgr);
  // The config never allows a caller limit below a session's; the kernel does, which makes the
  // caller's the one that is reached.
  auto s = mgr.create_session("hog", kCaller, SessionLimits{256 << 20, 0, 32, 0},
                              CallerLimits{64 << 20, 0, 0});
  Child child([] {
    const size_t size = size_t{512} << 20;
    volatile char* p = static_cast<volatile char*>(std::malloc(size));
    if (!p) return 3;
    for (size_t i = 0; i < size; i += 4096) p[i] = 1;
    return 0;
  });
  s->add_process(child.pid());
  child.release();
  int status = child.wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  const SessionUsage events = s->limit_events();
  EXPECT_TRUE(events.oom_killed);
  EXPECT_TRUE(events.caller_memory_limit_hit);
  EXPECT_TRUE(s->wait_empty(2s));
  EXPECT_TRUE(s->remove());
}

// A child and a grandchild in `s`, killed with `method`: both die and the session empties.
void expect_kill_method_works(SessionCgroup& s, SessionCgroup::KillMethod method) {
  int report[2];
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  Child child([&] { return fork_grandchild_and_pause(report[1]); });
  close(report[1]);
  s.add_process(child.pid());
  child.release();
  pid_t grandchild = read_pid(report[0]);
  close(report[0]);
  ASSERT_GT(grandchild, 0);
  for (const auto& d : s.dirs()) EXPECT_EQ(procs_of(d).size(), 2u) << d;
  EXPECT_TRUE(s.kill_all(method));
  EXPECT_TRUE(s.wait_empty(2s));
  EXPECT_TRUE(wait_gone(grandchild));
  int status = child.wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_TRUE(s.remove());
}

TEST_F(CgroupsTest, KillMethodsWithControllers) {
  REQUIRE_LIMITS(mgr);
  SessionLimits limits{64 << 20, 0, 32, 0};
  auto frozen = mgr.create_session("freeze", kCaller, limits, kUnlimitedCaller);
  expect_kill_method_works(*frozen, SessionCgroup::KillMethod::kFreezeThenSignal);
  auto each = mgr.create_session("each", kCaller, limits, kUnlimitedCaller);
  expect_kill_method_works(*each, SessionCgroup::KillMethod::kSignalEach);
}

TEST_F(CgroupsTest, UnifiedKillMethods) {
  auto u = unified_mount();
  if (!u) GTEST_SKIP() << "no cgroup2 mount";
  CgroupManager mgr = CgroupManager::set_up_unified({.mount_point = u->mount_point,
                                                     .own_path = "/",
                                                     .parent = parent_,
                                                     .require_controllers = false});
  SessionLimits limits{64 << 20, 0, 32, 0};
  auto frozen = mgr.create_session("freeze", kCaller, limits, kUnlimitedCaller);
  expect_kill_method_works(*frozen, SessionCgroup::KillMethod::kFreezeThenSignal);
  auto each = mgr.create_session("each", kCaller, limits, kUnlimitedCaller);
  expect_kill_method_works(*each, SessionCgroup::KillMethod::kSignalEach);
}

// cgroup2 on this host carries no memory/pids/cpu, but creation, membership, cgroup.kill,
// cpu.stat accounting, CLONE_INTO_CGROUP and removal work without controllers.
TEST_F(CgroupsTest, UnifiedWithoutControllers) {
  auto u = unified_mount();
  if (!u) GTEST_SKIP() << "no cgroup2 mount";
  CgroupManager mgr = CgroupManager::set_up_unified({.mount_point = u->mount_point,
                                                     .own_path = "/",
                                                     .parent = parent_,
                                                     .require_controllers = false});
  EXPECT_EQ(mgr.mode(), CgroupMode::kUnified);
  std::printf("v2: %s\n", mgr.detail().c_str());
  EXPECT_EQ(mgr.session_parent_dirs(), std::vector<std::string>{u->mount_point + "/" + parent_});
  auto s =
      mgr.create_session("cafe", kCaller, SessionLimits{64 << 20, 0, 32, 20}, kUnlimitedCaller);
  ASSERT_EQ(s->dirs().size(), 1u);
  const std::string dir = s->dirs()[0];

  int report[2];
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  Child child([&] { return fork_grandchild_and_pause(report[1]); });
  close(report[1]);
  s->add_process(child.pid());
  EXPECT_TRUE(listed(dir, child.pid()));
  child.release();
  pid_t grandchild = read_pid(report[0]);
  close(report[0]);
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(listed(dir, grandchild));

  // A process cloned straight into the session (clone3 CLONE_INTO_CGROUP) is killed as well.
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0) << std::strerror(errno);
  clone_args args{};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(dir_fd);
  long cloned = syscall(SYS_clone3, &args, sizeof args);
  if (cloned == 0) {
    for (;;) pause();
  }
  close(dir_fd);
  ASSERT_GT(cloned, 0) << std::strerror(errno);
  EXPECT_TRUE(listed(dir, static_cast<pid_t>(cloned)));
  EXPECT_EQ(procs_of(dir).size(), 3u);

  bool has_kill = access((dir + "/cgroup.kill").c_str(), F_OK) == 0;
  std::printf("v2 kill via %s\n", has_kill ? "cgroup.kill" : "freeze + kill");
  s->kill_all();
  EXPECT_TRUE(s->wait_empty(2s));
  EXPECT_TRUE(wait_gone(grandchild));
  int cloned_status = 0;
  EXPECT_EQ(waitpid(static_cast<pid_t>(cloned), &cloned_status, 0), cloned);
  EXPECT_TRUE(WIFSIGNALED(cloned_status) && WTERMSIG(cloned_status) == SIGKILL);
  SessionUsage usage = s->usage();
  std::printf("v2 usage: cpu %llu us\n", static_cast<unsigned long long>(usage.cpu_usage_usec));
  // The reader takes a real cgroup2 directory for v2, and sees the controllers the manager has.
  const CgroupReader reader(s->dirs());
  EXPECT_TRUE(reader.unified());
  EXPECT_EQ(reader.missing({CgroupController::kPids}).empty(), mgr.limits_pids()) << mgr.detail();
  // Between two of the daemon's reads: see SessionLimitsProcessesAndTeardown.
  const auto read = reader.cpu_usage_usec();
  ASSERT_TRUE(read.has_value());
  EXPECT_GE(*read, usage.cpu_usage_usec);
  EXPECT_LE(*read, s->usage().cpu_usage_usec);
  EXPECT_TRUE(s->remove());
  EXPECT_FALSE(is_dir(dir));
  int status = child.wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

// What a systemd unit with Delegate=yes goes through, on a fake unit cgroup: the daemon moves
// into <unit>/daemon and sessions live in <unit>/sessions.
TEST_F(CgroupsTest, UnifiedDelegatedUnit) {
  auto u = unified_mount();
  if (!u) GTEST_SKIP() << "no cgroup2 mount";
  const std::string unit = "/" + parent_ + "/pando-helperd.service";
  ASSERT_EQ(mkdir((u->mount_point + "/" + parent_).c_str(), 0755), 0);
  ASSERT_EQ(mkdir((u->mount_point + unit).c_str(), 0755), 0);
  std::ofstream(u->mount_point + unit + "/cgroup.procs") << getpid() << std::flush;
  ASSERT_NE(slurp("/proc/self/cgroup").find("0::" + unit + "\n"), std::string::npos);

  CgroupManager mgr = CgroupManager::set_up_unified({.mount_point = u->mount_point,
                                                     .own_path = unit,
                                                     .delegated = true,
                                                     .parent = "",
                                                     .require_controllers = false});
  std::printf("delegated: %s\n", mgr.detail().c_str());
  EXPECT_TRUE(mgr.detail().starts_with("v2 delegated at " + u->mount_point + unit + "/sessions"));
  EXPECT_NE(slurp("/proc/self/cgroup").find("0::" + unit + "/daemon\n"), std::string::npos);
  EXPECT_TRUE(procs_of(u->mount_point + unit).empty());
  EXPECT_EQ(mgr.session_parent_dirs(),
            std::vector<std::string>{u->mount_point + unit + "/sessions"});

  // Restarted in place: already in the leaf.
  CgroupManager again = CgroupManager::set_up_unified({.mount_point = u->mount_point,
                                                       .own_path = unit + "/daemon",
                                                       .delegated = true,
                                                       .parent = "",
                                                       .require_controllers = false});
  EXPECT_EQ(again.session_parent_dirs(), mgr.session_parent_dirs());

  auto s =
      mgr.create_session("beef", kCaller, SessionLimits{64 << 20, 0, 32, 20}, kUnlimitedCaller);
  EXPECT_EQ(s->dirs(),
            std::vector<std::string>{u->mount_point + unit + "/sessions/caller-4242/session-beef"});
  Child child([] {
    for (;;) pause();
    return 0;
  });
  s->add_process(child.pid());
  child.release();
  s->kill_all();
  EXPECT_TRUE(s->wait_empty(2s));
  EXPECT_TRUE(s->remove());
  int status = child.wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

// detect() sees delegation through systemd's xattr or the environment. cgroup2 here has no
// memory controller, so it falls back to v1, but its reason names the cgroup it probed.
TEST_F(CgroupsTest, DetectRecognisesDelegatedUnit) {
  auto u = unified_mount();
  if (!u) GTEST_SKIP() << "no cgroup2 mount";
  if (slurp(u->mount_point + "/cgroup.controllers").find("memory") != std::string::npos) {
    GTEST_SKIP() << "cgroup2 here has memory: detect() would really move this process";
  }
  ASSERT_EQ(unsetenv("PANDO_CGROUP_DELEGATED"), 0);
  const std::string unit_dir = u->mount_point + "/" + parent_ + "/pando-helperd.service";
  ASSERT_EQ(mkdir((u->mount_point + "/" + parent_).c_str(), 0755), 0);
  ASSERT_EQ(mkdir(unit_dir.c_str(), 0755), 0);
  std::ofstream(unit_dir + "/cgroup.procs") << getpid() << std::flush;
  const std::string probed_unit = "cgroup2 at " + unit_dir + " offers";
  const std::string probed_root = "cgroup2 at " + u->mount_point + " offers";

  std::string plain = CgroupManager::detect(config_).detail();
  EXPECT_NE(plain.find(probed_root), std::string::npos) << plain;

  ASSERT_EQ(setxattr(unit_dir.c_str(), "trusted.delegate", "1", 1, 0), 0) << std::strerror(errno);
  std::string by_xattr = CgroupManager::detect(config_).detail();
  EXPECT_NE(by_xattr.find(probed_unit), std::string::npos) << by_xattr;
  ASSERT_EQ(removexattr(unit_dir.c_str(), "trusted.delegate"), 0);

  ASSERT_EQ(setenv("PANDO_CGROUP_DELEGATED", "1", 1), 0);
  std::string by_env = CgroupManager::detect(config_).detail();
  ASSERT_EQ(unsetenv("PANDO_CGROUP_DELEGATED"), 0);
  EXPECT_NE(by_env.find(probed_unit), std::string::npos) << by_env;
  // Nothing moved: delegation is only acted on when the unit offers memory and pids.
  EXPECT_NE(slurp("/proc/self/cgroup").find("0::/" + parent_ + "/pando-helperd.service\n"),
            std::string::npos);
}

TEST_F(CgroupsTest, UnifiedRequiresControllersByDefault) {
  auto u = unified_mount();
  if (!u) GTEST_SKIP() << "no cgroup2 mount";
  if (slurp(u->mount_point + "/cgroup.controllers").find("memory") != std::string::npos) {
    GTEST_SKIP() << "cgroup2 here has memory; the refusal path cannot be shown";
  }
  try {
    CgroupManager::set_up_unified(
        {.mount_point = u->mount_point, .own_path = "/", .parent = parent_});
    ADD_FAILURE() << "set_up_unified accepted a hierarchy without memory/pids";
  } catch (const pando::Error& e) {
    EXPECT_EQ(e.code(), pando::helper::v1::ERROR_CGROUP_UNAVAILABLE);
    EXPECT_NE(std::string(e.what()).find("memory and pids"), std::string::npos) << e.what();
  }
}

// ---- v1 and v2 on fake directory trees ------------------------------------------------------

// A temporary directory standing in for cgroup directories. A file the code writes is a FIFO
// held open here, so every write(2) is seen, in order, as cgroupfs takes them (one command
// each); a file it reads is a plain file.
class FakeTree {
 public:
  FakeTree() {
    char tmpl[] = "/tmp/pandotest-cgroup-tree-XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    root_ = tmpl;
  }
  ~FakeTree() {
    for (const auto& [name, fd] : fifos_) close(fd);
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  FakeTree(const FakeTree&) = delete;
  FakeTree& operator=(const FakeTree&) = delete;

  const std::string& root() const { return root_; }

  // `name` (relative, its directories made) records what is written to it.
  void writable(const std::string& name) {
    const std::string path = make_parent(name);
    if (mkfifo(path.c_str(), 0600) != 0) std::abort();
    const int fd = open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) std::abort();
    fifos_[name] = fd;
  }
  // What was written to `name` since the last call, the writes run together.
  std::string written(const std::string& name) {
    std::string out;
    char buf[256];
    for (ssize_t n; (n = read(fifos_.at(name), buf, sizeof buf)) > 0;) out.append(buf, n);
    return out;
  }
  void file(const std::string& name, const std::string& content) {
    std::ofstream(make_parent(name)) << content;
  }

 private:
  std::string make_parent(const std::string& name) {
    const std::filesystem::path path = root_ + "/" + name;
    std::filesystem::create_directories(path.parent_path());
    return path.string();
  }

  std::string root_;
  std::map<std::string, int> fifos_;
};

CgroupVersion::Dir v2_dir(const std::string& path) {
  return {.path = path, .unified = true, .memory = true, .pids = true, .cpu = true};
}

CgroupVersion::Dir v1_dir(const std::string& path) {
  return {
      .path = path, .memory = true, .pids = true, .cpu = true, .cpuacct = true, .freezer = true};
}

TEST(CgroupV2Files, WritesLimits) {
  FakeTree tree;
  tree.writable("memory.max");
  tree.writable("cpu.max");
  const auto d = v2_dir(tree.root());
  cgroup_v2().write_limits(d, 64 << 20, 20);
  EXPECT_EQ(tree.written("memory.max"), "67108864");
  EXPECT_EQ(tree.written("cpu.max"), "20000 100000");
  cgroup_v2().write_limits(d, 0, 0);
  EXPECT_EQ(tree.written("memory.max"), "max");
  EXPECT_EQ(tree.written("cpu.max"), "max 100000");
  cgroup_v2().write_limits({.path = tree.root(), .unified = true}, 64 << 20, 20);
  EXPECT_EQ(tree.written("memory.max"), "") << "no memory controller, no memory.max";
  EXPECT_EQ(tree.written("cpu.max"), "") << "no cpu controller, no cpu.max";
}

TEST(CgroupV2Files, WritesSessionExtrasAndCallerControllers) {
  FakeTree tree;
  tree.writable("memory.swap.max");
  tree.writable("memory.oom.group");
  tree.writable("cgroup.subtree_control");
  const auto d = v2_dir(tree.root());
  cgroup_v2().write_session_extras(d, SessionLimits{64 << 20, 1 << 20, 32, 20});
  EXPECT_EQ(tree.written("memory.swap.max"), "1048576");
  EXPECT_EQ(tree.written("memory.oom.group"), "1");
  cgroup_v2().prepare_caller(d);
  EXPECT_EQ(tree.written("cgroup.subtree_control"), "+memory+pids+cpu");
  cgroup_v2().prepare_caller({.path = tree.root(), .unified = true, .pids = true});
  EXPECT_EQ(tree.written("cgroup.subtree_control"), "+pids");
  EXPECT_EQ(tree.written("memory.oom.group"), "") << "a caller's OOM is not grouped";

  FakeTree no_swap;  // a kernel without swap accounting has no memory.swap.max
  no_swap.writable("memory.oom.group");
  cgroup_v2().write_session_extras(v2_dir(no_swap.root()), SessionLimits{64 << 20, 0, 32, 20});
  EXPECT_EQ(no_swap.written("memory.oom.group"), "1");
}

TEST(CgroupV2Files, ReadsMembershipKillAndFreezeFiles) {
  FakeTree tree;
  const auto d = v2_dir(tree.root());
  tree.file("cgroup.procs", "");
  EXPECT_FALSE(cgroup_v2().populated(d));
  tree.file("cgroup.procs", "12\n");
  EXPECT_TRUE(cgroup_v2().populated(d)) << "without cgroup.events, cgroup.procs decides";
  tree.file("cgroup.events", "populated 0\nfrozen 0\n");
  EXPECT_FALSE(cgroup_v2().populated(d)) << "cgroup.events decides where it exists";
  tree.file("cgroup.events", "populated 1\nfrozen 0\n");
  EXPECT_TRUE(cgroup_v2().populated(d));

  EXPECT_EQ(cgroup_v2().kill_file(d), std::nullopt);
  EXPECT_EQ(cgroup_v2().freezer(d).has_value(), false);
  tree.file("cgroup.kill", "");
  tree.file("cgroup.freeze", "0\n");
  EXPECT_EQ(cgroup_v2().kill_file(d), tree.root() + "/cgroup.kill");
  const auto freezer = cgroup_v2().freezer(d);
  ASSERT_TRUE(freezer.has_value());
  EXPECT_EQ(freezer->file, tree.root() + "/cgroup.freeze");
  EXPECT_EQ(freezer->frozen_value, "1");
  EXPECT_EQ(freezer->thawed_value, "0");
  EXPECT_FALSE(freezer->is_frozen());
  tree.file("cgroup.events", "populated 1\nfrozen 1\n");
  EXPECT_TRUE(freezer->is_frozen());
}

TEST(CgroupV2Files, ReadsAccountingAndLimitEvents) {
  FakeTree tree;
  const auto d = v2_dir(tree.root());
  tree.file("cpu.stat", "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\n");
  tree.file("memory.peak", "777\n");
  tree.file("memory.events", "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\noom_group_kill 1\n");
  SessionUsage u;
  cgroup_v2().read_accounting(d, false, u);
  EXPECT_EQ(u.cpu_usage_usec, 5000u);
  EXPECT_EQ(u.memory_peak_bytes, 777u);
  EXPECT_TRUE(u.oom_killed);
  EXPECT_TRUE(u.memory_limit_hit);
  EXPECT_TRUE(cgroup_v2().memory_limit_reached(d));
  SessionUsage events;
  cgroup_v2().read_accounting(d, true, events);
  EXPECT_EQ(events.cpu_usage_usec, 0u) << "limit events only";
  EXPECT_EQ(events.memory_peak_bytes, 0u) << "limit events only";
  EXPECT_TRUE(events.oom_killed);

  tree.file("memory.events", "low 0\nhigh 0\nmax 3\noom 0\noom_kill 0\n");
  SessionUsage reclaimed;
  cgroup_v2().read_accounting(d, false, reclaimed);
  EXPECT_FALSE(reclaimed.oom_killed);
  EXPECT_TRUE(reclaimed.memory_limit_hit) << "memory.events max counts a reached limit";
  EXPECT_FALSE(cgroup_v2().memory_limit_reached(d));

  tree.file("memory.events", "low 0\nhigh 0\nmax 0\noom 1\noom_kill 0\n");
  SessionUsage no_kill;
  cgroup_v2().read_accounting(d, false, no_kill);
  EXPECT_FALSE(no_kill.oom_killed) << "an OOM that killed nothing";
  EXPECT_TRUE(no_kill.memory_limit_hit);
  EXPECT_TRUE(cgroup_v2().memory_limit_reached(d));

  tree.file("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n");
  SessionUsage quiet;
  cgroup_v2().read_accounting(d, false, quiet);
  EXPECT_FALSE(quiet.oom_killed);
  EXPECT_FALSE(quiet.memory_limit_hit);

  SessionUsage no_memory;
  cgroup_v2().read_accounting({.path = tree.root(), .unified = true}, false, no_memory);
  EXPECT_EQ(no_memory.cpu_usage_usec, 5000u) << "cpu.stat is there without controllers";
  EXPECT_EQ(no_memory.memory_peak_bytes, 0u);

  tree.file("memory.events.local", "low 0\nmax 9\noom 4\noom_kill 4\n");
  tree.file("pids.events.local", "max 6\n");
  EXPECT_EQ(cgroup_v2().caller_limit_counters(d), (std::pair<uint64_t, uint64_t>{4, 6}));
  EXPECT_EQ(cgroup_v2().caller_limit_counters({.path = tree.root(), .unified = true, .pids = true}),
            (std::pair<uint64_t, uint64_t>{0, 6}));
}

TEST(CgroupV1Files, WritesLimits) {
  FakeTree tree;
  tree.writable("memory.limit_in_bytes");
  tree.writable("cpu.cfs_period_us");
  tree.writable("cpu.cfs_quota_us");
  tree.writable("memory.memsw.limit_in_bytes");
  const auto d = v1_dir(tree.root());
  cgroup_v1().write_limits(d, 64 << 20, 20);
  EXPECT_EQ(tree.written("memory.limit_in_bytes"), "67108864");
  EXPECT_EQ(tree.written("cpu.cfs_period_us"), "100000");
  EXPECT_EQ(tree.written("cpu.cfs_quota_us"), "20000");
  cgroup_v1().write_limits(d, 0, 0);
  EXPECT_EQ(tree.written("memory.limit_in_bytes"), "") << "v1 has no 'max' to write";
  EXPECT_EQ(tree.written("cpu.cfs_quota_us"), "");
  cgroup_v1().write_session_extras(d, SessionLimits{64 << 20, 1 << 20, 32, 20});
  EXPECT_EQ(tree.written("memory.memsw.limit_in_bytes"), std::to_string((64 << 20) + (1 << 20)));
  cgroup_v1().write_session_extras(d, SessionLimits{0, 1 << 20, 32, 20});
  EXPECT_EQ(tree.written("memory.memsw.limit_in_bytes"), "") << "no memory limit, no memsw";
  cgroup_v1().write_limits({.path = tree.root()}, 64 << 20, 20);
  EXPECT_EQ(tree.written("memory.limit_in_bytes"), "") << "not the memory hierarchy";
  EXPECT_EQ(tree.written("cpu.cfs_quota_us"), "") << "not the cpu hierarchy";
}

TEST(CgroupV1Files, ReadsMembershipFreezerAndAccounting) {
  FakeTree tree;
  const auto d = v1_dir(tree.root());
  tree.file("cgroup.procs", "");
  EXPECT_FALSE(cgroup_v1().populated(d));
  tree.file("cgroup.procs", "12\n13\n");
  EXPECT_TRUE(cgroup_v1().populated(d));
  tree.file("cgroup.kill", "");
  EXPECT_EQ(cgroup_v1().kill_file(d), std::nullopt) << "v1 has no cgroup.kill";
  EXPECT_FALSE(cgroup_v1().freezer({.path = tree.root()}).has_value()) << "not the freezer";
  tree.file("freezer.state", "THAWED\n");
  const auto freezer = cgroup_v1().freezer(d);
  ASSERT_TRUE(freezer.has_value());
  EXPECT_EQ(freezer->file, tree.root() + "/freezer.state");
  EXPECT_EQ(freezer->frozen_value, "FROZEN");
  EXPECT_EQ(freezer->thawed_value, "THAWED");
  EXPECT_FALSE(freezer->is_frozen());
  tree.file("freezer.state", "FROZEN\n");
  EXPECT_TRUE(freezer->is_frozen());

  tree.file("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
  tree.file("memory.max_usage_in_bytes", "777\n");
  tree.file("memory.failcnt", "3\n");
  tree.file("cpuacct.usage", "5000999\n");
  SessionUsage u;
  cgroup_v1().read_accounting(d, false, u);
  EXPECT_EQ(u.cpu_usage_usec, 5000u);
  EXPECT_EQ(u.memory_peak_bytes, 777u);
  EXPECT_TRUE(u.oom_killed);
  EXPECT_TRUE(u.memory_limit_hit);
  EXPECT_TRUE(cgroup_v1().memory_limit_reached(d));
  SessionUsage events;
  cgroup_v1().read_accounting(d, true, events);
  EXPECT_EQ(events.cpu_usage_usec, 0u);
  EXPECT_EQ(events.memory_peak_bytes, 0u);
  EXPECT_TRUE(events.oom_killed);
  EXPECT_EQ(cgroup_v1().caller_limit_counters(d), (std::pair<uint64_t, uint64_t>{3, 0}));

  tree.file("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
  tree.file("memory.failcnt", "0\n");
  SessionUsage quiet;
  cgroup_v1().read_accounting(d, false, quiet);
  EXPECT_FALSE(quiet.oom_killed);
  EXPECT_FALSE(quiet.memory_limit_hit);
  EXPECT_FALSE(cgroup_v1().memory_limit_reached(d));
}

// The v2 set-up without delegation, on a fake tree: the parent's parts are made (here they
// exist) and memory, pids and cpu enabled at each level, as far as each level offers them.
TEST(CgroupV2Files, SetsUpTheParentOnAFakeTree) {
  FakeTree tree;
  for (const std::string level : {"", "a/", "a/b/"}) {
    tree.file(level + "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma\n");
    tree.writable(level + "cgroup.subtree_control");
  }
  CgroupManager m =
      CgroupManager::set_up_unified({.mount_point = tree.root(), .own_path = "/", .parent = "a/b"});
  EXPECT_EQ(m.mode(), CgroupMode::kUnified);
  EXPECT_EQ(m.detail(), "v2 at " + tree.root() + "/a/b: memory pids cpu");
  EXPECT_EQ(m.session_parent_dirs(), std::vector<std::string>{tree.root() + "/a/b"});
  EXPECT_TRUE(m.limits_pids());
  for (const std::string level : {"", "a/", "a/b/"}) {
    EXPECT_EQ(tree.written(level + "cgroup.subtree_control"), "+memory+pids+cpu") << level;
  }

  tree.file("a/cgroup.controllers", "cpu pids\n");
  expect_error(pando::helper::v1::ERROR_CGROUP_UNAVAILABLE, [&] {
    CgroupManager::set_up_unified({.mount_point = tree.root(), .own_path = "/", .parent = "a/b"});
  });
  CgroupManager partial = CgroupManager::set_up_unified(
      {.mount_point = tree.root(), .own_path = "/", .parent = "a/b", .require_controllers = false});
  EXPECT_EQ(partial.detail(), "v2 at " + tree.root() + "/a/b: pids cpu");
  // Twice: the refused set-up, then the one that accepts what there is.
  EXPECT_EQ(tree.written("cgroup.subtree_control"), "+memory+pids+cpu+memory+pids+cpu");
  EXPECT_EQ(tree.written("a/cgroup.subtree_control"), "+pids+cpu+pids+cpu");
  EXPECT_EQ(tree.written("a/b/cgroup.subtree_control"), "+pids+cpu+pids+cpu");
}

}  // namespace
}  // namespace pando::daemon
