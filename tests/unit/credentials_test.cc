#include "daemon/sandbox/credentials.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <linux/securebits.h>
#include <pwd.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <string>

#include "proto/error.h"
#include "tests/unit/child_process.h"

namespace {

using pando::Error;
using pando::helper::sandbox::v1::IdMapping;
using pando::sandbox::drop_to_role_user;
using pando::testing::Child;
using pando::testing::RunInChild;

// An id no account on a test machine uses.
constexpr uint32_t kRoleId = 64123;

IdMapping role_ids(uint32_t uid = kRoleId, uint32_t gid = kRoleId) {
  IdMapping ids;
  ids.set_caller_uid(1000);
  ids.set_caller_gid(1000);
  ids.set_role_uid(uid);
  ids.set_role_gid(gid);
  return ids;
}

std::map<std::string, std::string> read_status() {
  std::map<std::string, std::string> fields;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    const size_t first = value.find_first_not_of(" \t");
    const size_t last = value.find_last_not_of(" \t");
    value = first == std::string::npos ? "" : value.substr(first, last - first + 1);
    fields[line.substr(0, colon)] = value;
  }
  return fields;
}

class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "credentials tests must run as root";
    ASSERT_EQ(getpwuid(kRoleId), nullptr) << "uid " << kRoleId << " is in use on this machine";
    ASSERT_EQ(getgrgid(kRoleId), nullptr) << "gid " << kRoleId << " is in use on this machine";
  }
};

TEST_F(CredentialsTest, DropsEveryPrivilege) {
  const auto result = RunInChild([](const Child& child) {
    if (setgroups(1, std::array<gid_t, 1>{0}.data()) != 0) return child.FailErrno("setgroups");
    drop_to_role_user(role_ids());

    auto status = read_status();
    const std::string ids = "64123\t64123\t64123\t64123";
    if (status["Uid"] != ids) return child.Fail("Uid: " + status["Uid"]);
    if (status["Gid"] != ids) return child.Fail("Gid: " + status["Gid"]);
    if (status["Groups"] != "") return child.Fail("Groups: " + status["Groups"]);
    for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
      if (status[set] != "0000000000000000")
        return child.Fail(std::string(set) + ": " + status[set]);
    }
    if (status["NoNewPrivs"] != "1") return child.Fail("NoNewPrivs: " + status["NoNewPrivs"]);

    const int expected_bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                              SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                              SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    const int bits = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
    if (bits != expected_bits) return child.Fail("securebits: " + std::to_string(bits));

    if (setuid(0) == 0) return child.Fail("setuid(0) succeeded after the drop");
    if (setgid(0) == 0) return child.Fail("setgid(0) succeeded after the drop");
    if (prctl(PR_SET_SECUREBITS, 0, 0, 0, 0) == 0) return child.Fail("securebits unlocked");
    if (prctl(PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0) == 0) return child.Fail("no_new_privs cleared");

    cap_t raise = cap_init();
    const cap_value_t setuid_cap[] = {CAP_SETUID};
    cap_set_flag(raise, CAP_PERMITTED, 1, setuid_cap, CAP_SET);
    const int raised = cap_set_proc(raise);
    cap_free(raise);
    if (raised == 0) return child.Fail("CAP_SETUID could be raised again");
    return 0;
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST_F(CredentialsTest, RefusesRootAsRole) {
  const auto result = RunInChild([](const Child& child) {
    for (const auto& ids : {role_ids(0, kRoleId), role_ids(kRoleId, 0)}) {
      try {
        drop_to_role_user(ids);
        return child.Fail("a role with uid or gid 0 was accepted");
      } catch (const Error& e) {
        if (e.code() != pando::helper::v1::ERROR_LAUNCH_FAILED) return child.Fail(e.what());
      }
      if (geteuid() != 0) return child.Fail("credentials changed before refusing");
    }
    return 0;
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST_F(CredentialsTest, FailsLoudlyWithoutPrivilege) {
  const auto result = RunInChild([](const Child& child) {
    drop_to_role_user(role_ids());
    try {
      drop_to_role_user(role_ids(kRoleId + 1, kRoleId + 1));
    } catch (const Error& e) {
      return 0;
    }
    return child.Fail("a second drop without privilege did not throw");
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

}  // namespace
