// Each value parse_config() refuses that config_test.cc does not already cover: the error names
// the file, the line and the field, and says what the field must be.

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

#include "daemon/config.h"

namespace pando::daemon {
namespace {

// Line 1 is the field under test, so every error is on line 1 unless it is inside a role.
std::string error_of(const std::string& first_line, const std::string& core_fields = "") {
  const std::string text = first_line + "\n" + "core { user: \"c\" argv: \"/bin/sh\"\n" +
                           core_fields + "\n}\n" + "workspace { user: \"w\" argv: \"/bin/sh\" }\n";
  try {
    parse_config(text, "test.conf");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigErrors, DaemonFieldsOutOfRange) {
  struct Case {
    std::string line;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"max_sessions_per_uid: 0", "test.conf:1: max_sessions_per_uid: must be at least 1"},
      {"handshake_timeout_ms: 9",
       "test.conf:1: handshake_timeout_ms: must be between 10 and 600000"},
      {"handshake_timeout_ms: 600001",
       "test.conf:1: handshake_timeout_ms: must be between 10 and 600000"},
      {"log_file: \"logs/helperd.log\"",
       "test.conf:1: log_file: must be an absolute, normalized path"},
      {"log_file: \"/var/log/../helperd.log\"",
       "test.conf:1: log_file: must be an absolute, normalized path"},
      {"sandbox_helper_path: \"pando-helper-sandbox\"",
       "test.conf:1: sandbox_helper_path: must be an absolute, normalized path"},
      {"git_path: \"git\"", "test.conf:1: git_path: must be an absolute, normalized path"},
      // The git the daemon asks, as the caller, must be root's alone like what roles run.
      {"git_path: \"/tmp/pando-no-such-dir/git\"",
       "test.conf:1: git_path: /tmp/pando-no-such-dir does not exist and /tmp is writable by "
       "group or others: each directory on the way and the path itself must be owned by root "
       "and writable only by root"},
      {"cgroups { parent: \"/pando\" }",
       "test.conf:1: cgroups.parent: must be a relative path of at most 256 letters, digits, '-', "
       "'_' and '.', without empty, '.' or '..' parts"},
      {"cgroups { parent: \"a/../b\" }",
       "test.conf:1: cgroups.parent: must be a relative path of at most 256 letters, digits, '-', "
       "'_' and '.', without empty, '.' or '..' parts"},
      {"cgroups { parent: \"\" }",
       "test.conf:1: cgroups.parent: must be a relative path of at most 256 letters, digits, '-', "
       "'_' and '.', without empty, '.' or '..' parts"},
  };
  for (const Case& c : cases) EXPECT_EQ(error_of(c.line), c.error) << c.line;
  // The bounds themselves are accepted.
  EXPECT_EQ(error_of("handshake_timeout_ms: 10"), "");
  EXPECT_EQ(error_of("handshake_timeout_ms: 600000"), "");
  EXPECT_EQ(error_of("log_file: \"/var/log/pando-helperd.log\""), "");
}

TEST(ConfigErrors, RoleFieldsOutOfRange) {
  struct Case {
    std::string fields;
    std::string error;
  };
  // The role's fields start on line 3 of the file.
  const std::vector<Case> cases = {
      {"runtime_paths: \"/opt\" runtime_paths: \"opt/node\"",
       "test.conf:3: core.runtime_paths[1]: must be an absolute, normalized path"},
      {"locale: \"C.UTF-8\\nLD_PRELOAD=/x\"",
       "test.conf:3: core.locale: must not contain '=', NUL or newlines"},
      {"locale: \"a=b\"", "test.conf:3: core.locale: must not contain '=', NUL or newlines"},
      {"limits { memory_max_bytes: 16777215 }",
       "test.conf:3: core.limits.memory_max_bytes: must be at least 16 MiB"},
      {"limits { cpu_max_percent: 0 }",
       "test.conf:3: core.limits.cpu_max_percent: must be at least 1"},
      {"limits { rlimit_nofile: 15 }",
       "test.conf:3: core.limits.rlimit_nofile: must be at least 16"},
  };
  for (const Case& c : cases) EXPECT_EQ(error_of("", c.fields), c.error) << c.fields;
  EXPECT_EQ(error_of("", "limits { memory_max_bytes: 16777216 rlimit_nofile: 16 }"), "");
}

TEST(ConfigErrors, AtMostSixtyFourReadOnlyPaths) {
  std::string fields;
  for (int i = 0; i < 64; ++i) fields += "read_only_paths: \"d" + std::to_string(i) + "\" ";
  EXPECT_EQ(error_of("", fields), "");
  EXPECT_EQ(error_of("", fields + "read_only_paths: \"one-more\""),
            "test.conf:3: core.read_only_paths: at most 64 read-only paths");
}

}  // namespace
}  // namespace pando::daemon
