// `security setup-users` against the real account database (root only). Every
// account it touches is named pandotest-* and removed before and after.

#include "client/setup_users.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <shadow.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/unit/child_process.h"

namespace {

using pando::client::run_setup_users;
using pando::client::SetupUsersOptions;

constexpr const char* kCore = "pandotest-core";
constexpr const char* kWorkspace = "pandotest-ws";
constexpr const char* kBad = "pandotest-bad";
constexpr const char* kGroup = "pandotest-grp";

int shell(const std::string& command) {
  const int status = std::system((command + " >/dev/null 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string slurp(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::string account_files() {
  std::string all;
  for (const char* path : {"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow"}) {
    all += std::string(path) + "\n" + slurp(path);
  }
  return all;
}

class SetupUsersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "setup-users tests must run as root";
    RemoveTestAccounts();
    options_.core_user = kCore;
    options_.workspace_user = kWorkspace;
    options_.group = kGroup;
  }

  void TearDown() override {
    RemoveTestAccounts();
    if (!home_.empty()) std::filesystem::remove_all(home_);
  }

  static void RemoveTestAccounts() {
    for (const char* name : {kCore, kWorkspace, kBad}) {
      if (getpwnam(name) != nullptr) shell(std::string("/usr/sbin/userdel ") + name);
    }
    for (const char* name : {kCore, kWorkspace, kBad, kGroup}) {
      if (getgrnam(name) != nullptr) shell(std::string("/usr/sbin/groupdel ") + name);
    }
    ASSERT_EQ(getpwnam(kCore), nullptr);
    ASSERT_EQ(getpwnam(kWorkspace), nullptr);
    ASSERT_EQ(getpwnam(kBad), nullptr);
  }

  int Run() {
    out_.str("");
    err_.str("");
    return run_setup_users(options_, out_, err_);
  }

  // Runs against a pre-made `bad` core user and expects a refusal that names
  // `property`, with nothing created.
  void ExpectRefused(const std::string& property) {
    options_.core_user = kBad;
    const std::string before = account_files();
    EXPECT_EQ(Run(), 1) << out_.str() << err_.str();
    EXPECT_NE(err_.str().find(std::string(kBad) + ": refused"), std::string::npos) << err_.str();
    EXPECT_NE(err_.str().find(property), std::string::npos) << err_.str();
    const std::string err = err_.str();
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_EQ(getpwnam(kWorkspace), nullptr) << "created a user despite the refusal";
    EXPECT_EQ(account_files(), before);
  }

  SetupUsersOptions options_;
  std::ostringstream out_;
  std::ostringstream err_;
  std::string home_;
};

TEST_F(SetupUsersTest, CreatesLockedSystemUsersThenChangesNothing) {
  ASSERT_EQ(Run(), 0) << err_.str();
  EXPECT_NE(out_.str().find("pandotest-core: created"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("pandotest-ws: created"), std::string::npos) << out_.str();

  for (const char* name : {kCore, kWorkspace}) {
    const passwd* pw = getpwnam(name);
    ASSERT_NE(pw, nullptr) << name;
    EXPECT_GE(pw->pw_uid, 100u) << name;
    EXPECT_LE(pw->pw_uid, 999u) << name;
    EXPECT_STREQ(pw->pw_shell, "/usr/sbin/nologin") << name;
    EXPECT_STREQ(pw->pw_dir, "/nonexistent") << name;
    struct stat st {};
    EXPECT_NE(stat(pw->pw_dir, &st), 0) << name;
    const group* gr = getgrgid(pw->pw_gid);
    ASSERT_NE(gr, nullptr) << name;
    EXPECT_STREQ(gr->gr_name, name);
    const spwd* sp = getspnam(name);
    ASSERT_NE(sp, nullptr) << name;
    EXPECT_TRUE(sp->sp_pwdp[0] == '!' || sp->sp_pwdp[0] == '*') << name << " " << sp->sp_pwdp;
  }

  const std::string before = account_files();
  ASSERT_EQ(Run(), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "pandotest-core: already set up, unchanged\n"
            "pandotest-ws: already set up, unchanged\n");
  EXPECT_EQ(err_.str(), "");
  EXPECT_EQ(account_files(), before);
}

TEST_F(SetupUsersTest, CreatesTheGroupOnRequestOnce) {
  options_.create_group = true;
  ASSERT_EQ(Run(), 0) << err_.str();
  EXPECT_NE(out_.str().find("pandotest-grp: system group created"), std::string::npos);
  ASSERT_NE(getgrnam(kGroup), nullptr);
  EXPECT_LE(getgrnam(kGroup)->gr_gid, 999u);
  const std::string before = account_files();
  ASSERT_EQ(Run(), 0) << err_.str();
  EXPECT_NE(out_.str().find("pandotest-grp: group already exists, unchanged"), std::string::npos);
  EXPECT_EQ(account_files(), before);
}

TEST_F(SetupUsersTest, RefusesALoginShell) {
  ASSERT_EQ(shell("/usr/sbin/useradd --system --shell /bin/bash pandotest-bad"), 0);
  ExpectRefused("login shell '/bin/bash'");
}

TEST_F(SetupUsersTest, RefusesANonSystemUid) {
  ASSERT_EQ(getpwuid(59123), nullptr) << "uid 59123 is in use on this machine";
  ASSERT_EQ(shell("/usr/sbin/useradd --uid 59123 --shell /usr/sbin/nologin pandotest-bad"), 0);
  ExpectRefused("uid 59123 outside the system range");
}

TEST_F(SetupUsersTest, RefusesAUsablePassword) {
  ASSERT_EQ(shell("/usr/sbin/useradd --system --shell /usr/sbin/nologin pandotest-bad"), 0);
  ASSERT_EQ(shell("/usr/sbin/usermod --password 'notlocked' pandotest-bad"), 0);
  ExpectRefused("usable password");
}

TEST_F(SetupUsersTest, RefusesAnExistingHome) {
  char tmpl[] = "/var/tmp/pandotest-home-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  home_ = tmpl;
  ASSERT_EQ(shell("/usr/sbin/useradd --system --shell /usr/sbin/nologin --home-dir " + home_ +
                  " pandotest-bad"),
            0);
  ExpectRefused("existing home directory " + home_);
}

TEST_F(SetupUsersTest, RefusesAnOrphanGroupOfTheSameName) {
  ASSERT_EQ(shell("/usr/sbin/groupadd --system pandotest-bad"), 0);
  ExpectRefused("a group 'pandotest-bad' exists");
}

TEST_F(SetupUsersTest, UsageErrors) {
  options_.workspace_user = kCore;
  EXPECT_EQ(Run(), 2);
  options_.workspace_user = "Bad Name";
  EXPECT_EQ(Run(), 2);
  options_.workspace_user = "-rf";
  EXPECT_EQ(Run(), 2);
  EXPECT_EQ(getpwnam(kCore), nullptr);
}

TEST_F(SetupUsersTest, RequiresRoot) {
  const auto result = pando::testing::RunInChild([&](const pando::testing::Child& child) {
    if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
        setresuid(65534, 65534, 65534) != 0) {
      return child.FailErrno("dropping to nobody");
    }
    std::ostringstream out, err;
    const int code = run_setup_users(options_, out, err);
    if (code != 2) return child.Fail("exit code " + std::to_string(code));
    if (err.str().find("must run as root") == std::string::npos) return child.Fail(err.str());
    return 0;
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(getpwnam(kCore), nullptr);
}

}  // namespace
