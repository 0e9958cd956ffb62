// Issue 11: what a workspace session leaves in the project on the host. The project is mounted
// idmapped, so whatever the role makes there is the caller's on disk: a set-id file would run
// as the caller for any local user, a FIFO hangs host tools that open it, and a Unix socket is
// a channel from the sandbox to any host process that connects.

#include <gtest/gtest.h>
#include <linux/landlock.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/integration/harness.h"

namespace pando::itest {
namespace {

namespace fs = std::filesystem;

// Every entry below `root` (itself included), with its lstat mode.
std::vector<std::pair<std::string, mode_t>> tree_modes(const std::string& root) {
  std::vector<std::pair<std::string, mode_t>> modes;
  const auto add = [&modes](const fs::path& path) {
    struct stat st {};
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
    modes.emplace_back(path.string(), st.st_mode);
  };
  add(root);
  for (const auto& entry : fs::recursive_directory_iterator(root)) add(entry.path());
  return modes;
}

bool kernel_has_landlock() {
  return syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION) > 0;
}

class ProjectExitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
    daemon_ = std::make_unique<Daemon>();
    project_ = daemon_->dir().make_dir("proj", caller());
  }
  RunResult sh(const std::string& script) {
    RunOptions options;
    options.stdin_data = script + "\n";
    return launch(*daemon_, caller(), "workspace", project_, options);
  }

  std::unique_ptr<Daemon> daemon_;
  std::string project_;
};

// seccomp (step 18): no call the role makes can set S_ISUID or S_ISGID, in the project or in
// its home (which is inside the project on disk); plain modes still work.
TEST_F(ProjectExitTest, NoSetIdFileOrDirectoryReachesTheHost) {
  const RunResult r =
      sh(std::string(kCheck) +
         "t cp-chmod-6755 sh -c 'cp /usr/bin/id x && chmod 6755 x'; "
         "t chmod-u+s chmod u+s x; "
         "t chmod-g+s chmod g+s x; "
         "t chmod-4755 chmod 4755 x; "
         "t install-4755 install -m 4755 /usr/bin/id y; "
         "t install-2755 install -m 2755 /usr/bin/id z; "
         "t mkdir-2755 mkdir -m 2755 d; "
         "t setgid-dir sh -c 'mkdir e && chmod g+s e'; "
         "t home-u+s sh -c 'cp /usr/bin/id \"$HOME/id\" && chmod u+s \"$HOME/id\"'; "
         "t plain-chmod chmod 0700 x; "
         "t plain-install install -m 0755 /usr/bin/id w; "
         "t plain-mkdir mkdir -m 0750 f; "
         "t plain-run ./w -u");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out,
            "cp-chmod-6755 no\nchmod-u+s no\nchmod-g+s no\nchmod-4755 no\ninstall-4755 no\n"
            "install-2755 no\nmkdir-2755 no\nsetgid-dir no\nhome-u+s no\n"
            "plain-chmod yes\nplain-install yes\nplain-mkdir yes\nplain-run yes\n");

  for (const auto& [path, mode] : tree_modes(project_)) {
    EXPECT_EQ(mode & (S_ISUID | S_ISGID), 0u) << path << " mode " << std::oct << mode;
  }
  // The calls really ran: their files are the caller's with the plain modes.
  for (const auto& [name, want] :
       std::vector<std::pair<std::string, mode_t>>{{"x", S_IFREG | 0700},
                                                   {"w", S_IFREG | 0755},
                                                   {"f", S_IFDIR | 0750},
                                                   {"e", S_IFDIR | 0755}}) {
    struct stat st {};
    ASSERT_EQ(lstat((project_ + "/" + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_mode, want) << name << " mode " << std::oct << st.st_mode;
    EXPECT_EQ(st.st_uid, caller().uid) << name;
  }
}

// seccomp (step 18): the project root and `.git` are pinned in the session (a mount root and
// a mount point), so the role cannot replace them; were they writable by other users, any local
// user could swap `.git/config` afterwards and run code as the caller. Neither a mode with
// write for others nor an ACL (which sets the same bits, or a default ACL that new files
// inherit) reaches the host. Group write stays allowed: see SECURITY.md.
TEST_F(ProjectExitTest, NothingInTheProjectBecomesWritableByOtherUsers) {
  ASSERT_TRUE(fs::create_directory(project_ + "/.git"));
  ASSERT_EQ(chown((project_ + "/.git").c_str(), caller().uid, caller().gid), 0);
  // A minimal ACL as the kernel reads it (version 2; user::rwx, group::r-x, other::rwx), set
  // as the attribute `name` of `path`.
  const auto set_acl = [](const std::string& path, const std::string& name) {
    return "python3 -c 'import os,struct; os.setxattr(\"" + path + "\", \"" + name +
           "\", struct.pack(\"<I\", 2) + b\"\".join(struct.pack(\"<HHI\", t, p, 0xffffffff) "
           "for t, p in ((1, 7), (4, 5), (0x20, 7))))'";
  };
  std::string script = std::string(kCheck) + "touch f; mkdir d; ";
  for (const auto& [check, command] : std::vector<std::pair<std::string, std::string>>{
           {"chmod-root-o+w", "chmod o+w ."},
           {"chmod-root-777", "chmod 777 ."},
           {"chmod-git-1777", "chmod 1777 .git"},
           {"chmod-file-666", "chmod 666 f"},
           {"chmod-dir-757", "chmod 757 d"},
           {"acl-root", set_acl(".", "system.posix_acl_access")},
           {"acl-default-root", set_acl(".", "system.posix_acl_default")},
           {"acl-git", set_acl(".git", "system.posix_acl_access")},
           {"user-xattr", "python3 -c 'import os; os.setxattr(\"f\", \"user.x\", b\"1\")'"},
           {"plain-chmod", "chmod 750 d"},
           {"group-write", "chmod 664 f"},
           {"sticky", "chmod 1755 d"}}) {
    script += "t " + check + " " + command + "; ";
  }
  const RunResult r = sh(script);
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out,
            "chmod-root-o+w no\nchmod-root-777 no\nchmod-git-1777 no\nchmod-file-666 no\n"
            "chmod-dir-757 no\nacl-root no\nacl-default-root no\nacl-git no\nuser-xattr no\n"
            "plain-chmod yes\ngroup-write yes\nsticky yes\n");

  for (const auto& [path, mode] : tree_modes(project_)) {
    if (S_ISLNK(mode)) continue;
    EXPECT_EQ(mode & S_IWOTH, 0u) << path << " mode " << std::oct << mode;
  }
  for (const std::string& path : {project_, project_ + "/.git", project_ + "/f"}) {
    for (const char* name : {"system.posix_acl_access", "system.posix_acl_default"}) {
      EXPECT_LT(getxattr(path.c_str(), name, nullptr, 0), 0) << path << " has " << name;
    }
  }
  // The allowed calls really ran.
  struct stat st {};
  ASSERT_EQ(lstat((project_ + "/d").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode, S_IFDIR | S_ISVTX | 0755) << std::oct << st.st_mode;
  ASSERT_EQ(lstat((project_ + "/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode, S_IFREG | 0664) << std::oct << st.st_mode;
}

// A caller whose gid is not its user-private group (a shared primary group such as `users`, or a
// client run under sg): the idmap maps that gid to the role's, so group write on the project
// root or `.git` would reach the group's other members. The group-write filter is stacked and
// no chmod sets S_IWGRP. Here the caller runs with the other test user's group (named like that
// user, not the caller) and the project belongs to it. The tests above run with the caller's
// private group, where group write stays allowed.
TEST_F(ProjectExitTest, NoGroupWriteWhereTheCallersGroupIsShared) {
  TestUser in_shared_group = caller();
  in_shared_group.gid = other_user().gid;
  const std::string git = project_ + "/.git";
  ASSERT_EQ(mkdir(git.c_str(), 0755), 0);
  for (const std::string& dir : {project_, git}) {
    ASSERT_EQ(chown(dir.c_str(), caller().uid, other_user().gid), 0) << dir;
    ASSERT_EQ(chmod(dir.c_str(), 0755), 0) << dir;
  }
  RunOptions options;
  options.stdin_data = std::string(kCheck) + "touch f; mkdir d; " +
                       "t chmod-root-g+w chmod g+w .; "
                       "t chmod-git-775 chmod 775 .git; "
                       "t chmod-file-664 chmod 664 f; "
                       "t plain-chmod chmod 750 d\n";
  const RunResult r = launch(*daemon_, in_shared_group, "workspace", project_, options);
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "chmod-root-g+w no\nchmod-git-775 no\nchmod-file-664 no\nplain-chmod yes\n");
  for (const auto& [path, mode] : tree_modes(project_)) {
    if (S_ISLNK(mode)) continue;
    EXPECT_EQ(mode & S_IWGRP, 0u) << path << " mode " << std::oct << mode;
  }
  // The files the role made are the shared group's on the host, and the plain chmod ran.
  struct stat st {};
  ASSERT_EQ(lstat((project_ + "/d").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode, S_IFDIR | 0750) << std::oct << st.st_mode;
  EXPECT_EQ(st.st_gid, other_user().gid);
}

// Landlock (step 17): runs mkfifo and a Unix socket bind in `project` (and a subdirectory), the
// session's home (on disk in the project), /tmp (TMPDIR) and /dev/shm, and checks the project
// on the host. `tmp_result` is what /tmp answers.
void expect_no_fifo_or_socket_in(const Daemon& daemon, const std::string& project,
                                 const std::string& tmp_result) {
  if (!kernel_has_landlock()) {
    GTEST_SKIP() << "this kernel has no Landlock, which is the only layer for this rule";
  }
  ASSERT_TRUE(fs::create_directory(project + "/sub"));
  ASSERT_EQ(chown((project + "/sub").c_str(), caller().uid, caller().gid), 0);
  const std::string probe = daemon.probe();
  std::string script = std::string(kCheck) + "t shell-mkfifo mkfifo q; ";
  for (const std::string dir : {".", "sub", "$HOME", "/tmp", "/dev/shm"}) {
    script += "echo '" + dir + "'; " + probe + " mkfifo \"" + dir + "/p\"; " + probe +
              " bind-unix \"" + dir + "/s\"; ";
  }
  script += "t shell-mkfifo-home mkfifo \"$HOME/q\"";
  RunOptions options;
  options.stdin_data = script + "\n";
  const RunResult r = launch(daemon, caller(), "workspace", project, options);
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon.log();
  const std::string tmp_lines = "mkfifo " + tmp_result + "\nbind-unix " + tmp_result + "\n";
  EXPECT_EQ(r.out,
            "shell-mkfifo no\n"
            ".\nmkfifo errno=EACCES\nbind-unix errno=EACCES\n"
            "sub\nmkfifo errno=EACCES\nbind-unix errno=EACCES\n"
            "$HOME\nmkfifo errno=EACCES\nbind-unix errno=EACCES\n"
            "/tmp\n" +
                tmp_lines +
                "/dev/shm\nmkfifo ok\nbind-unix ok\n"
                "shell-mkfifo-home no\n");

  for (const auto& [path, mode] : tree_modes(project)) {
    EXPECT_FALSE(S_ISFIFO(mode) || S_ISSOCK(mode)) << path << " mode " << std::oct << mode;
  }
}

// /etc/passwd with `user`'s home changed to `home`.
std::string passwd_with_home(const TestUser& user, const std::string& home) {
  std::ifstream passwd_in("/etc/passwd");
  std::ostringstream passwd;
  for (std::string line; std::getline(passwd_in, line);) {
    if (line.rfind(user.name + ":", 0) == 0) {
      std::vector<std::string> fields;
      std::istringstream split(line);
      for (std::string field; std::getline(split, field, ':');) fields.push_back(field);
      EXPECT_EQ(fields.size(), 7u) << line;
      if (fields.size() == 7) fields[5] = home;
      line = fields[0];
      for (size_t i = 1; i < fields.size(); ++i) line += ":" + fields[i];
    }
    passwd << line << "\n";
  }
  return passwd.str();
}

// The caller's home inside the project (a project above it): its ~/.pando-ai is the auth home,
// mounted read-only, and also a directory of the writable project. A Landlock rule belongs to
// the directory wherever it is reached, so the auth home's must grant no FIFO or socket there.
TEST(ProjectExitAuthHomeTest, NoFifoOrSocketInAnAuthHomeInsideTheProject) {
  if (!kernel_has_landlock()) {
    GTEST_SKIP() << "this kernel has no Landlock, which is the only layer for this rule";
  }
  TempDir files;
  const std::string project = files.make_dir("proj", caller());
  const std::string home = project + "/h";
  ASSERT_EQ(mkdir(home.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((home + "/.pando-ai").c_str(), 0700), 0);
  for (const std::string& dir : {home, home + "/.pando-ai"}) {
    ASSERT_EQ(chown(dir.c_str(), caller().uid, caller().gid), 0) << dir;
  }
  std::ofstream(files.path() + "/passwd") << passwd_with_home(caller(), home);
  DaemonOptions options;
  options.files_over = {{files.path() + "/passwd", "/etc/passwd"}};
  const Daemon daemon(options);

  const std::string probe = daemon.probe();
  RunOptions run;
  run.stdin_data = "echo \"auth=$PANDO_AUTH_HOME_OVERRIDE\"; " + probe + " mkfifo h/.pando-ai/p; " +
                   probe + " bind-unix h/.pando-ai/s; " + probe + " mkfifo /dev/shm/p\n";
  const RunResult r = launch(daemon, caller(), "workspace", project, run);
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon.log();
  EXPECT_EQ(r.out, "auth=/pando-auth\nmkfifo errno=EACCES\nbind-unix errno=EACCES\nmkfifo ok\n")
      << daemon.log();
  for (const std::string name : {"/p", "/s"}) {
    EXPECT_FALSE(fs::exists(fs::symlink_status(home + "/.pando-ai" + name))) << name;
  }
}

// Issue 24, finding 3: with the home under a symlinked /home (Fedora Silverblue's
// /home -> var/home), `cd ~ && pando-helper security launch --project-root .` sent the real
// path, which no string equals the passwd home: the role read ~/.ssh and appended to ~/.bashrc,
// and the daemon left an empty ~/.git there. The home is compared by identity, and nothing is
// created in it.
TEST(ProjectExitHomeTest, TheCallersHomeThroughASymlinkIsRefused) {
  TempDir files;
  files.make_dir("var", TestUser{"root", 0, 0});
  files.make_dir("var/home", TestUser{"root", 0, 0});
  const std::string real_home = files.make_dir("var/home/" + caller().name, caller(), 0700);
  files.make_dir("var/home/" + caller().name + "/.ssh", caller(), 0700);
  files.write_file("var/home/" + caller().name + "/.ssh/id_ed25519", "PRIVATE KEY", caller(), 0600);
  ASSERT_EQ(symlink("var/home", (files.path() + "/home").c_str()), 0);
  const std::string home = files.path() + "/home/" + caller().name;
  std::ofstream(files.path() + "/passwd") << passwd_with_home(caller(), home);
  DaemonOptions options;
  options.files_over = {{files.path() + "/passwd", "/etc/passwd"}};
  const Daemon daemon(options);

  RunOptions run;
  run.stdin_data = "cat .ssh/id_ed25519; echo launched\n";
  const RunResult r =
      run_as(caller(),
             {"/bin/sh", "-c",
              "cd \"$0\" && exec \"$1\" security launch --role workspace --project-root . "
              "--stdio --socket \"$2\"",
              home, daemon.client(), daemon.socket_path()},
             run);
  EXPECT_EQ(r.exit_code, 77) << r.out << r.err << daemon.log();
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("ERROR_PATH_FORBIDDEN"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is your home directory itself (" + home + ")"), std::string::npos) << r.err;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(real_home)) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{".ssh"}) << "the launch created something there";
}

// A root-owned 0755 directory under /var/tmp, removed with everything in it.
class VarTmpDir {
 public:
  VarTmpDir() {
    char path[] = "/var/tmp/pandotest-XXXXXX";
    if (mkdtemp(path) != nullptr && chmod(path, 0755) == 0) path_ = path;
  }
  ~VarTmpDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  VarTmpDir(const VarTmpDir&) = delete;
  VarTmpDir& operator=(const VarTmpDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A project outside every writable system tree: /tmp keeps FIFOs and sockets.
TEST_F(ProjectExitTest, NoFifoOrSocketInTheProject) {
  const VarTmpDir parent;
  ASSERT_FALSE(parent.path().empty()) << std::strerror(errno);
  const std::string project = parent.path() + "/proj";
  ASSERT_EQ(mkdir(project.c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(chown(project.c_str(), caller().uid, caller().gid), 0) << std::strerror(errno);
  expect_no_fifo_or_socket_in(*daemon_, project, "ok");
}

// Landlock rights add up along the path: with the project below /tmp, the /tmp rule must not
// grant them either, so only /dev/shm takes FIFOs and sockets.
TEST_F(ProjectExitTest, NoFifoOrSocketInAProjectBelowTmp) {
  ASSERT_EQ(project_.rfind("/tmp/", 0), 0u) << project_;
  expect_no_fifo_or_socket_in(*daemon_, project_, "errno=EACCES");
}

}  // namespace
}  // namespace pando::itest
