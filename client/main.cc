// pando-helper: the unprivileged client. See README.md.

#include <google/protobuf/stubs/logging.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "client/connection.h"
#include "client/launch.h"
#include "client/selftest.h"
#include "client/setup_users.h"
#include "client/status.h"
#include "common/json_log.h"
#include "proto/error.h"

namespace {

using pando::client::kExitUsage;

constexpr const char* kUsage =
    "usage:\n"
    "  pando-helper security launch --role <core|workspace> --project-root <path> --stdio "
    "[--socket PATH]\n"
    "  pando-helper security status [--project-root <path>] [--socket PATH]\n"
    "  pando-helper security selftest [--role core|workspace] [--project-root <path>] [--json] "
    "[--socket PATH]\n"
    "  pando-helper security setup-users [--core-user NAME] [--workspace-user NAME]   (as root)\n"
    "  pando-helper --version\n"
    "`pando-helper security <command> --help` describes one command.\n"
    "The socket defaults to $PANDO_HELPER_SOCKET, then /run/pando/helper.sock.\n";

int usage_error(const std::string& message) {
  std::cerr << "pando-helper: " << message << "\n" << kUsage;
  return kExitUsage;
}

bool asks_for_help(const std::vector<std::string>& args) {
  return std::find_if(args.begin(), args.end(), [](const std::string& arg) {
           return arg == "--help" || arg == "-h";
         }) != args.end();
}

// Parses "--name value" and "--name=value" options; `flags` take no value.
std::optional<std::map<std::string, std::string>> parse_options(
    const std::vector<std::string>& args, const std::vector<std::string>& valued,
    const std::vector<std::string>& flags, std::string& error) {
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::optional<std::string> value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const bool takes_value = std::find(valued.begin(), valued.end(), name) != valued.end();
    const bool is_flag = std::find(flags.begin(), flags.end(), name) != flags.end();
    if (!takes_value && !is_flag) {
      error = "unknown argument " + args[i];
      return std::nullopt;
    }
    if (out.count(name) != 0) {
      error = name + " given twice";
      return std::nullopt;
    }
    if (is_flag) {
      if (value) {
        error = name + " takes no value";
        return std::nullopt;
      }
      out[name] = "";
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size()) {
        error = name + " needs a value";
        return std::nullopt;
      }
      value = args[++i];
    }
    out[name] = *value;
  }
  return out;
}

void init_client_log() {
  const char* debug = std::getenv("PANDO_DEBUG");
  if (debug != nullptr && std::string(debug) == "0") return;
  std::string path;
  if (const char* file = std::getenv("PANDO_GATEWAY_LOG_FILE"); file != nullptr && *file != '\0') {
    path = file;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    const std::string dir = std::string(home) + "/.pando-data";
    mkdir(dir.c_str(), 0700);
    path = dir + "/gateway-debug.jsonl";
  } else {
    return;
  }
  // Opened once: spdlog's own file sink retries a failed open for 50 ms, on
  // every launch. Without a log file the client runs silently: the session's
  // stdio is the agent's.
  pando::log::init_file_once("security_helper_client", path, spdlog::level::info);
}

// What the user typed, resolved as the user (relative to the working
// directory, symbolic links followed: Fedora Silverblue's /home -> var/home,
// ~/src -> /data/src). The daemon still refuses any symlink in what it
// receives; a path that does not resolve is sent as typed, made absolute, so
// that the daemon's answer names the problem.
std::string resolved_project_root(const std::string& path) {
  if (path.empty()) return path;
  if (char* real = realpath(path.c_str(), nullptr); real != nullptr) {
    std::string resolved = real;
    std::free(real);
    return resolved;
  }
  if (path.front() == '/') return path;
  std::vector<char> cwd(4096);
  if (getcwd(cwd.data(), cwd.size()) == nullptr) return path;
  const std::string base = cwd.data();
  if (path == ".") return base;
  return base == "/" ? "/" + path : base + "/" + path;
}

using Options = std::map<std::string, std::string>;

std::optional<std::string> socket_option(const Options& options) {
  if (options.count("--socket") == 0) return std::nullopt;
  return options.at("--socket");
}

int launch_command(const std::vector<std::string>& args) {
  std::string error;
  const auto options =
      parse_options(args, {"--role", "--project-root", "--socket"}, {"--stdio"}, error);
  if (!options) return usage_error(error);
  if (options->count("--role") == 0) return usage_error("--role is required");
  if (options->count("--project-root") == 0) return usage_error("--project-root is required");
  if (options->count("--stdio") == 0) return usage_error("--stdio is required (the only mode)");
  init_client_log();
  return pando::client::run_launch(options->at("--role"),
                                   resolved_project_root(options->at("--project-root")),
                                   pando::client::socket_path(socket_option(*options)));
}

int status_command(const std::vector<std::string>& args) {
  std::string error;
  const auto options = parse_options(args, {"--project-root", "--socket"}, {}, error);
  if (!options) return usage_error(error);
  const std::string root = options->count("--project-root") != 0
                               ? resolved_project_root(options->at("--project-root"))
                               : "";
  return pando::client::run_status(pando::client::socket_path(socket_option(*options)), root);
}

int selftest_command(const std::vector<std::string>& args) {
  std::string error;
  const auto options =
      parse_options(args, {"--role", "--project-root", "--socket"}, {"--json"}, error);
  if (!options) return usage_error(error);
  pando::client::SelftestOptions selftest;
  if (options->count("--role") == 0) {
    selftest.roles = {"core", "workspace"};
  } else if (options->at("--role") == "core" || options->at("--role") == "workspace") {
    selftest.roles = {options->at("--role")};
  } else {
    return usage_error("--role must be core or workspace");
  }
  if (options->count("--project-root") != 0) {
    selftest.project_root = resolved_project_root(options->at("--project-root"));
  }
  selftest.json = options->count("--json") != 0;
  selftest.socket = pando::client::socket_path(socket_option(*options));
  return pando::client::run_selftest(selftest);
}

int setup_users_command(const std::vector<std::string>& args) {
  std::string error;
  const auto options = parse_options(args, {"--core-user", "--workspace-user"}, {}, error);
  if (!options) return usage_error(error);
  pando::client::SetupUsersOptions setup;
  if (options->count("--core-user") != 0) setup.core_user = options->at("--core-user");
  if (options->count("--workspace-user") != 0) {
    setup.workspace_user = options->at("--workspace-user");
  }
  return pando::client::run_setup_users(setup, std::cout, std::cerr);
}

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>& args);
  const char* help;
};
constexpr Command kCommands[] = {
    {"launch", launch_command,
     "usage: pando-helper security launch --role <core|workspace> --project-root <path> --stdio "
     "[--socket PATH]\n"
     "Starts the role's tool server confined to <path> (as pando-helperd's config names it) and\n"
     "relays stdin, stdout and stderr until it exits; exits with its status.\n"
     "  --role core|workspace  core reads the project; workspace also writes it\n"
     "  --project-root <path>  your project directory; symbolic links in it are resolved here,\n"
     "                         and the role sees the resolved path\n"
     "  --stdio                relay stdio (the only mode; what an MCP client expects)\n"
     "  --socket PATH          the daemon's socket (default $PANDO_HELPER_SOCKET, then\n"
     "                         /run/pando/helper.sock)\n"
     "Exit codes: the role's own; 128+N when killed by signal N; 64 bad command line;\n"
     "69 daemon not reachable; 70 local failure; 76 connection broke; 77 rejected.\n"},
    {"status", status_command,
     "usage: pando-helper security status [--project-root <path>] [--socket PATH]\n"
     "Whether pando-helperd answers, its version, live sessions and which confinement layers\n"
     "this host offers; with --project-root, whether that directory can be idmapped.\n"},
    {"selftest", selftest_command,
     "usage: pando-helper security selftest [--role core|workspace] [--project-root <path>] "
     "[--json]\n"
     "                                       [--socket PATH]\n"
     "Has pando-helperd run its own probe as each role in a real session and try the escapes\n"
     "every confinement layer must stop; prints the layers the daemon reports unavailable,\n"
     "then one line per check: PASS, FAIL or SKIP (cannot run on this host), check, detail.\n"
     "  --role core|workspace  only this role (default: both, one after the other)\n"
     "  --project-root <path>  run in this project of yours (default: a temporary project\n"
     "                         made in /tmp and removed afterwards)\n"
     "  --json                 one JSON object per line: {\"check\",\"result\",\"detail\"}\n"
     "Exit codes: 0 no check failed; 1 a check failed; 64, 69, 70, 76, 77 as for launch.\n"},
    {"setup-users", setup_users_command,
     "usage: pando-helper security setup-users [--core-user NAME] [--workspace-user NAME]\n"
     "As root: creates the locked system users the roles run as (default pando-core and\n"
     "pando-workspace; own group, no shell, no home). Safe to run again.\n"},
};

// The client's one boundary: a command's failure is its message and exit status.
int run_command(const Command& command, const std::vector<std::string>& args) {
  try {
    return command.run(args);
  } catch (const pando::Error& e) {
    std::cerr << "pando-helper: " << e.what() << "\n";
    return pando::client::kExitSoftware;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Protobuf would print parse complaints about client bytes to stderr.
  google::protobuf::SetLogHandler(nullptr);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--version") {
    std::cout << "pando-helper " << PANDO_VERSION << "\n";
    return 0;
  }
  if (args.empty()) {
    std::cerr << kUsage;
    return kExitUsage;
  }
  if (args[0] == "--help" || args[0] == "-h" ||
      (args[0] == "security" && args.size() == 2 && asks_for_help({args[1]}))) {
    std::cout << kUsage;
    return 0;
  }
  if (args.size() < 2 || args[0] != "security") return usage_error("expected `security <command>`");
  const std::vector<std::string> rest(args.begin() + 2, args.end());
  for (const Command& command : kCommands) {
    if (args[1] != command.name) continue;
    if (asks_for_help(rest)) {
      std::cout << command.help;
      return 0;
    }
    return run_command(command, rest);
  }
  return usage_error("unknown command " + args[1]);
}
