// Resolution of the project root with the caller's own permissions. Needs
// root (to act as a caller and to make directories of several owners).

#include "daemon/project_root.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "proto/error.h"

namespace pando::daemon {
namespace {

namespace v1 = pando::helper::v1;
namespace fs = std::filesystem;

constexpr uid_t kCaller = 64201;
constexpr uid_t kOther = 64202;

class ProjectRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "needs root";
    char templ[] = "/tmp/pandotest-root-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    base_ = templ;
    chmod(base_.c_str(), 0755);
    peer_.uid = kCaller;
    peer_.gid = kCaller;
    peer_.groups = {kCaller};
  }
  void TearDown() override { fs::remove_all(base_); }
  std::string dir(const std::string& name, uid_t owner, mode_t mode = 0755) {
    const std::string path = base_ + "/" + name;
    fs::create_directories(path);
    chown(path.c_str(), owner, owner);
    chmod(path.c_str(), mode);
    return path;
  }
  v1::ErrorCode code(const std::string& path, const std::string& role = "workspace") {
    try {
      resolve_project(peer_, path, role);
    } catch (const pando::Error& e) {
      return e.code();
    }
    return v1::ERROR_UNSPECIFIED;
  }
  std::string base_;
  PeerIdentity peer_;
};

TEST_F(ProjectRootTest, OwnedDirectoryResolvesAndSandboxDirsBelongToTheCaller) {
  const std::string project = dir("proj", kCaller);
  const ResolvedProject resolved = resolve_project(peer_, project, "core");
  EXPECT_TRUE(resolved.root.valid());
  EXPECT_TRUE(resolved.sandbox_dir.valid());
  for (const std::string sub :
       {"", "/core", "/core/home", "/core/cache", "/core/config", "/core/data"}) {
    struct stat st {};
    ASSERT_EQ(lstat((project + "/.pando-sandbox" + sub).c_str(), &st), 0) << sub;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << sub;
    EXPECT_EQ(st.st_uid, kCaller) << sub;
    EXPECT_EQ(st.st_gid, kCaller) << sub;
  }
  // The daemon's identity is back to root afterwards.
  EXPECT_EQ(setfsuid(static_cast<uid_t>(-1)), 0);
}

TEST_F(ProjectRootTest, SymlinkAtAnyComponentIsRefused) {
  const std::string real = dir("real/proj", kCaller);
  fs::create_directory_symlink(base_ + "/real", base_ + "/link");
  EXPECT_EQ(code(base_ + "/link/proj"), v1::ERROR_PATH_SYMLINK);
  fs::create_directory_symlink(real, base_ + "/last");
  EXPECT_EQ(code(base_ + "/last"), v1::ERROR_PATH_SYMLINK);
  fs::create_directory_symlink("/etc", base_ + "/etc-link");
  EXPECT_EQ(code(base_ + "/etc-link"), v1::ERROR_PATH_SYMLINK);
}

TEST_F(ProjectRootTest, OtherUsersDirectoryIsNotOwned) {
  EXPECT_EQ(code(dir("theirs", kOther)), v1::ERROR_PATH_NOT_OWNED);
}

TEST_F(ProjectRootTest, RootsTraversalRightsAreNotLent) {
  dir("private", kOther, 0700);
  const std::string mine = dir("private/mine", kCaller);
  EXPECT_EQ(code(mine), v1::ERROR_PATH_ACCESS_DENIED);
}

TEST_F(ProjectRootTest, MissingAndNonDirectory) {
  EXPECT_EQ(code(base_ + "/absent"), v1::ERROR_PATH_NOT_FOUND);
  const std::string file = base_ + "/file";
  close(open(file.c_str(), O_CREAT | O_WRONLY, 0644));
  chown(file.c_str(), kCaller, kCaller);
  EXPECT_EQ(code(file), v1::ERROR_PATH_NOT_DIRECTORY);
}

TEST_F(ProjectRootTest, PlantedSandboxSymlinkIsRefusedAndNotFollowed) {
  const std::string project = dir("proj", kCaller);
  const std::string target = dir("target", kCaller);
  fs::create_directory_symlink(target, project + "/.pando-sandbox");
  EXPECT_EQ(code(project), v1::ERROR_PATH_SYMLINK);
  EXPECT_TRUE(fs::is_empty(target)) << "nothing may be created through the link";
  fs::remove(project + "/.pando-sandbox");
  dir("proj/.pando-sandbox", kCaller, 0700);
  fs::create_directory_symlink("/etc", project + "/.pando-sandbox/workspace");
  EXPECT_EQ(code(project), v1::ERROR_PATH_SYMLINK);
  EXPECT_FALSE(fs::exists("/etc/home"));
}

TEST_F(ProjectRootTest, SandboxDirOwnedBySomeoneElseIsRefused) {
  const std::string project = dir("proj", kCaller);
  dir("proj/.pando-sandbox", kOther, 0777);
  EXPECT_EQ(code(project), v1::ERROR_PATH_NOT_OWNED);
}

// Issue 24, finding 3: the client sends the real path (/var/home/alice on Fedora Silverblue,
// where /home -> var/home), which no string equals the passwd home (/home/alice). Homes are
// compared by device and inode: the caller's own through its symlinks, and every directory in
// the homes directory, whoever's.
TEST_F(ProjectRootTest, AHomeReachedThroughASymlinkIsRefusedByIdentity) {
  dir("var/home", 0);
  const std::string alice = dir("var/home/alice", kCaller);
  const std::string bob = dir("var/home/bob", kOther);
  const std::string project = dir("var/home/alice/project", kCaller);
  ASSERT_EQ(symlink("var/home", (base_ + "/home").c_str()), 0);
  const auto refusal = [&](const std::string& path) -> std::string {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return "cannot stat " + path;
    try {
      check_not_a_home(st, path, base_ + "/home/alice", base_ + "/home");
    } catch (const pando::Error& e) {
      return e.code() == v1::ERROR_PATH_FORBIDDEN ? e.what() : "wrong code";
    }
    return "";
  };
  EXPECT_NE(refusal(alice).find("is your home directory itself"), std::string::npos);
  EXPECT_NE(refusal(bob).find("is a home directory itself (" + base_ + "/home/bob)"),
            std::string::npos);
  EXPECT_EQ(refusal(project), "");
  EXPECT_EQ(refusal(base_), "");
  // A system container by identity, whatever the path it was reached by.
  EXPECT_NE(refusal("/tmp/.").find("is a system location (/tmp)"), std::string::npos);
}

TEST(LocationRule, SystemTreesAndHomesAreForbidden) {
  const auto forbidden = [](const std::string& path, const std::string& home = "/home/alice") {
    try {
      check_location_allowed(path, home);
    } catch (const pando::Error& e) {
      return e.code() == v1::ERROR_PATH_FORBIDDEN;
    }
    return false;
  };
  for (const char* path : {"/", "/etc", "/etc/ssh", "/usr", "/usr/local/src", "/proc", "/proc/1",
                           "/sys", "/dev", "/run", "/run/pando", "/boot", "/root", "/root/p",
                           "/var/lib/x", "/home", "/tmp", "/home/alice", "/home/bob"}) {
    EXPECT_TRUE(forbidden(path)) << path;
  }
  EXPECT_TRUE(forbidden("/srv/alice-home", "/srv/alice-home"));
  for (const char* path : {"/home/alice/project", "/tmp/x", "/srv/code", "/var/tmp/p", "/etcetera",
                           "/usrx", "/opt/work"}) {
    EXPECT_FALSE(forbidden(path)) << path;
  }
}

}  // namespace
}  // namespace pando::daemon
