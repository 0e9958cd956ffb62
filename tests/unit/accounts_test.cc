// pando::accounts: the passwd/group parser the daemon and the client share,
// and the daemon's lookups (local files first, then getent) that replace NSS
// in the static binaries.

#include "common/accounts.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "proto/error.h"

namespace {

namespace fs = std::filesystem;
using namespace pando::accounts;
using namespace std::chrono_literals;

constexpr const char* kPasswd =
    "# comment\n"
    "\n"
    "+nisuser::::::\n"
    "-alice:x:1:1::/:/bin/sh\n"
    "broken:x:notanumber:100::/home/broken:/bin/sh\n"
    "short:x:1001:1001\n"
    "toolong:x:1002:1002::/home/toolong:/bin/sh:extra\n"
    "noid:x:4294967295:100::/:/bin/sh\n"
    "alice:x:1000:1000:Alice:/home/alice:/bin/bash\n"
    "alice:x:1003:1003:second:/home/other:/bin/sh\n"
    "bob:!:1004:100::/nonexistent:/usr/sbin/nologin";  // no final newline

constexpr const char* kGroup =
    "# comment\n"
    "+nisgroup::::\n"
    "broken:x:x:\n"
    "staff:x:50:alice,bob\n"
    "users:x:100:\n"
    "alice:x:1000:\n"
    "carol:x:1005:carol\n"
    "dave:x:1006:dave,,erin\n";

TEST(AccountsParserTest, FindsTheFirstWellFormedUserByName) {
  const auto alice = find_user_by_name(kPasswd, "alice");
  ASSERT_TRUE(alice);
  EXPECT_EQ(alice->uid, 1000u);
  EXPECT_EQ(alice->gid, 1000u);
  EXPECT_EQ(alice->home, "/home/alice");
  EXPECT_EQ(alice->shell, "/bin/bash");
  EXPECT_EQ(alice->password, "x");
  const auto bob = find_user_by_name(kPasswd, "bob");
  ASSERT_TRUE(bob);
  EXPECT_EQ(bob->password, "!");
  EXPECT_EQ(bob->shell, "/usr/sbin/nologin");
}

TEST(AccountsParserTest, SkipsLinesThatDoNotParse) {
  for (const char* name : {"broken", "short", "toolong", "noid", "+nisuser", "nisuser", "#"}) {
    EXPECT_FALSE(find_user_by_name(kPasswd, name)) << name;
  }
  EXPECT_FALSE(find_user_by_name(kPasswd, ""));
}

TEST(AccountsParserTest, FindsUsersById) {
  const auto user = find_user_by_id(kPasswd, 1003);
  ASSERT_TRUE(user);
  EXPECT_EQ(user->name, "alice");
  EXPECT_EQ(user->home, "/home/other");
  EXPECT_FALSE(find_user_by_id(kPasswd, 1001));  // "short" has too few fields
  EXPECT_FALSE(find_user_by_id(kPasswd, 1));     // NIS compat line
  EXPECT_FALSE(find_user_by_id(kPasswd, static_cast<uid_t>(-1)));
}

TEST(AccountsParserTest, FindsGroups) {
  const auto staff = find_group_by_name(kGroup, "staff");
  ASSERT_TRUE(staff);
  EXPECT_EQ(staff->gid, 50u);
  const auto users = find_group_by_id(kGroup, 100);
  ASSERT_TRUE(users);
  EXPECT_EQ(users->name, "users");
  EXPECT_FALSE(find_group_by_name(kGroup, "broken"));
  EXPECT_FALSE(find_group_by_name(kGroup, "nisgroup"));
  EXPECT_FALSE(find_group_by_id(kGroup, 51));
}

TEST(AccountsParserTest, ReadsMembers) {
  EXPECT_EQ(find_group_by_name(kGroup, "staff")->members,
            (std::vector<std::string>{"alice", "bob"}));
  EXPECT_TRUE(find_group_by_name(kGroup, "users")->members.empty());
  EXPECT_EQ(find_group_by_name(kGroup, "dave")->members,
            (std::vector<std::string>{"dave", "erin"}));
}

// Group write on a file of the caller's group reaches nobody else only for a group of its own.
TEST(AccountsParserTest, PrivateGroupIsNamedLikeTheUserAndListsNobodyElse) {
  EXPECT_TRUE(is_private_group_of(*find_group_by_name(kGroup, "alice"), "alice"));
  EXPECT_TRUE(is_private_group_of(*find_group_by_name(kGroup, "carol"), "carol"));
  EXPECT_FALSE(is_private_group_of(*find_group_by_name(kGroup, "dave"), "dave"));
  EXPECT_FALSE(is_private_group_of(*find_group_by_name(kGroup, "users"), "alice"));
  EXPECT_FALSE(is_private_group_of(*find_group_by_name(kGroup, "staff"), "alice"));
  EXPECT_FALSE(is_private_group_of(*find_group_by_name(kGroup, "alice"), "bob"));
}

TEST(AccountsParserTest, ShadowPasswordOfAnyLineWithOne) {
  constexpr const char* kShadow = "alice:$6$abc:19000\nbob:!\nshort\n";
  EXPECT_EQ(find_shadow_password(kShadow, "alice"), "$6$abc");
  EXPECT_EQ(find_shadow_password(kShadow, "bob"), "!");
  EXPECT_FALSE(find_shadow_password(kShadow, "short"));
  EXPECT_FALSE(find_shadow_password(kShadow, "carol"));
}

class AccountsLookupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pandotest-accounts-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << std::strerror(errno);
    dir_ = tmpl;
    sources_.passwd = dir_ + "/passwd";
    sources_.group = dir_ + "/group";
    Write(sources_.passwd, "");
    Write(sources_.group, "");
    sources_.getent = {dir_ + "/getent"};
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  static void Write(const std::string& path, const std::string& contents) {
    std::ofstream out(path, std::ios::trunc);
    out << contents;
    ASSERT_TRUE(out.good()) << path;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // A stand-in for getent(1): a shell script that logs how it was called.
  void FakeGetent(const std::string& body) {
    Write(sources_.getent[0], "#!/bin/sh\necho \"$@\" >>" + dir_ + "/calls\n" + body + "\n");
    ASSERT_EQ(chmod(sources_.getent[0].c_str(), 0755), 0) << std::strerror(errno);
  }
  std::string Calls() { return Read(dir_ + "/calls"); }

  std::string dir_;
  Sources sources_;
};

TEST_F(AccountsLookupTest, AFileThatCannotBeReadIsAnInternalError) {
  EXPECT_EQ(read_account_file(dir_ + "/missing"), std::nullopt);
  try {
    read_account_file(dir_);
    ADD_FAILURE() << "a directory was read as an account file";
  } catch (const pando::Error& e) {
    EXPECT_EQ(e.code(), pando::helper::v1::ERROR_INTERNAL) << e.what();
  }
}

TEST_F(AccountsLookupTest, LocalFilesComeFirst) {
  Write(sources_.passwd, "pandotest-a:x:4000:4001::/home/a:/bin/sh\n");
  Write(sources_.group, "pandotest-g:x:4001:\n");
  FakeGetent("echo 'pandotest-a:x:5000:5000::/elsewhere:/bin/sh'");
  const auto user = user_by_name("pandotest-a", sources_);
  ASSERT_TRUE(user);
  EXPECT_EQ(user->uid, 4000u);
  EXPECT_EQ(user_by_id(4000, sources_)->name, "pandotest-a");
  EXPECT_EQ(group_by_name("pandotest-g", sources_)->gid, 4001u);
  EXPECT_EQ(group_by_id(4001, sources_)->name, "pandotest-g");
  EXPECT_EQ(Calls(), "");
}

TEST_F(AccountsLookupTest, OtherAccountsComeFromGetentByAbsolutePathWithoutEnvironment) {
  ASSERT_EQ(setenv("PANDOTEST_LEAK", "1", 1), 0);
  FakeGetent(
      "[ -z \"$PANDOTEST_LEAK\" ] || exit 1\n"
      "[ \"$1 $2\" = 'passwd --' ] && [ \"$3\" = pandotest-ldap ] &&"
      " echo 'pandotest-ldap:*:6000:6001:LDAP:/home/ldap:/bin/bash' && exit 0\n"
      "[ \"$1 $2 $3\" = 'passwd -- 6000' ] &&"
      " echo 'pandotest-ldap:*:6000:6001:LDAP:/home/ldap:/bin/bash' && exit 0\n"
      "[ \"$1 $2 $3\" = 'group -- 6001' ] && echo 'pandotest-lgrp:*:6001:' && exit 0\n"
      "[ \"$1 $2 $3\" = 'group -- pandotest-lgrp' ] && echo 'pandotest-lgrp:*:6001:' && exit 0\n"
      "exit 2");
  const auto user = user_by_name("pandotest-ldap", sources_);
  unsetenv("PANDOTEST_LEAK");
  ASSERT_TRUE(user);
  EXPECT_EQ(user->uid, 6000u);
  EXPECT_EQ(user->gid, 6001u);
  EXPECT_EQ(user->home, "/home/ldap");
  EXPECT_EQ(user_by_id(6000, sources_)->name, "pandotest-ldap");
  EXPECT_EQ(group_by_id(6001, sources_)->name, "pandotest-lgrp");
  EXPECT_EQ(group_by_name("pandotest-lgrp", sources_)->gid, 6001u);
  EXPECT_FALSE(user_by_name("pandotest-nobody", sources_));
  EXPECT_EQ(Calls(),
            "passwd -- pandotest-ldap\npasswd -- 6000\ngroup -- 6001\ngroup -- pandotest-lgrp\n"
            "passwd -- pandotest-nobody\n");
}

TEST_F(AccountsLookupTest, TheSystemGetentAnswersForAccountsMissingLocally) {
  sources_.getent = Sources{}.getent;
  const auto root = user_by_name("root", sources_);
  ASSERT_TRUE(root);
  EXPECT_EQ(root->uid, 0u);
  EXPECT_EQ(root->home, "/root");
  EXPECT_EQ(user_by_id(0, sources_)->name, "root");
  EXPECT_EQ(group_by_id(0, sources_)->name, "root");
  EXPECT_FALSE(user_by_name("pandotest-no-such-user", sources_));
}

TEST_F(AccountsLookupTest, AnAnswerForAnotherKeyIsRefused) {
  FakeGetent("echo 'root:x:0:0:root:/root:/bin/bash'; echo 'root:x:0:'");
  EXPECT_FALSE(user_by_name("pandotest-x", sources_));
  EXPECT_FALSE(user_by_id(4242, sources_));
  EXPECT_FALSE(group_by_name("pandotest-x", sources_));
  EXPECT_FALSE(group_by_id(4242, sources_));
  // A name of digits is an id to getent: its answer for uid 0 is not "0".
  EXPECT_FALSE(user_by_name("0", sources_));
}

TEST_F(AccountsLookupTest, FailuresOfGetentAreNoAccount) {
  FakeGetent("echo 'pandotest-x:x:4000:4000::/:/bin/sh'; exit 1");
  EXPECT_FALSE(user_by_name("pandotest-x", sources_));
  FakeGetent("kill -9 $$");
  EXPECT_FALSE(user_by_name("pandotest-x", sources_));
  FakeGetent("echo garbage");
  EXPECT_FALSE(user_by_name("pandotest-x", sources_));
  sources_.getent = {dir_ + "/missing"};
  EXPECT_FALSE(user_by_name("pandotest-x", sources_));
}

TEST_F(AccountsLookupTest, NamesNoLineCanHoldAreNotPassedToGetent) {
  FakeGetent("exit 2");
  EXPECT_FALSE(user_by_name("a:b", sources_));
  EXPECT_FALSE(user_by_name("a\nb", sources_));
  EXPECT_FALSE(user_by_name("", sources_));
  EXPECT_FALSE(group_by_name("a:b", sources_));
  EXPECT_EQ(Calls(), "");
}

TEST_F(AccountsLookupTest, AGetentThatHangsIsKilledAndReaped) {
  sources_.getent_timeout = 200ms;
  FakeGetent("echo $$ >" + dir_ + "/pid\nexec sleep 3600");
  EXPECT_FALSE(user_by_name("pandotest-x", sources_));
  const pid_t pid = static_cast<pid_t>(std::atoi(Read(dir_ + "/pid").c_str()));
  ASSERT_GT(pid, 0);
  EXPECT_EQ(kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST_F(AccountsLookupTest, AnOversizedAnswerIsRefused) {
  FakeGetent("head -c 2000000 /dev/zero | tr '\\0' a; echo ':x:4000:4000::/:/bin/sh'");
  EXPECT_FALSE(user_by_name("pandotest-x", sources_));
}

}  // namespace
