#include "daemon/sandbox/mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/sandbox/namespaces.h"
#include "proto/error.h"

namespace pando::sandbox {
namespace {

using pando::helper::sandbox::v1::SandboxPlan;

constexpr uid_t kCallerUid = 64100;
constexpr gid_t kCallerGid = 64100;
constexpr uid_t kRoleUid = 64201;
constexpr gid_t kRoleGid = 64202;

std::string read_text(const std::string& path) {
  std::string out;
  FILE* file = std::fopen(path.c_str(), "re");
  if (file == nullptr) return "<missing>";
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) out.append(buffer, n);
  std::fclose(file);
  return out;
}

std::set<std::string> list_dir(const std::string& path) {
  std::set<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return {"<error " + std::string(std::strerror(errno)) + ">"};
  while (dirent* entry = readdir(dir)) {
    if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) {
      names.insert(entry->d_name);
    }
  }
  closedir(dir);
  return names;
}

bool within(const std::set<std::string>& names, const std::set<std::string>& allowed) {
  for (const std::string& name : names) {
    if (allowed.count(name) == 0) return false;
  }
  return true;
}

std::string join(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += name + " ";
  return out;
}

void write_text(const std::string& path, const std::string& content, mode_t mode, uid_t uid,
                gid_t gid) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  ASSERT_EQ(fchown(fd, uid, gid), 0);
  ASSERT_EQ(fchmod(fd, mode), 0);
  close(fd);
}

void make_dir(const std::string& path, mode_t mode, uid_t uid, gid_t gid) {
  ASSERT_EQ(mkdir(path.c_str(), mode), 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(chown(path.c_str(), uid, gid), 0);
  ASSERT_EQ(chmod(path.c_str(), mode), 0);
}

int remove_entry(const char* path, const struct stat*, int, FTW*) { return remove(path); }

// <base> (root 0755) holds a marker next to the project; the project and its
// sandbox dirs belong to the caller; a 0600 secret, .env files and a planted
// .env symlink to /etc/shadow live in the project.
class TempProject {
 public:
  explicit TempProject(const std::string& role) : role_(role) {
    char templ[] = "/var/tmp/pandotest-mounts-XXXXXX";
    base = mkdtemp(templ);
    chmod(base.c_str(), 0755);
    project = base + "/proj";
    sandbox_dir = project + "/.pando-sandbox/" + role;
    auth_home = base + "/auth";
  }
  ~TempProject() { nftw(base.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS); }

  void populate() {
    write_text(base + "/marker", "host marker", 0644, 0, 0);
    make_dir(project, 0700, kCallerUid, kCallerGid);
    write_text(project + "/secret.txt", "caller secret", 0600, kCallerUid, kCallerGid);
    write_text(project + "/.env", "TOKEN=top", 0600, kCallerUid, kCallerGid);
    make_dir(project + "/sub", 0755, kCallerUid, kCallerGid);
    write_text(project + "/sub/.env.local", "TOKEN=sub", 0644, kCallerUid, kCallerGid);
    write_text(project + "/sub/notes.env", "visible", 0644, kCallerUid, kCallerGid);
    make_dir(project + "/trap", 0755, kCallerUid, kCallerGid);
    ASSERT_EQ(symlink("/etc/shadow", (project + "/trap/.env").c_str()), 0);
    ASSERT_EQ(lchown((project + "/trap/.env").c_str(), kCallerUid, kCallerGid), 0);
    make_dir(project + "/.pando-sandbox", 0755, kCallerUid, kCallerGid);
    make_dir(sandbox_dir, 0700, kCallerUid, kCallerGid);
    for (const char* sub : {"home", "cache", "config", "data"}) {
      make_dir(sandbox_dir + "/" + sub, 0700, kCallerUid, kCallerGid);
    }
    write_text(sandbox_dir + "/home/.env", "TOKEN=home", 0600, kCallerUid, kCallerGid);
    make_dir(auth_home, 0700, kCallerUid, kCallerGid);
    write_text(auth_home + "/token", "auth token", 0600, kCallerUid, kCallerGid);
  }

  SandboxPlan plan(bool writable) const {
    SandboxPlan plan;
    plan.set_role(role_);
    plan.set_project_root(project);
    plan.set_project_writable(writable);
    plan.mutable_ids()->set_caller_uid(kCallerUid);
    plan.mutable_ids()->set_caller_gid(kCallerGid);
    plan.mutable_ids()->set_role_uid(kRoleUid);
    plan.mutable_ids()->set_role_gid(kRoleGid);
    plan.set_role_user_name("pando-" + role_);
    plan.set_role_group_name("pando-" + role_);
    plan.set_sandbox_home(sandbox_dir);
    plan.set_has_auth_home(true);
    plan.set_auth_home_target(sandbox_dir + "/home/.pando-ai");
    // What the daemon finds of the hidden_files patterns (daemon/project_exits.cc): the
    // launcher masks what the plan lists.
    for (const std::string& mask : {std::string(".env"), std::string("sub/.env.local"),
                                    ".pando-sandbox/" + role_ + "/home/.env"}) {
      plan.add_masks(mask);
    }
    return plan;
  }

  std::string base;
  std::string project;
  std::string sandbox_dir;
  std::string auth_home;

 private:
  std::string role_;
};

// Failures found inside the sandbox travel to the test process as lines.
class Reporter {
 public:
  explicit Reporter(int fd) : fd_(fd) {}
  void check(bool ok, const std::string& what) {
    if (!ok) send("FAIL " + what);
  }
  void send(const std::string& line) {
    const std::string text = line + "\n";
    if (write(fd_, text.data(), text.size()) < 0) _exit(3);
  }

 private:
  int fd_;
};

struct SandboxFds {
  int project = -1;
  int sandbox_dir = -1;
  int auth_home = -1;
};

struct RunResult {
  std::vector<std::string> failures;
  std::string setup_error;  // "<code> <message>" when a launcher step threw
  std::vector<std::string> notes;
  int status = -1;
};

// Everything a child reported on `fd` until it closed; closes `fd`.
std::string read_and_close(int fd) {
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
    text.append(buffer, static_cast<std::size_t>(n));
  }
  close(fd);
  return text;
}

int relocate(int fd) {
  if (fd < 0) return -1;
  const int moved = fcntl(fd, F_DUPFD, 20);
  if (moved < 0) _exit(4);
  return moved;
}

// Runs `checks` as PID 1 of fresh mount/pid/net/ipc/uts namespaces after the
// launcher's steps (set_up_namespaces, build_base_view, enter_cgroup_namespace,
// complete_filesystem_view). `prepare` runs first in the new namespaces and
// returns the caller trees (see caller_trees()).
RunResult run_sandboxed(const SandboxPlan& plan, const std::function<SandboxFds()>& prepare,
                        const std::function<void(Reporter&)>& checks) {
  RunResult result;
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    result.failures.push_back("pipe2");
    return result;
  }
  const pid_t outer = fork();
  if (outer == 0) {
    close(pipe_fds[0]);
    const int report_fd = relocate(pipe_fds[1]);
    if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) != 0) {
      _exit(5);
    }
    SandboxFds fds = prepare();
    const pid_t init = fork();
    if (init < 0) _exit(6);
    if (init == 0) {
      Reporter reporter(report_fd);
      PlanTrees trees;
      trees.caller.project = UniqueFd(relocate(fds.project));
      trees.caller.sandbox_dir = UniqueFd(relocate(fds.sandbox_dir));
      if (fds.auth_home >= 0) trees.caller.auth_home = UniqueFd(relocate(fds.auth_home));
      const auto start = std::chrono::steady_clock::now();
      try {
        // As the daemon does, before the new root covers this namespace's /tmp.
        for (const std::string& path : plan.runtime_paths()) {
          trees.runtime.push_back(clone_runtime_tree(path));
        }
        set_up_namespaces();
        BaseView view = build_base_view();
        const auto middle = std::chrono::steady_clock::now();
        enter_cgroup_namespace();
        complete_filesystem_view(view, plan, trees);
        const auto end = std::chrono::steady_clock::now();
        reporter.send(
            "NOTE build_base_view " +
            std::to_string(std::chrono::duration<double, std::milli>(middle - start).count()) +
            " ms, complete_filesystem_view " +
            std::to_string(std::chrono::duration<double, std::milli>(end - middle).count()) +
            " ms");
      } catch (const Error& error) {
        reporter.send("SETUP " + std::to_string(error.code()) + " " + error.what());
        _exit(0);
      }
      checks(reporter);
      _exit(0);
    }
    int status = 0;
    if (waitpid(init, &status, 0) != init) _exit(8);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  close(pipe_fds[1]);
  const std::string text = read_and_close(pipe_fds[0]);
  waitpid(outer, &result.status, 0);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    if (line.rfind("FAIL ", 0) == 0) result.failures.push_back(line.substr(5));
    if (line.rfind("SETUP ", 0) == 0) result.setup_error = line.substr(6);
    if (line.rfind("NOTE ", 0) == 0) result.notes.push_back(line.substr(5));
    pos = end + 1;
  }
  return result;
}

// Runs `body` in a child with the role's credentials; waits for it.
void as_role(Reporter& reporter, const std::function<void(Reporter&)>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setresgid(kRoleGid, kRoleGid, kRoleGid) != 0 ||
        setresuid(kRoleUid, kRoleUid, kRoleUid) != 0) {
      reporter.send("FAIL cannot become the role user");
      _exit(1);
    }
    body(reporter);
    _exit(0);
  }
  int status = 0;
  reporter.check(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                 "role child failed");
}

// Mounts of the namespace whose root is a whole host filesystem ("/" of a disk
// filesystem) or that sit on "/": only the new tmpfs root may.
std::vector<std::string> suspicious_mounts() {
  std::vector<std::string> found;
  int on_root = 0;
  const std::string text = read_text("/proc/self/mountinfo");
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    std::vector<std::string> fields;
    std::size_t start = 0;
    while (start <= line.size()) {
      std::size_t space = line.find(' ', start);
      if (space == std::string::npos) space = line.size();
      fields.push_back(line.substr(start, space - start));
      start = space + 1;
    }
    std::size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (fields.size() < 5 || dash + 1 >= fields.size()) {
      found.push_back("unparsable: " + line);
      continue;
    }
    const std::string& type = fields[dash + 1];
    if (fields[4] == "/") {
      ++on_root;
      if (type != "tmpfs") found.push_back(line);
    }
    if (fields[3] == "/" && type != "tmpfs" && type != "proc" && type != "devpts") {
      found.push_back(line);
    }
  }
  if (on_root != 1) found.push_back(std::to_string(on_root) + " mounts on /");
  return found;
}

bool write_fails_with(const std::string& path, int expected_errno) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    close(fd);
    unlink(path.c_str());
    return false;
  }
  return errno == expected_errno;
}

std::set<std::string> numeric_entries(const std::string& path) {
  std::set<std::string> pids;
  for (const std::string& name : list_dir(path)) {
    if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos) {
      pids.insert(name);
    }
  }
  return pids;
}

std::set<std::string> interfaces() {
  std::set<std::string> names;
  struct if_nameindex* list = if_nameindex();
  if (list == nullptr) return {"<error>"};
  for (struct if_nameindex* it = list; it->if_index != 0; ++it) names.insert(it->if_name);
  if_freenameindex(list);
  return names;
}

bool loopback_up() {
  UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ifreq req{};
  std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
  return sock.valid() && ioctl(sock.get(), SIOCGIFFLAGS, &req) == 0 && (req.ifr_flags & IFF_UP);
}

// What the daemon hands the launcher: the directories idmapped caller -> role.
// `userns` must come from make_test_userns() in the test process itself: made
// after unshare(CLONE_NEWPID), its holder child would become that pid
// namespace's init.
UniqueFd make_test_userns() {
  return make_idmap_userns(kCallerUid, kCallerGid, kRoleUid, kRoleGid);
}

SandboxFds caller_trees(int project, int sandbox_dir, int auth_home, bool writable, int userns,
                        UniqueFd* keep) {
  CallerTrees trees =
      clone_caller_trees("/proj", project, sandbox_dir, auth_home, userns, writable);
  keep[0] = std::move(trees.project);
  keep[1] = std::move(trees.sandbox_dir);
  keep[2] = std::move(trees.auth_home);
  return {keep[0].get(), keep[1].get(), keep[2].valid() ? keep[2].get() : -1};
}

SandboxFds clone_fds(const TempProject& temp, bool writable, UniqueFd* keep) {
  UniqueFd project(open(temp.project.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  UniqueFd sandbox(open(temp.sandbox_dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  UniqueFd auth(open(temp.auth_home.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  return caller_trees(project.get(), sandbox.get(), auth.get(), writable, make_test_userns().get(),
                      keep);
}

class MountsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "mounts_test needs root";
    mountinfo_before_ = read_text("/proc/self/mountinfo");
    root_before_ = list_dir("/");
    shadow_before_ = read_text("/etc/shadow");
  }
  void TearDown() override {
    EXPECT_EQ(read_text("/proc/self/mountinfo"), mountinfo_before_) << "host mounts changed";
    EXPECT_EQ(list_dir("/"), root_before_) << "host / changed";
    EXPECT_EQ(read_text("/etc/shadow"), shadow_before_);
  }

  std::string mountinfo_before_;
  std::set<std::string> root_before_;
  std::string shadow_before_;
};

void expect_clean(const RunResult& result) {
  EXPECT_EQ(result.setup_error, "");
  for (const std::string& failure : result.failures) ADD_FAILURE() << failure;
  EXPECT_TRUE(WIFEXITED(result.status) && WEXITSTATUS(result.status) == 0)
      << "sandbox child status " << result.status;
  for (const std::string& note : result.notes) std::printf("[timing] %s\n", note.c_str());
}

TEST_F(MountsTest, WorkspaceViewIsConfinedAndIdmapped) {
  TempProject temp("workspace");
  ASSERT_NO_FATAL_FAILURE(temp.populate());
  UniqueFd keep[3];
  const SandboxFds fds = clone_fds(temp, true, keep);
  const SandboxPlan plan = temp.plan(true);
  const std::string project = temp.project;
  const std::string base = temp.base;
  const std::string home = temp.sandbox_dir;

  RunResult result = run_sandboxed(
      plan, [&] { return fds; },
      [&](Reporter& r) {
        r.check(access("/etc/shadow", F_OK) != 0 && errno == ENOENT, "/etc/shadow visible");
        for (const char* path : {"/home", "/root", "/run", "/media", "/mnt", "/srv", "/sys",
                                 "/boot", "/opt", "/work"}) {
          r.check(access(path, F_OK) != 0, std::string(path) + " visible");
        }
        r.check(within(list_dir("/"), {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32",
                                       "proc", "sbin", "tmp", "usr", "var"}) &&
                    list_dir("/").count("usr") == 1,
                "unexpected / entries: " + join(list_dir("/")));
        r.check(list_dir(base) == std::set<std::string>{"proj"},
                "project parent shows: " + join(list_dir(base)));
        r.check(access((base + "/marker").c_str(), F_OK) != 0,
                "marker next to the project visible");
        r.check(list_dir("/var") == std::set<std::string>{"tmp"},
                "/var shows: " + join(list_dir("/var")));
        r.check(list_dir("/var/tmp").size() == 1, "/var/tmp shows: " + join(list_dir("/var/tmp")));
        r.check(
            within(list_dir("/etc"), {"alternatives", "group", "hostname", "hosts", "ld.so.cache",
                                      "localtime", "nsswitch.conf", "passwd", "ssl"}) &&
                list_dir("/etc").count("passwd") == 1,
            "unexpected /etc entries: " + join(list_dir("/etc")));
        r.check(list_dir("/dev") == std::set<std::string>{"fd", "full", "null", "ptmx", "pts",
                                                          "random", "shm", "stderr", "stdin",
                                                          "stdout", "tty", "urandom", "zero"},
                "unexpected /dev entries: " + join(list_dir("/dev")));
        r.check(
            read_text("/etc/passwd").find("pando-workspace:x:64201:64202:") != std::string::npos,
            "passwd lacks the role: " + read_text("/etc/passwd"));
        for (const std::string& line : suspicious_mounts())
          r.check(false, "host mount left: " + line);
        r.check(write_fails_with("/usr/pandotest", EROFS), "/usr writable");
        r.check(write_fails_with("/etc/pandotest", EROFS), "/etc writable");
        r.check(write_fails_with(base + "/pandotest", EROFS), "project parent writable");
        r.check(write_fails_with("/pandotest", EROFS), "/ writable");
        r.check(numeric_entries("/proc") == std::set<std::string>{"1"},
                "/proc shows other processes: " + join(numeric_entries("/proc")));
        r.check(read_text("/proc/keys").empty(), "/proc/keys not masked");
        r.check(read_text("/proc/kallsyms").empty(), "/proc/kallsyms not masked");
        r.check(access("/proc/acpi", F_OK) != 0 || list_dir("/proc/acpi").empty(),
                "/proc/acpi not masked");
        r.check(access("/proc/sysrq-trigger", F_OK) != 0 ||
                    (open("/proc/sysrq-trigger", O_WRONLY | O_CLOEXEC) < 0 && errno == EROFS),
                "/proc/sysrq-trigger writable");
        r.check(write_fails_with("/proc/sys/kernel/hostname", EROFS), "/proc/sys writable");
        r.check(interfaces() == std::set<std::string>{"lo"}, "interfaces: " + join(interfaces()));
        r.check(loopback_up(), "lo is down");
        char host[64] = {};
        r.check(gethostname(host, sizeof(host)) == 0 && std::string(host) == "pando-sandbox",
                "hostname");
        struct statfs root_fs {};
        r.check(statfs("/", &root_fs) == 0 && root_fs.f_type == 0x01021994, "/ is not a tmpfs");
        r.check(read_text(project + "/.env").empty(), ".env not hidden");
        r.check(read_text(project + "/sub/.env.local").empty(), "sub/.env.local not hidden");
        r.check(read_text(project + "/sub/notes.env") == "visible", "notes.env wrongly hidden");
        r.check(read_text(home + "/home/.env").empty(), "sandbox home .env not hidden");
        r.check(read_text(project + "/trap/.env") == "<missing>",
                "planted .env symlink exposes data");

        as_role(r, [&](Reporter& role) {
          struct stat st {};
          role.check(
              stat(project.c_str(), &st) == 0 && st.st_uid == kRoleUid && st.st_gid == kRoleGid,
              "project not owned by the role inside (uid " + std::to_string(st.st_uid) + ")");
          role.check(read_text(project + "/secret.txt") == "caller secret", "0600 file unreadable");
          const int fd =
              open((project + "/created.txt").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0640);
          role.check(fd >= 0, "cannot create in the project: " + std::string(std::strerror(errno)));
          if (fd >= 0) close(fd);
          role.check(write_fails_with(project + "/.env", EACCES), ".env writable");
          role.check(write_fails_with(base + "/role-file", EROFS),
                     "project parent writable by role");
          role.check(read_text(project + "/.env").empty(), ".env readable by the role");
          role.check(unlink((project + "/.env").c_str()) != 0, ".env removable");
          const int home_fd =
              open((home + "/home/created").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
          role.check(home_fd >= 0, "home not writable");
          if (home_fd >= 0) close(home_fd);
          role.check(read_text(home + "/home/.pando-ai/token") == "auth token",
                     "auth home unreadable");
          role.check(write_fails_with(home + "/home/.pando-ai/new", EROFS), "auth home writable");
          const int tmp_fd = open("/tmp/role-file", O_WRONLY | O_CREAT | O_EXCL, 0600);
          role.check(tmp_fd >= 0, "/tmp not writable");
          if (tmp_fd >= 0) close(tmp_fd);
          role.check(numeric_entries("/proc") == std::set<std::string>{std::to_string(getpid())},
                     "role sees other processes: " + join(numeric_entries("/proc")));
          const int shm_fd = open("/dev/shm/role-shm", O_WRONLY | O_CREAT | O_EXCL, 0600);
          role.check(shm_fd >= 0, "/dev/shm not writable");
          if (shm_fd >= 0) close(shm_fd);
          role.check(write_fails_with("/dev/pandotest", EROFS), "/dev writable");
        });
      });
  expect_clean(result);

  struct stat st {};
  ASSERT_EQ(lstat((temp.project + "/created.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kCallerUid);
  EXPECT_EQ(st.st_gid, kCallerGid);
  ASSERT_EQ(lstat((temp.sandbox_dir + "/home/created").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kCallerUid);
  ASSERT_EQ(lstat((temp.sandbox_dir + "/home/.pando-ai").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kCallerUid) << "auth home mount point created as the caller";
  EXPECT_EQ(read_text(temp.project + "/.env"), "TOKEN=top");
  EXPECT_EQ(list_dir(temp.base), (std::set<std::string>{"auth", "marker", "proj"}));
}

// What the first byte of `path` reads: "" for an empty file (or a mask), "<missing>" when it
// cannot be opened, "<unreadable>" when it cannot be read, "<dir>" for a directory with
// entries. One byte at most: /proc/kcore
// unmasked reads for as long as the machine has address space.
std::string first_byte(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "<missing>";
  struct stat st {};
  char byte = 0;
  std::string out = "<unreadable>";
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    out = list_dir(path).empty() ? "" : "<dir>";
  } else if (const ssize_t n = read(fd, &byte, 1); n >= 0) {
    out.assign(static_cast<size_t>(n), byte);
  }
  close(fd);
  return out;
}

// /proc is the session's own, but some of its files are the host's: kernel memory, keyrings,
// timers, and what fingerprints the machine or lets one watch its activity (the boot command
// line, the physical memory map, interrupt counts per device, memory zone counters). Each is
// masked, for root in the view too; what ordinary programs read (node's os.cpus() and free
// memory, ps, top) still reads.
TEST_F(MountsTest, ProcMasksWhatLeaksOrFingerprintsTheHostButNotWhatProgramsRead) {
  const std::vector<std::string> masked = {
      "kcore",      "keys",          "key-users", "timer_list", "timer_stats",  "sched_debug",
      "kallsyms",   "latency_stats", "acpi",      "scsi",       "cmdline",      "iomem",
      "interrupts", "zoneinfo",      "softirqs",  "buddyinfo",  "pagetypeinfo", "vmstat"};
  // The ones that show root something on this host: an empty read in the view proves a mask
  // only where there is something to hide.
  std::vector<std::string> shown;
  for (const std::string& name : masked) {
    const std::string first = first_byte("/proc/" + name);
    if (!first.empty() && first != "<missing>") shown.push_back(name);
  }
  for (const char* name : {"cmdline", "iomem", "interrupts", "zoneinfo", "timer_list", "softirqs",
                           "buddyinfo", "vmstat"}) {
    ASSERT_NE(std::find(shown.begin(), shown.end(), name), shown.end())
        << "/proc/" << name << " shows nothing on this host";
  }
  TempProject temp("workspace");
  ASSERT_NO_FATAL_FAILURE(temp.populate());
  UniqueFd keep[3];
  const SandboxFds fds = clone_fds(temp, true, keep);
  const SandboxPlan plan = temp.plan(true);
  RunResult result = run_sandboxed(
      plan, [&] { return fds; },
      [&](Reporter& r) {
        for (const std::string& name : shown) {
          r.check(first_byte("/proc/" + name).empty(), "/proc/" + name + " is not masked");
        }
        as_role(r, [&](Reporter& role) {
          for (const char* name :
               {"cpuinfo", "meminfo", "stat", "uptime", "loadavg", "self/status", "self/maps"}) {
            const std::string first = first_byte(std::string("/proc/") + name);
            role.check(!first.empty() && first.front() != '<',
                       std::string("/proc/") + name + " unreadable: " + first);
          }
        });
      });
  expect_clean(result);
}

TEST_F(MountsTest, CoreProjectIsReadOnlyButHomeIsWritable) {
  TempProject temp("core");
  ASSERT_NO_FATAL_FAILURE(temp.populate());
  UniqueFd keep[3];
  const SandboxFds fds = clone_fds(temp, false, keep);
  // The daemon's choice: the auth home outside the project, on the tmpfs root.
  SandboxPlan plan = temp.plan(false);
  plan.set_auth_home_target("/pando-auth");
  const std::string project = temp.project;
  const std::string home = temp.sandbox_dir;

  RunResult result = run_sandboxed(
      plan, [&] { return fds; },
      [&](Reporter& r) {
        as_role(r, [&](Reporter& role) {
          role.check(read_text(project + "/secret.txt") == "caller secret", "0600 file unreadable");
          role.check(write_fails_with(project + "/new.txt", EROFS), "core can write the project");
          role.check(read_text("/pando-auth/token") == "auth token", "/pando-auth unreadable");
          role.check(write_fails_with("/pando-auth/new", EROFS), "/pando-auth writable");
          role.check(write_fails_with("/pando-new", EROFS), "/ writable by the role");
          role.check(write_fails_with(project + "/secret.txt", EROFS), "core can modify a file");
          const int fd = open((home + "/cache/scratch").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
          role.check(fd >= 0, "core sandbox cache not writable");
          if (fd >= 0) close(fd);
        });
      });
  expect_clean(result);
  struct stat st {};
  EXPECT_NE(lstat((temp.project + "/new.txt").c_str(), &st), 0);
  ASSERT_EQ(lstat((temp.sandbox_dir + "/cache/scratch").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kCallerUid);
}

TEST_F(MountsTest, SandboxHomeSymlinkIsRefused) {
  TempProject temp("workspace");
  ASSERT_NO_FATAL_FAILURE(temp.populate());
  UniqueFd keep[3];
  const SandboxFds fds = clone_fds(temp, true, keep);
  // The caller swaps .pando-sandbox for a symlink after the daemon opened fd 5.
  ASSERT_EQ(rename((temp.project + "/.pando-sandbox").c_str(), (temp.project + "/moved").c_str()),
            0);
  ASSERT_EQ(symlink("moved", (temp.project + "/.pando-sandbox").c_str()), 0);
  RunResult result = run_sandboxed(
      temp.plan(true), [&] { return fds; }, [](Reporter&) {});
  EXPECT_NE(result.setup_error.find("symlinks are not followed"), std::string::npos)
      << result.setup_error;
}

TEST_F(MountsTest, UnsupportedFilesystemIsRefused) {
  TempProject temp("workspace");
  const std::string mount_dir = temp.base + "/ramfs";
  ASSERT_EQ(mkdir(mount_dir.c_str(), 0755), 0);
  const UniqueFd userns = make_test_userns();
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipe_fds[0]);
    Reporter reporter(pipe_fds[1]);
    // ramfs lacks FS_ALLOW_IDMAP (tmpfs has it since Linux 6.3).
    if (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("ramfs", mount_dir.c_str(), "ramfs", 0, "mode=0755") != 0 ||
        mkdir((mount_dir + "/proj").c_str(), 0700) != 0 ||
        mkdir((mount_dir + "/proj/sandbox").c_str(), 0700) != 0) {
      _exit(9);
    }
    UniqueFd project(open((mount_dir + "/proj").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    UniqueFd sandbox(open((mount_dir + "/proj/sandbox").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    try {
      UniqueFd keep[3];
      caller_trees(project.get(), sandbox.get(), -1, true, userns.get(), keep);
      reporter.send("FAIL the ramfs project was idmapped");
    } catch (const Error& error) {
      reporter.send("SETUP " + std::to_string(error.code()) + " " + error.what());
    }
    _exit(0);
  }
  close(pipe_fds[1]);
  const std::string text = read_and_close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(text, "SETUP " + std::to_string(pando::helper::v1::ERROR_IDMAP_UNSUPPORTED) +
                      " /proj: filesystem ramfs does not support idmapped mounts\n");
}

TEST_F(MountsTest, ProjectSubmountsAreNotCarriedIn) {
  TempProject temp("workspace");
  ASSERT_NO_FATAL_FAILURE(temp.populate());
  const std::string project = temp.project;
  const std::string sandbox_dir = temp.sandbox_dir;
  const std::string auth_home = temp.auth_home;
  const UniqueFd userns = make_test_userns();
  UniqueFd keep[3];
  RunResult result = run_sandboxed(
      temp.plan(true),
      [&] {
        if (mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            mount("tmpfs", (project + "/sub").c_str(), "tmpfs", 0, "size=64k") != 0) {
          _exit(9);
        }
        const int fd = open((project + "/sub/on-submount").c_str(), O_WRONLY | O_CREAT, 0644);
        if (fd < 0) _exit(10);
        close(fd);
        UniqueFd dirs[3] = {UniqueFd(open(project.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)),
                            UniqueFd(open(sandbox_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)),
                            UniqueFd(open(auth_home.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC))};
        return caller_trees(dirs[0].get(), dirs[1].get(), dirs[2].get(), true, userns.get(), keep);
      },
      [&](Reporter& r) {
        r.check(access((project + "/sub/on-submount").c_str(), F_OK) != 0,
                "a submount of the project was carried into the sandbox");
        r.check(read_text(project + "/sub/notes.env") == "visible",
                "the directory under the submount is not shown");
      });
  expect_clean(result);
}

TEST_F(MountsTest, RuntimePathsAreReadOnlyAndMustExist) {
  TempProject temp("workspace");
  ASSERT_NO_FATAL_FAILURE(temp.populate());
  const std::string runtime = temp.base + "/runtime";
  make_dir(runtime, 0755, 0, 0);
  write_text(runtime + "/tool", "#!/bin/sh\n", 0755, 0, 0);
  {
    UniqueFd keep[3];
    const SandboxFds fds = clone_fds(temp, true, keep);
    SandboxPlan plan = temp.plan(true);
    plan.add_runtime_paths(runtime);
    RunResult result = run_sandboxed(
        plan, [&] { return fds; },
        [&](Reporter& r) {
          r.check(read_text(runtime + "/tool") == "#!/bin/sh\n", "runtime path not visible");
          r.check(write_fails_with(runtime + "/new", EROFS), "runtime path writable");
          r.check(open((runtime + "/tool").c_str(), O_WRONLY | O_CLOEXEC) < 0 && errno == EROFS,
                  "runtime file writable");
        });
    expect_clean(result);
  }
  {
    UniqueFd keep[3];
    const SandboxFds fds = clone_fds(temp, true, keep);
    SandboxPlan plan = temp.plan(true);
    plan.add_runtime_paths(temp.base + "/missing");
    RunResult result = run_sandboxed(
        plan, [&] { return fds; }, [](Reporter&) {});
    EXPECT_EQ(result.setup_error, std::to_string(pando::helper::v1::ERROR_LAUNCH_FAILED) +
                                      " runtime path " + temp.base +
                                      "/missing does not exist on the host");
  }
}

TEST_F(MountsTest, CheckIdmapSupportOnExt4) {
  TempProject temp("workspace");
  ASSERT_NO_FATAL_FAILURE(temp.populate());
  UniqueFd dir(open(temp.project.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(dir.valid());
  const IdmapCheck check =
      check_idmap_support(dir.get(), kCallerUid, kCallerGid, kRoleUid, kRoleGid);
  EXPECT_TRUE(check.supported) << check.detail;
  EXPECT_EQ(check.detail, "ext2/ext3/ext4");
}

TEST_F(MountsTest, CheckIdmapSupportOnRamfs) {
  TempProject temp("workspace");
  const std::string mount_dir = temp.base + "/ramfs";
  ASSERT_EQ(mkdir(mount_dir.c_str(), 0755), 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipe_fds[0]);
    Reporter reporter(pipe_fds[1]);
    if (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("ramfs", mount_dir.c_str(), "ramfs", 0, nullptr) != 0) {
      reporter.send("FAIL cannot mount ramfs");
      _exit(1);
    }
    UniqueFd dir(open(mount_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    try {
      const IdmapCheck check =
          check_idmap_support(dir.get(), kCallerUid, kCallerGid, kRoleUid, kRoleGid);
      reporter.send(std::string(check.supported ? "SUPPORTED " : "UNSUPPORTED ") + check.detail);
    } catch (const Error& error) {
      reporter.send(std::string("FAIL threw ") + error.what());
    }
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string text;
  char buffer[1024];
  ssize_t n;
  while ((n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0) text.append(buffer, n);
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(text, "UNSUPPORTED filesystem ramfs does not support idmapped mounts\n");
}

TEST_F(MountsTest, RefusesRootIdmap) {
  TempProject temp("workspace");
  ASSERT_NO_FATAL_FAILURE(temp.populate());
  UniqueFd dir(open(temp.project.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  EXPECT_THROW(check_idmap_support(dir.get(), 0, 0, kRoleUid, kRoleGid), Error);
  EXPECT_THROW(check_idmap_support(dir.get(), kCallerUid, kCallerGid, 0, 0), Error);
}

// Not an assertion: numbers for deciding about a network namespace pool.
TEST_F(MountsTest, TimingOfBareNetworkNamespaces) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipe_fds[0]);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) {
      if (unshare(CLONE_NEWNET) != 0) _exit(1);
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const std::string text = std::to_string(ms);
    if (write(pipe_fds[1], text.data(), text.size()) < 0) _exit(2);
    _exit(0);
  }
  close(pipe_fds[1]);
  char buffer[64] = {};
  const ssize_t n = read(pipe_fds[0], buffer, sizeof(buffer) - 1);
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_GT(n, 0);
  std::printf("[timing] 100 x unshare(CLONE_NEWNET): %s ms\n", buffer);
}

}  // namespace
}  // namespace pando::sandbox
