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

#include "proto/error.h"
#include "tests/unit/child_process.h"

namespace {

using pando::client::run_setup_users;
using pando::client::SetupUsersOptions;
using pando::client::detail::AccountFiles;
using pando::client::detail::find_local_user;
using pando::client::detail::local_group_exists;

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

// --- reading the local account files (temporary copies, never the real /etc)

class AccountFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pandotest-accounts-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    files_.passwd = dir_ + "/passwd";
    files_.group = dir_ + "/group";
    files_.shadow = dir_ + "/shadow";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static void Write(const std::string& path, const std::string& contents) {
    std::ofstream(path, std::ios::binary) << contents;
  }

  std::string dir_;
  AccountFiles files_;
};

constexpr const char* kCoreLine =
    "pandotest-core:x:998:998:Pando core role:/nonexistent:/usr/sbin/nologin\n";

TEST_F(AccountFilesTest, ReadsAUserAndItsShadowPassword) {
  Write(files_.passwd, std::string("root:x:0:0:root:/root:/bin/bash\n") + kCoreLine);
  Write(files_.shadow, "root:*:19000:0:99999:7:::\npandotest-core:!:19000::::::\n");
  const auto account = find_local_user(files_, "pandotest-core");
  ASSERT_TRUE(account.has_value());
  EXPECT_EQ(account->uid, 998u);
  EXPECT_EQ(account->shell, "/usr/sbin/nologin");
  EXPECT_EQ(account->home, "/nonexistent");
  EXPECT_EQ(account->passwd, "x");
  ASSERT_TRUE(account->shadow.has_value());
  EXPECT_EQ(*account->shadow, "!");
  EXPECT_FALSE(find_local_user(files_, "pandotest-ws").has_value());
}

TEST_F(AccountFilesTest, MatchesTheWholeName) {
  Write(files_.passwd, kCoreLine);
  Write(files_.shadow, "");
  EXPECT_FALSE(find_local_user(files_, "pandotest-cor").has_value());
  EXPECT_FALSE(find_local_user(files_, "pandotest-core2").has_value());
  EXPECT_FALSE(find_local_user(files_, "andotest-core").has_value());
}

TEST_F(AccountFilesTest, AUserWithoutShadowEntryHasNoShadowPassword) {
  Write(files_.passwd, kCoreLine);
  Write(files_.shadow, "root:*:19000:0:99999:7:::\npandotest-core2:!:19000::::::\n");
  const auto account = find_local_user(files_, "pandotest-core");
  ASSERT_TRUE(account.has_value());
  EXPECT_FALSE(account->shadow.has_value());
}

TEST_F(AccountFilesTest, AMissingShadowFileMeansNoShadowPassword) {
  Write(files_.passwd, kCoreLine);
  const auto account = find_local_user(files_, "pandotest-core");
  ASSERT_TRUE(account.has_value());
  EXPECT_FALSE(account->shadow.has_value());
}

TEST_F(AccountFilesTest, AnEmptyShadowPasswordIsKeptEmpty) {
  Write(files_.passwd, kCoreLine);
  Write(files_.shadow, "pandotest-core::19000:0:99999:7:::\n");
  const auto account = find_local_user(files_, "pandotest-core");
  ASSERT_TRUE(account.has_value());
  ASSERT_TRUE(account->shadow.has_value());
  EXPECT_EQ(*account->shadow, "");
}

TEST_F(AccountFilesTest, SkipsMalformedPasswdLines) {
  for (const std::string line : {
           "pandotest-core:x:998:998:gecos:/nonexistent\n",                 // 6 fields
           "pandotest-core:x:998:998:gecos:/nonexistent:/bin/sh:extra\n",   // 8 fields
           "pandotest-core:x::998:gecos:/nonexistent:/usr/sbin/nologin\n",  // empty uid
           "pandotest-core:x:abc:998:gecos:/nonexistent:/usr/sbin/nologin\n",
           "pandotest-core:x:-1:998:gecos:/nonexistent:/usr/sbin/nologin\n",
           "pandotest-core:x:+5:998:gecos:/nonexistent:/usr/sbin/nologin\n",
           "pandotest-core:x: 998:998:gecos:/nonexistent:/usr/sbin/nologin\n",
           "pandotest-core:x:998x:998:gecos:/nonexistent:/usr/sbin/nologin\n",
           "pandotest-core:x:4294967295:998:gecos:/nonexistent:/usr/sbin/nologin\n",
           "pandotest-core:x:99999999999999999999:998:g:/nonexistent:/usr/sbin/nologin\n",
           "pandotest-core:x:998:oops:gecos:/nonexistent:/usr/sbin/nologin\n",
           "+pandotest-core:x:998:998:gecos:/nonexistent:/usr/sbin/nologin\n",  // NIS
           "-pandotest-core:x:998:998:gecos:/nonexistent:/usr/sbin/nologin\n",
           "+\n",
           "#pandotest-core:x:998:998:gecos:/nonexistent:/usr/sbin/nologin\n",
           " pandotest-core:x:998:998:gecos:/nonexistent:/usr/sbin/nologin\n",
       }) {
    Write(files_.passwd, "root:x:0:0:root:/root:/bin/bash\n\n" + line);
    EXPECT_FALSE(find_local_user(files_, "pandotest-core").has_value()) << line;
    // A malformed line does not hide a well-formed one after it.
    Write(files_.passwd, line + "\n" + kCoreLine);
    const auto account = find_local_user(files_, "pandotest-core");
    ASSERT_TRUE(account.has_value()) << line;
    EXPECT_EQ(account->uid, 998u) << line;
  }
}

TEST_F(AccountFilesTest, TheFirstEntryWinsAndTheLastLineNeedsNoNewline) {
  Write(files_.passwd,
        "pandotest-core:x:997:997::/nonexistent:/usr/sbin/nologin\n"
        "pandotest-core:x:996:996::/nonexistent:/bin/bash");
  Write(files_.shadow, "pandotest-core:*\npandotest-core:secret:19000::::::");
  auto account = find_local_user(files_, "pandotest-core");
  ASSERT_TRUE(account.has_value());
  EXPECT_EQ(account->uid, 997u);
  EXPECT_EQ(*account->shadow, "*");

  Write(files_.passwd, "pandotest-core:x:996:996::/home/x:/bin/bash");
  account = find_local_user(files_, "pandotest-core");
  ASSERT_TRUE(account.has_value());
  EXPECT_EQ(account->shell, "/bin/bash");
}

TEST_F(AccountFilesTest, ShadowLinesNeedAPasswordFieldAndAtMostNineFields) {
  Write(files_.passwd, kCoreLine);
  for (const std::string line : {"pandotest-core\n", "pandotest-core:!:1:2:3:4:5:6:7:8\n",
                                 "+pandotest-core:!:19000::::::\n"}) {
    Write(files_.shadow, line);
    const auto account = find_local_user(files_, "pandotest-core");
    ASSERT_TRUE(account.has_value());
    EXPECT_FALSE(account->shadow.has_value()) << line;
  }
  // Only the password matters: a line with just name and password counts.
  Write(files_.shadow, "pandotest-core:pw\n");
  EXPECT_EQ(find_local_user(files_, "pandotest-core")->shadow, "pw");
}

TEST_F(AccountFilesTest, Groups) {
  Write(files_.group,
        "root:x:0:\n"
        "pandotest-grp:x:997:pandotest-core,pandotest-ws\n"
        "pandotest-bad:x:oops:\n"
        "+pandotest-nis:x:996:\n"
        "pandotest-short:x:995\n"
        "pandotest-last:x:994:");
  EXPECT_TRUE(local_group_exists(files_, "pandotest-grp"));
  EXPECT_TRUE(local_group_exists(files_, "pandotest-last"));
  EXPECT_TRUE(local_group_exists(files_, "root"));
  EXPECT_FALSE(local_group_exists(files_, "pandotest-bad"));
  EXPECT_FALSE(local_group_exists(files_, "pandotest-nis"));
  EXPECT_FALSE(local_group_exists(files_, "+pandotest-nis"));
  EXPECT_FALSE(local_group_exists(files_, "pandotest-short"));
  EXPECT_FALSE(local_group_exists(files_, "pandotest-gr"));
  EXPECT_FALSE(local_group_exists(files_, "pandotest-core"));
}

TEST_F(AccountFilesTest, MissingOrUnreadablePasswdAndGroupFilesAreErrors) {
  EXPECT_THROW(find_local_user(files_, "pandotest-core"), pando::Error);
  EXPECT_THROW(local_group_exists(files_, "pandotest-grp"), pando::Error);
  std::filesystem::create_directory(files_.passwd);
  std::filesystem::create_directory(files_.group);
  EXPECT_THROW(find_local_user(files_, "pandotest-core"), pando::Error);
  EXPECT_THROW(local_group_exists(files_, "pandotest-grp"), pando::Error);
  // A shadow file that exists but cannot be read is an error too, unlike a missing one.
  std::filesystem::remove(files_.passwd);
  Write(files_.passwd, kCoreLine);
  std::filesystem::create_directory(files_.shadow);
  EXPECT_THROW(find_local_user(files_, "pandotest-core"), pando::Error);
}

// The real files agree with NSS about root on this machine.
TEST(LocalAccountFiles, AgreeWithNssForRoot) {
  const passwd* pw = getpwnam("root");
  ASSERT_NE(pw, nullptr);
  const auto account = find_local_user(AccountFiles{}, "root");
  ASSERT_TRUE(account.has_value());
  EXPECT_EQ(account->uid, pw->pw_uid);
  EXPECT_EQ(account->shell, pw->pw_shell);
  EXPECT_EQ(account->home, pw->pw_dir);
  const spwd* sp = getspnam("root");
  ASSERT_NE(sp, nullptr);
  ASSERT_TRUE(account->shadow.has_value());
  EXPECT_EQ(*account->shadow, sp->sp_pwdp);
  EXPECT_TRUE(local_group_exists(AccountFiles{}, "root"));
  EXPECT_FALSE(local_group_exists(AccountFiles{}, "pandotest-none"));
}

}  // namespace
