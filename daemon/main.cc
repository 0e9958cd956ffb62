// pando-helperd: the privileged daemon. See README.md and SECURITY.md.

#include <google/protobuf/stubs/logging.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include "common/json_log.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "proto/error.h"

namespace {

// sysexits.h's EX_CONFIG: systemd's unit does not restart the daemon on it.
constexpr int kExitConfig = 78;

constexpr const char* kUsage =
    "usage: pando-helperd --config FILE [--socket PATH] [--foreground]\n"
    "       pando-helperd --check-config FILE\n"
    "  --config FILE        daemon configuration (protobuf text format), owned by root\n"
    "  --socket PATH        listen here instead of the config's socket_path\n"
    "  --foreground         accepted for compatibility; the daemon never forks itself\n"
    "  --check-config FILE  check FILE as the daemon would load it: exit 0, or 78 with\n"
    "                       file:line: field: message\n";

// Like `sshd -t`: the same checks as at start, nothing started.
int check_config(const std::string& path) {
  try {
    pando::daemon::load_config(path);
  } catch (const pando::Error& e) {
    std::cerr << "pando-helperd: invalid config: " << e.what() << "\n";
    return kExitConfig;
  }
  std::cout << "pando-helperd: " << path << ": config OK\n";
  return 0;
}

// The daemon's one boundary: each failure to start becomes its exit status.
int start(pando::daemon::DaemonOptions options) {
  pando::daemon::DaemonConfig config;
  try {
    config = pando::daemon::load_config(options.config_path);
  } catch (const pando::Error& e) {
    std::cerr << "pando-helperd: invalid config: " << e.what() << "\n";
    return kExitConfig;
  }
  try {
    pando::log::init("security_helper_daemon", config.log_file(),
                     spdlog::level::from_str(config.log_level()));
  } catch (const std::exception& e) {  // spdlog's, for a log file it cannot open
    std::cerr << "pando-helperd: cannot open log " << config.log_file() << ": " << e.what() << "\n";
    return kExitConfig;
  }
  try {
    pando::daemon::Daemon daemon(std::move(config), std::move(options));
    return daemon.run();
  } catch (const std::exception& e) {  // pando::Error, or asio's where it set up no handler
    pando::log::error("start_failed", {{"error", std::string(e.what())}});
    std::cerr << "pando-helperd: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Protobuf would print parse complaints about client bytes to stderr.
  google::protobuf::SetLogHandler(nullptr);
  pando::daemon::DaemonOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--config" || arg == "--socket") && i + 1 < argc) {
      (arg == "--config" ? options.config_path : options.socket_override.emplace()) = argv[++i];
    } else if (arg == "--check-config" && i + 1 < argc && argc == 3) {
      return check_config(argv[++i]);
    } else if (arg == "--foreground") {
    } else if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--version") {
      std::cout << "pando-helperd " << PANDO_VERSION << "\n";
      return 0;
    } else {
      std::cerr << "pando-helperd: unknown argument " << arg << "\n" << kUsage;
      return 64;
    }
  }
  if (options.config_path.empty()) {
    std::cerr << "pando-helperd: --config is required\n" << kUsage;
    return 64;
  }
  if (geteuid() != 0) {
    std::cerr << "pando-helperd: must run as root\n";
    return 77;
  }
  return start(std::move(options));
}
