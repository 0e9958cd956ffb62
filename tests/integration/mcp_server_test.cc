// Issue 12: a real MCP server behind pando-helper. The reference filesystem server
// (examples/mcp-filesystem, installed by scripts/install-mcp-example.sh from its lock file)
// runs as the role, and a real MCP client (the official SDK, tests/mcp) drives it through
// `pando-helper security launch` as the unprivileged caller. Both npm installs are cached under
// /var/cache/pando-helper-tests/mcp, keyed by their lock file's hash; the registry is only
// needed when a lock file changed. Skipped, with the reason, when node is missing or too old
// for the pinned packages, or when the registry cannot be reached; any other install failure
// fails the test.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

extern char** environ;

namespace pando::itest {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kCache = "/var/cache/pando-helper-tests/mcp";
constexpr const char* kStamp = ".pando-lock-sha256";  // as scripts/install-mcp-example.sh
constexpr const char* kSecret = "outside-the-project-secret";
const TestUser kRoot{"root", 0, 0};

std::string source(const std::string& relative) {
  return std::string(PANDO_SOURCE_DIR) + "/" + relative;
}
std::string server_prefix() { return std::string(kCache) + "/filesystem-server"; }
std::string client_prefix() { return std::string(kCache) + "/sdk-client"; }

bool installed(const std::string& prefix, const std::string& lock) {
  return read_file(prefix + "/" + kStamp) == sha256(read_file(lock)) + "\n";
}

// The test's own environment (a registry mirror or proxy set for npm applies), with npm's
// cache and logs in `npm_cache` so that nothing stays behind in root's home.
std::map<std::string, std::string> npm_environment(const std::string& npm_cache) {
  std::map<std::string, std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string item = *entry;
    const auto eq = item.find('=');
    if (eq != std::string::npos) env[item.substr(0, eq)] = item.substr(eq + 1);
  }
  env["npm_config_cache"] = npm_cache;
  env["npm_config_update_notifier"] = "false";
  if (env.count("PATH") == 0) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  return env;
}

// The lines of a failed npm command that say why (its error code and the failed request).
std::string npm_error(const RunResult& result) {
  if (result.exit_code == 124) return "timed out";
  std::istringstream in(result.out + result.err);
  std::string why;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("npm error code ") || line.starts_with("npm error FetchError")) {
      why += (why.empty() ? "" : "; ") + line.substr(10);
    }
  }
  return why.empty() ? "exited " + std::to_string(result.exit_code) + ": " + result.out + result.err
                     : why;
}

RunResult as_root(const std::string& script, const std::map<std::string, std::string>& env,
                  std::chrono::seconds timeout) {
  RunOptions options;
  options.env = env;
  options.timeout = timeout;
  return run_as(kRoot, {"/bin/sh", "-c", script}, options);
}

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Prepared {
  std::string skip;     // why the example cannot run on this host
  std::string failure;  // an install failed while the registry answered
};

Prepared prepare() {
  if (access("/usr/bin/node", X_OK) != 0) {
    return {"node is not installed at /usr/bin/node (the example config runs it)", ""};
  }
  const RunResult version = run_as(kRoot, {"/usr/bin/node", "-p", "process.versions.node"});
  if (version.exit_code != 0 || std::atoi(version.out.c_str()) < 20) {
    return {"/usr/bin/node is " + version.out + version.err +
                ", the pinned packages need node 20 or later",
            ""};
  }
  const std::string server_lock = source("examples/mcp-filesystem/package-lock.json");
  const std::string client_lock = source("tests/mcp/package-lock.json");
  const bool cached =
      installed(server_prefix(), server_lock) && installed(client_prefix(), client_lock);
  TempDir npm_home;
  const auto env = npm_environment(npm_home.path() + "/npm-cache");
  if (!cached) {
    if (as_root("command -v npm", env, 10s).exit_code != 0) {
      return {
          "npm is not installed and the example is not installed yet under " + std::string(kCache),
          ""};
    }
    // Unreachable and broken look alike in npm ci's exit status; a ping first tells them apart.
    const RunResult ping =
        as_root("timeout 30 npm ping --fetch-retries=0 --fetch-timeout=15000", env, 60s);
    if (ping.exit_code != 0) {
      return {"the npm registry cannot be reached: npm ping " + npm_error(ping), ""};
    }
  }
  const auto started = std::chrono::steady_clock::now();
  // Run even when cached: the script's idempotent path (ownership and modes set again).
  const RunResult server = as_root(
      quoted(source("scripts/install-mcp-example.sh")) + " " + quoted(server_prefix()), env, 600s);
  if (server.exit_code != 0) {
    return {"", "scripts/install-mcp-example.sh failed:\n" + server.out + server.err};
  }
  // The client's SDK: the same lock-file install (npm ci, integrity-checked, no scripts),
  // into a staging directory that replaces the old install whole.
  const std::string client_install =
      "set -eu; umask 022; src=" + quoted(source("tests/mcp")) +
      "; dest=" + quoted(client_prefix()) + "; hash=" + sha256(read_file(client_lock)) +
      "; [ \"$(cat \"$dest/" + kStamp +
      "\" 2>/dev/null)\" = \"$hash\" ] && exit 0; "
      "staging=$(mktemp -d \"$dest.new.XXXXXX\"); trap 'rm -rf \"$staging\"' EXIT; "
      "cp \"$src/package.json\" \"$src/package-lock.json\" \"$staging/\"; "
      "(cd \"$staging\" && npm ci --omit=dev --ignore-scripts --engine-strict --no-audit "
      "--no-fund); echo \"$hash\" >\"$staging/" +
      kStamp + "\"; chmod 0755 \"$staging\"; rm -rf \"$dest\"; mv -T \"$staging\" \"$dest\"";
  const RunResult client = as_root(client_install, env, 600s);
  if (client.exit_code != 0) {
    return {"", "npm ci of tests/mcp failed (the registry answered):\n" + client.out + client.err};
  }
  if (cached) return {};
  std::cout << "npm installs of the MCP example and client took "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - started)
                   .count()
            << " ms\n";
  return {};
}

std::string role_text(const std::string& prefix) {
  return "  argv: \"/usr/bin/node\"\n  argv: \"" + prefix +
         "/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js\"\n"
         "  argv: \"{project_root}\"\n  runtime_paths: \"" +
         prefix + "\"\n";
}

class McpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
    const Prepared prepared = prepare();
    if (!prepared.skip.empty()) GTEST_SKIP() << prepared.skip;
    ASSERT_EQ(prepared.failure, "");
    DaemonOptions options;
    options.core_argv_text = role_text(server_prefix());
    options.workspace_argv_text = role_text(server_prefix());
    daemon_ = std::make_unique<Daemon>(options);
    project_ = daemon_->dir().make_dir("proj", caller());
    // A sibling of the project that the caller may read on the host.
    daemon_->dir().make_dir("outside", caller());
    outside_ = daemon_->dir().write_file("outside/secret.txt", kSecret, caller());
    // The client script beside a link to the SDK install: ES modules resolve their imports
    // from the script's own directory.
    const std::string dir = daemon_->dir().make_dir("client", kRoot);
    fs::copy_file(source("tests/mcp/mcp_client.mjs"), dir + "/mcp_client.mjs");
    fs::create_directory_symlink(client_prefix() + "/node_modules", dir + "/node_modules");
    client_script_ = dir + "/mcp_client.mjs";
  }

  // The client's result lines; its stderr (the server's and pando-helper's) on failure.
  RunResult drive(const std::string& role, const std::string& mode) {
    RunOptions options;
    options.env = {{"PATH", "/usr/bin:/bin"}};
    options.timeout = 120s;
    RunResult result = run_as(caller(),
                              {"/usr/bin/node", client_script_, daemon_->client(),
                               daemon_->socket_path(), role, project_, outside_, mode},
                              options);
    std::cout << result.out;
    return result;
  }

  std::unique_ptr<Daemon> daemon_;
  std::string project_;
  std::string outside_;
  std::string client_script_;
};

TEST_F(McpServerTest, WorkspaceWritesAsTheCallerReadsBackAndIsRefusedOutside) {
  const RunResult result = drive("workspace", "workspace");
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("ok connect secure-filesystem-server"), std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("ok tools "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("ok write "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("ok read "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("ok outside-refused Access denied"), std::string::npos)
      << result.out << result.err;
  EXPECT_EQ(result.out.find(kSecret), std::string::npos) << result.out;

  const std::string written = project_ + "/mcp-written.txt";
  struct stat st {};
  ASSERT_EQ(lstat(written.c_str(), &st), 0) << written << " was not written";
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_uid, caller().uid) << "lands owned by the caller on the host";
  EXPECT_EQ(st.st_gid, caller().gid);
  EXPECT_EQ(read_file(written), "written through pando-helper by the MCP SDK (workspace)\n");
}

TEST_F(McpServerTest, CoreServesTheProjectReadOnly) {
  const RunResult result = drive("core", "core");
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("ok tools "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("ok write-refused "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("ok outside-refused "), std::string::npos) << result.out;
  EXPECT_FALSE(fs::exists(project_ + "/mcp-written.txt"));
}

// The server's own check follows the client's MCP roots; a client offering "/" lifts it.
// What is outside the project is still not in the role's view.
TEST_F(McpServerTest, ClientRootsWideningTheServerStillSeeOnlyTheProject) {
  const RunResult result = drive("workspace", "roots");
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("ok roots Allowed directories: /"), std::string::npos)
      << result.out << result.err;
  EXPECT_NE(result.out.find("ok outside-refused "), std::string::npos) << result.out;
  EXPECT_EQ(result.out.find("Access denied"), std::string::npos)
      << "refused by the sandbox's view, not by the server: " << result.out;
  EXPECT_EQ(result.out.find(kSecret), std::string::npos) << result.out;
}

// What the daemon binds into the sandbox is root's alone (it refuses runtime paths anyone else
// could change), and the script puts that back on an install changed since.
TEST_F(McpServerTest, InstallIsRootsAloneAndTheScriptSealsItAgain) {
  const std::string dir = server_prefix() + "/node_modules/@modelcontextprotocol/server-filesystem";
  const std::string file = dir + "/dist/index.js";
  ASSERT_EQ(chown(file.c_str(), caller().uid, caller().gid), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  TempDir npm_home;
  const RunResult again =
      as_root(quoted(source("scripts/install-mcp-example.sh")) + " " + quoted(server_prefix()),
              npm_environment(npm_home.path() + "/npm-cache"), 120s);
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("already installed from this lock file"), std::string::npos)
      << again.out;

  size_t entries = 0;
  for (const auto& entry : fs::recursive_directory_iterator(server_prefix())) {
    struct stat st {};
    ASSERT_EQ(lstat(entry.path().c_str(), &st), 0) << entry.path();
    EXPECT_EQ(st.st_uid, 0u) << entry.path();
    EXPECT_EQ(st.st_gid, 0u) << entry.path();
    if (!S_ISLNK(st.st_mode)) {
      EXPECT_EQ(st.st_mode & 022, 0u) << entry.path();
    }
    ++entries;
  }
  EXPECT_GT(entries, 100u);
  for (fs::path up = server_prefix(); up != up.root_path(); up = up.parent_path()) {
    struct stat st {};
    ASSERT_EQ(lstat(up.c_str(), &st), 0) << up;
    EXPECT_EQ(st.st_uid, 0u) << up;
    EXPECT_EQ(st.st_mode & 022, 0u) << up;
  }
}

}  // namespace
}  // namespace pando::itest
