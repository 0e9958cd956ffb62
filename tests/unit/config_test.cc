#include "daemon/config.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "daemon/cgroups.h"
#include "proto/error.h"

namespace pando::daemon {
namespace {

constexpr const char* kRoles = R"(
core { user: "pando-core" argv: "/bin/sh" }
workspace { user: "pando-workspace" argv: "/usr/bin/node" argv: "{project_root}/x" }
)";

std::string error_of(const std::string& text) {
  try {
    parse_config(text, "test.conf");
  } catch (const pando::Error& e) {
    EXPECT_EQ(e.code(), pando::helper::v1::ERROR_CONFIG_INVALID) << e.what();
    return e.what();
  }
  return "";
}

// The code load_config refuses `path` with; ERROR_UNSPECIFIED when it loads.
pando::helper::v1::ErrorCode load_error(const std::string& path) {
  try {
    load_config(path);
  } catch (const pando::Error& e) {
    return e.code();
  }
  return pando::helper::v1::ERROR_UNSPECIFIED;
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
  EXPECT_EQ(std::vector<std::string>(config.workspace().hidden_files().begin(),
                                     config.workspace().hidden_files().end()),
            (std::vector<std::string>{".env", ".env.*", ".env~"}));
  EXPECT_EQ(config.git_path(), "/usr/bin/git");
  EXPECT_EQ(config.workspace().locale(), "C.UTF-8");
  EXPECT_EQ(config.cgroups().parent(), "pando-helper");
  EXPECT_EQ(config.prestarted_sandboxes(), 2u);
  EXPECT_EQ(config.workspace().read_only_paths_size(), 0);
  // Twice one session's defaults: two sessions' worth per caller.
  EXPECT_EQ(config.caller_limits().memory_max_bytes(), 8ULL << 30);
  EXPECT_EQ(config.caller_limits().pids_max(), 1024u);
  EXPECT_EQ(config.caller_limits().cpu_max_percent(), 400u);
  EXPECT_EQ(config.max_pending_per_uid(), 8u);
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
  // The walk's old bounds still load (no project is refused for its size any more).
  EXPECT_EQ(error_of("core { user: \"c\" argv: \"/bin/sh\" }\n"
                     "workspace { user: \"w\" argv: \"/bin/sh\" project_scan_max_entries: 0\n"
                     "  project_scan_max_depth: 0 }\n"),
            "");
}

TEST(Config, CallerLimitsMustHoldOneSessionOfEachRole) {
  EXPECT_EQ(error_of(std::string(kRoles) + "caller_limits { pids_max: 512 }"), "");
  EXPECT_NE(error_of(std::string(kRoles) + "caller_limits {\n  pids_max: 100\n}")
                .find("test.conf:5: caller_limits.pids_max: must be at least 512"),
            std::string::npos)
      << error_of(std::string(kRoles) + "caller_limits {\n  pids_max: 100\n}");
  EXPECT_NE(error_of(std::string(kRoles) + "caller_limits { memory_max_bytes: 1048576 }")
                .find("caller_limits.memory_max_bytes: must be at least 4294967296"),
            std::string::npos);
  // A v1 cpu quota above its parent's is refused by the kernel (EINVAL): caught here instead.
  const std::string text =
      "core { user: \"c\" argv: \"/bin/sh\" limits { cpu_max_percent: 300 } }\n"
      "workspace { user: \"w\" argv: \"/bin/sh\" }\n"
      "caller_limits { cpu_max_percent: 250 }\n";
  EXPECT_NE(error_of(text).find("test.conf:3: caller_limits.cpu_max_percent: must be at least 300"),
            std::string::npos)
      << error_of(text);
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
  // --check-config refuses each of these as the daemon's cgroup setup refuses it at start, for
  // the same reason (both ask valid_parent): a config that passes the check must not stop the
  // daemon.
  for (const std::string& parent :
       std::vector<std::string>{"../escape", "/absolute", "a//b", "a/./b", "with space", "a:b",
                                "trailing/", std::string(257, 'a')}) {
    EXPECT_NE(error_of(std::string(kRoles) + "cgroups { parent: \"" + parent + "\" }")
                  .find(std::string("cgroups.parent: ") + cgroup_text::kValidParentRule),
              std::string::npos)
        << parent;
    pando::helper::config::v1::CgroupConfig cgroups;
    cgroups.set_parent(parent);
    try {
      CgroupManager::detect(cgroups);
      ADD_FAILURE() << "the daemon's start takes " << parent;
    } catch (const pando::Error& e) {
      EXPECT_EQ(e.code(), pando::helper::v1::ERROR_CONFIG_INVALID) << parent;
      EXPECT_NE(std::string(e.what()).find(cgroup_text::kValidParentRule), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(error_of(std::string(kRoles) + "cgroups { parent: \"system.slice/pando_helper-1\" }"),
            "");
  EXPECT_NE(error_of(std::string(kRoles) + "max_sessions: 0").find("max_sessions"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kRoles) + "prestarted_sandboxes: 17").find("prestarted_sandboxes"),
            std::string::npos);
  EXPECT_EQ(error_of(std::string(kRoles) + "prestarted_sandboxes: 0"), "");
  EXPECT_NE(error_of(std::string(kRoles) + "max_pending_per_uid: 0").find("max_pending_per_uid"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kRoles) + "max_pending_per_uid: 65").find("max_pending_per_uid"),
            std::string::npos);
  EXPECT_EQ(error_of(std::string(kRoles) + "max_pending_per_uid: 64"), "");
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

// A root-owned 0755 directory in /tmp, as root's mkdtemp() + chmod() leaves it; removed with
// everything in it.
class RootDir {
 public:
  RootDir() {
    char templ[] = "/tmp/pandotest-conf-XXXXXX";
    if (mkdtemp(templ) == nullptr) std::abort();
    path_ = templ;
    chmod(path_.c_str(), 0755);
  }
  ~RootDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string make(const std::string& name, mode_t mode, uid_t owner = 0) const {
    const std::string path = path_ + "/" + name;
    if (mkdir(path.c_str(), mode) != 0 || chmod(path.c_str(), mode) != 0 ||
        chown(path.c_str(), owner, owner) != 0) {
      std::abort();
    }
    return path;
  }

 private:
  std::string path_;
};

std::string with_core_runtime_path(const std::string& path) {
  return "core {\n  user: \"c\"\n  argv: \"/bin/sh\"\n  runtime_paths: \"/usr\"\n  runtime_paths: "
         "\"" +
         path + "\"\n}\nworkspace { user: \"w\" argv: \"/bin/sh\" }\n";
}

TEST(Config, RuntimePathsMustBeRootsAloneAllTheWayUp) {
  ASSERT_EQ(geteuid(), 0u) << "the fixtures need root to own them";
  const RootDir dir;
  // /tmp is sticky: others cannot rename or remove root's entries in it, so a root-owned
  // 0755 directory there is as safe as one under /usr.
  EXPECT_EQ(error_of(with_core_runtime_path(dir.make("ok", 0755))), "");
  // Missing, where only root can create it: the launch reports it, the config is fine.
  EXPECT_EQ(error_of(with_core_runtime_path(dir.path() + "/ok/missing")), "");

  const std::string group_writable = dir.make("gw", 0775);
  std::string error = error_of(with_core_runtime_path(group_writable + "/sub"));
  EXPECT_NE(error.find("test.conf:5: core.runtime_paths[1]: " + group_writable +
                       " is writable by group or others"),
            std::string::npos)
      << error;
  error = error_of(with_core_runtime_path(dir.make("user", 0755, 1)));
  EXPECT_NE(error.find("core.runtime_paths[1]: " + dir.path() + "/user is not owned by root"),
            std::string::npos)
      << error;
  // The sticky bit does not stop another user from creating a name first.
  const std::string missing_in_tmp = dir.path() + "-missing";
  error = error_of(with_core_runtime_path(missing_in_tmp));
  EXPECT_NE(error.find("core.runtime_paths[1]: " + missing_in_tmp +
                       " does not exist and /tmp is writable by group or others"),
            std::string::npos)
      << error;
  // A sticky world-writable directory is not safe as the path itself.
  error = error_of(with_core_runtime_path("/tmp"));
  EXPECT_NE(error.find("core.runtime_paths[1]: /tmp is writable by group or others"),
            std::string::npos)
      << error;

  // Symbolic links: the link must be root's, and so must everything up to where it leads.
  const std::string user_dir = dir.make("target", 0755, 1);
  ASSERT_EQ(symlink(user_dir.c_str(), (dir.path() + "/to-user").c_str()), 0);
  error = error_of(with_core_runtime_path(dir.path() + "/to-user"));
  EXPECT_NE(error.find(user_dir + " is not owned by root"), std::string::npos) << error;
  ASSERT_EQ(symlink("ok", (dir.path() + "/to-ok").c_str()), 0);
  EXPECT_EQ(error_of(with_core_runtime_path(dir.path() + "/to-ok")), "");
  ASSERT_EQ(lchown((dir.path() + "/to-ok").c_str(), 1, 1), 0);
  error = error_of(with_core_runtime_path(dir.path() + "/to-ok"));
  EXPECT_NE(error.find(dir.path() + "/to-ok is not owned by root"), std::string::npos) << error;
  // One rule also where a link leads: /tmp on the way is fine, as the path itself it is not.
  ASSERT_EQ(symlink("/tmp", (dir.path() + "/to-tmp").c_str()), 0);
  const std::string via_tmp = dir.path() + "/to-tmp/" + dir.path().substr(5) + "/ok";
  EXPECT_EQ(error_of(with_core_runtime_path(via_tmp)), "");
  error = error_of(with_core_runtime_path(dir.path() + "/to-tmp"));
  EXPECT_NE(error.find("core.runtime_paths[1]: /tmp is writable by group or others"),
            std::string::npos)
      << error;
  ASSERT_EQ(symlink("nowhere", (dir.path() + "/dangling").c_str()), 0);
  error = error_of(with_core_runtime_path(dir.path() + "/dangling/x"));
  EXPECT_NE(error.find(dir.path() + "/dangling does not resolve"), std::string::npos) << error;
}

TEST(Config, ProgramsMustBeRootsAloneAllTheWayUp) {
  ASSERT_EQ(geteuid(), 0u) << "the fixtures need root to own them";
  const RootDir dir;
  const std::string bin = dir.make("bin", 0755);
  const std::string program = bin + "/tool";
  ASSERT_EQ(close(open(program.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0755)), 0);
  const auto roles = [&](const std::string& workspace_program) {
    return "core { user: \"c\" argv: \"/bin/sh\" }\nworkspace {\n  user: \"w\"\n  argv: \"" +
           workspace_program + "\"\n}\n";
  };
  EXPECT_EQ(error_of(roles(program)), "");
  ASSERT_EQ(chmod(program.c_str(), 0757), 0);
  std::string error = error_of(roles(program));
  EXPECT_NE(
      error.find("test.conf:4: workspace.argv[0]: " + program + " is writable by group or others"),
      std::string::npos)
      << error;
  ASSERT_EQ(chmod(program.c_str(), 0755), 0);
  ASSERT_EQ(chown(bin.c_str(), 1, 1), 0);
  error = error_of(roles(program));
  EXPECT_NE(error.find("workspace.argv[0]: " + bin + " is not owned by root"), std::string::npos)
      << error;
  // The sandbox helper runs as root: the same rule.
  error = error_of(std::string(kRoles) + "sandbox_helper_path: \"" + program + "\"\n");
  EXPECT_NE(error.find("test.conf:4: sandbox_helper_path: " + bin + " is not owned by root"),
            std::string::npos)
      << error;
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
  EXPECT_EQ(load_error(path), pando::helper::v1::ERROR_CONFIG_INVALID);
  chmod(path, 0644);
  chown(path, 1, 1);
  EXPECT_EQ(load_error(path), pando::helper::v1::ERROR_CONFIG_INVALID);
  unlink(path);
}

TEST(Config, LoadRefusesAMissingFileAndADirectory) {
  EXPECT_EQ(load_error("/nonexistent/pandotest.conf"), pando::helper::v1::ERROR_CONFIG_INVALID);
  char dir[] = "/tmp/pandotest-conf-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  EXPECT_EQ(load_error(dir), pando::helper::v1::ERROR_CONFIG_INVALID);
  rmdir(dir);
}

TEST(Config, ShippedExamplesParse) {
  EXPECT_NO_THROW(load_config(PANDO_SOURCE_DIR "/examples/pando-helperd.conf"));
  EXPECT_NO_THROW(load_config(PANDO_SOURCE_DIR "/examples/shell-demo.conf"));
  EXPECT_NO_THROW(load_config(PANDO_SOURCE_DIR "/examples/mcp-filesystem.conf"));
}

}  // namespace
}  // namespace pando::daemon
