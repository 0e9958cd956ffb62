#include "daemon/config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace pando::daemon {
namespace {

constexpr const char* kRoles = R"(
core { user: "pando-core" argv: "/bin/sh" }
workspace { user: "pando-workspace" argv: "/usr/bin/node" argv: "{project_root}/x" }
)";

std::string error_of(const std::string& text) {
  try {
    parse_config(text, "test.conf");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsAreFilledIn) {
  const DaemonConfig config = parse_config(kRoles, "test.conf");
  EXPECT_EQ(config.socket_path(), "/run/pando/helper.sock");
  EXPECT_EQ(config.socket_mode(), 0666u);
  EXPECT_EQ(config.max_sessions(), 64u);
  EXPECT_EQ(config.handshake_timeout_ms(), 5000u);
  EXPECT_EQ(config.core().limits().memory_max_bytes(), 4ULL << 30);
  EXPECT_EQ(config.core().limits().pids_max(), 512u);
  EXPECT_EQ(config.core().limits().cpu_max_percent(), 200u);
  EXPECT_EQ(config.workspace().hidden_files_size(), 2);
  EXPECT_EQ(config.workspace().locale(), "C.UTF-8");
  EXPECT_EQ(config.cgroups().parent(), "pando-helper");
  EXPECT_EQ(config.prestarted_sandboxes(), 2u);
  EXPECT_EQ(config.workspace().read_only_paths_size(), 0);
  EXPECT_EQ(config.workspace().project_scan_max_entries(), 1000000u);
  EXPECT_EQ(config.workspace().project_scan_max_depth(), 64u);
}

TEST(Config, ReadOnlyPathsAreNormalizedAndRelative) {
  auto with = [](const std::string& path) {
    return error_of(
        "core { user: \"c\" argv: \"/bin/sh\" }\n"
        "workspace { user: \"w\" argv: \"/bin/sh\" read_only_paths: \".vscode\"\n"
        "  read_only_paths: \"" +
        path + "\" }\n");
  };
  EXPECT_EQ(with(".github/workflows"), "");
  for (const char* bad : {"/etc", "../x", "a/../b", "a//b", "a/", ".", ""}) {
    const std::string error = with(bad);
    EXPECT_NE(error.find("test.conf:3: workspace.read_only_paths[1]"), std::string::npos)
        << bad << ": " << error;
  }
  const std::string zero = error_of(
      "core { user: \"c\" argv: \"/bin/sh\" }\n"
      "workspace { user: \"w\" argv: \"/bin/sh\" project_scan_max_entries: 0 }\n");
  EXPECT_NE(zero.find("workspace.project_scan_max_entries: must be at least 1"), std::string::npos)
      << zero;
}

TEST(Config, SyntaxErrorNamesLineAndColumn) {
  const std::string error = error_of(std::string(kRoles) + "\nmax_sessions: \"many\"\n");
  EXPECT_NE(error.find("test.conf:5:"), std::string::npos) << error;
}

TEST(Config, UnknownFieldIsAnError) {
  const std::string error = error_of(std::string(kRoles) + "env: \"LD_PRELOAD=x\"\n");
  EXPECT_NE(error.find("test.conf:4:"), std::string::npos) << error;
  EXPECT_NE(error.find("env"), std::string::npos) << error;
}

TEST(Config, SemanticErrorNamesLineAndField) {
  const std::string text =
      "max_sessions: 4\n"
      "core { user: \"c\" argv: \"/bin/sh\" }\n"
      "workspace {\n  user: \"w\"\n  argv: \"bin/relative\"\n}\n";
  const std::string error = error_of(text);
  EXPECT_NE(error.find("test.conf:5: workspace.argv[0]"), std::string::npos) << error;
}

TEST(Config, NestedLimitErrorPointsAtItsLine) {
  const std::string text = std::string("core { user: \"c\" argv: \"/bin/sh\" }\n") +
                           "workspace { user: \"w\" argv: \"/bin/sh\"\n" +
                           "  limits {\n    pids_max: 1\n  }\n}\n";
  const std::string error = error_of(text);
  EXPECT_NE(error.find("test.conf:4: workspace.limits.pids_max"), std::string::npos) << error;
}

TEST(Config, MissingRoleIsAnError) {
  EXPECT_NE(error_of("core { user: \"c\" argv: \"/bin/sh\" }").find("workspace"),
            std::string::npos);
  EXPECT_NE(error_of("workspace { user: \"c\" argv: \"/bin/sh\" } core { argv: \"/bin/sh\" }")
                .find("core.user"),
            std::string::npos);
}

TEST(Config, RejectsBadValues) {
  EXPECT_NE(error_of(std::string(kRoles) + "socket_path: \"relative.sock\"").find("socket_path"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kRoles) + "socket_mode: 4095").find("socket_mode"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kRoles) + "log_level: \"loud\"").find("log_level"),
            std::string::npos);
  EXPECT_NE(
      error_of(std::string(kRoles) + "cgroups { parent: \"../escape\" }").find("cgroups.parent"),
      std::string::npos);
  EXPECT_NE(error_of(std::string(kRoles) + "max_sessions: 0").find("max_sessions"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kRoles) + "prestarted_sandboxes: 17").find("prestarted_sandboxes"),
            std::string::npos);
  EXPECT_EQ(error_of(std::string(kRoles) + "prestarted_sandboxes: 0"), "");
  std::string many_paths = "core { user: \"c\" argv: \"/bin/sh\"";
  for (int i = 0; i < 33; ++i) many_paths += " runtime_paths: \"/opt/p" + std::to_string(i) + "\"";
  EXPECT_NE(error_of(many_paths + " } workspace { user: \"w\" argv: \"/bin/sh\" }")
                .find("core.runtime_paths"),
            std::string::npos);
  EXPECT_NE(error_of("core { user: \"c\" argv: \"/bin/sh\" hidden_files: \"a/b\" } " +
                     std::string("workspace { user: \"w\" argv: \"/bin/sh\" }"))
                .find("core.hidden_files[0]"),
            std::string::npos);
}

TEST(Config, LoadRefusesFilesOthersCanWrite) {
  ASSERT_EQ(geteuid(), 0u) << "the ownership rule applies to a daemon running as root";
  char path[] = "/tmp/pandotest-conf-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, kRoles, strlen(kRoles)), static_cast<ssize_t>(strlen(kRoles)));
  close(fd);
  chmod(path, 0644);
  EXPECT_NO_THROW(load_config(path));
  chmod(path, 0666);
  EXPECT_THROW(load_config(path), ConfigError);
  chmod(path, 0644);
  chown(path, 1, 1);
  EXPECT_THROW(load_config(path), ConfigError);
  unlink(path);
}

TEST(Config, ShippedExamplesParse) {
  EXPECT_NO_THROW(load_config(PANDO_SOURCE_DIR "/examples/pando-helperd.conf"));
  EXPECT_NO_THROW(load_config(PANDO_SOURCE_DIR "/examples/shell-demo.conf"));
  EXPECT_NO_THROW(load_config(PANDO_SOURCE_DIR "/examples/mcp-filesystem.conf"));
}

}  // namespace
}  // namespace pando::daemon
