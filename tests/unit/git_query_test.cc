// pando-helper-git-query's own parts: where a path git names leads as the session must pin it,
// and reading git's listing unambiguously (issue 24). The end-to-end attacks are in
// tests/integration/git_exits_test.cc.

#include "daemon/git_query.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gitquery/git.h"
#include "gitquery/resolve.h"

namespace pando::gitquery {
namespace {

namespace fs = std::filesystem;
using Kind = Target::Kind;

class ResolveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/pandotest-resolve-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    base_ = templ;
    fs::create_directories(base_ + "/var/home/me/proj/sub");
    fs::create_symlink("var/home", base_ + "/home");
    fs::create_directories(base_ + "/elsewhere");
    std::ofstream(base_ + "/elsewhere/x.cfg") << "[user]\n";
    ASSERT_TRUE(load_project(base_ + "/var/home/me/proj", project_));
  }
  void TearDown() override { fs::remove_all(base_); }
  Target at(const std::string& path) const { return resolve(project_, base_ + path); }

  std::string base_;
  Project project_;
};

TEST_F(ResolveTest, LinksOutsideTheProjectAreFollowedAsTheKernelDoes) {
  // Fedora Silverblue: /home -> var/home, and $PWD through it.
  const Target target = at("/home/me/proj/.githooks");
  EXPECT_EQ(target.kind, Kind::kInside);
  EXPECT_EQ(target.relative, ".githooks");
  EXPECT_EQ(at("/home/me/proj/sub/../x.cfg").relative, "x.cfg");
  EXPECT_EQ(at("//var/home/me/./proj//sub/y.cfg").relative, "sub/y.cfg");
  EXPECT_EQ(at("/var/home/me/proj").relative, "");
  EXPECT_EQ(at("/elsewhere/x.cfg").kind, Kind::kOutside);
  EXPECT_EQ(at("/var/home/me/proj/../missing.cfg").kind, Kind::kOutside);
}

TEST_F(ResolveTest, ALinkInsideTheProjectIsReportedNotFollowed) {
  fs::create_symlink("sub", base_ + "/var/home/me/proj/hooks-link");
  const Target target = at("/var/home/me/proj/hooks-link/pre-commit");
  EXPECT_EQ(target.kind, Kind::kThroughLink);
  EXPECT_EQ(target.relative, "hooks-link");
}

TEST_F(ResolveTest, MissingDirectoriesOnTheWayAreNamedForTheLauncherToMake) {
  const Target through = at("/var/home/me/proj/new/../b.cfg");
  EXPECT_EQ(through.kind, Kind::kInside);
  EXPECT_EQ(through.relative, "b.cfg");
  EXPECT_EQ(through.passed_through, std::vector<std::string>{"new"});
  const Target below = at("/var/home/me/proj/.husky/_");
  EXPECT_EQ(below.relative, ".husky/_");
  EXPECT_EQ(below.passed_through, std::vector<std::string>{".husky"});
}

// A host mount inside the project is not in the session's view of it (a clone without
// submounts): what git reads there, the role cannot reach.
TEST_F(ResolveTest, WhatIsBelowAHostMountInTheProjectIsOutside) {
  const pid_t child = fork();
  if (child == 0) {
    const std::string mounted = base_ + "/var/home/me/proj/sub";
    if (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", mounted.c_str(), "tmpfs", 0, nullptr) != 0) {
      _exit(2);
    }
    Project project;
    if (!load_project(base_ + "/var/home/me/proj", project)) _exit(3);
    _exit(resolve(project, mounted + "/x.cfg").kind == Kind::kOutside ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(ConfigListing, ReadsGitsFieldsAndRefusesShiftedOnes) {
  std::vector<ConfigEntry> entries;
  const auto fields = [](std::initializer_list<std::string> parts) {
    std::string text;
    for (const std::string& part : parts) text += part + '\0';
    return text;
  };
  const std::string listing = fields({"local", "file:.git/config", "core.hookspath\n.husky/_",
                                      "global", "file:/h/.gitconfig", "core.bare"});
  ASSERT_TRUE(parse_config_listing(listing, true, entries));
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].origin, "file:.git/config");
  EXPECT_EQ(entries[0].key, "core.hookspath");
  EXPECT_EQ(entries[0].value, ".husky/_");
  EXPECT_FALSE(entries[1].has_value);
  // A NUL inside a value would shift every field after it: refused, not misread.
  entries.clear();
  const std::string shifted =
      fields({"local", "file:x", "include.path\na", "b", "local", "file:x", "core.bare\ntrue"});
  EXPECT_FALSE(parse_config_listing(shifted, true, entries));
  EXPECT_FALSE(parse_config_listing(fields({"local"}) + "file:x", true, entries));
}

TEST(GitAnswerPaths, OnlyNormalRelativePathsAreTaken) {
  for (const char* good : {"", "a", "a/b", ".git/config", "t tab.cfg"}) {
    EXPECT_TRUE(daemon::is_normal_relative(good)) << good;
  }
  for (const char* bad : {"/a", "a/", "a//b", "./a", "a/../b", "..", "a/."}) {
    EXPECT_FALSE(daemon::is_normal_relative(bad)) << bad;
  }
}

}  // namespace
}  // namespace pando::gitquery
