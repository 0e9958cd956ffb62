// pando-helper-probe: the helpers every check uses, and its command line.

#include "probe/probe.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace pando::probe {

namespace {

Options g_options;
int g_failures = 0;

void report(const char* result, const std::string& check, const std::string& detail) {
  std::printf("%s %s %s\n", result, check.c_str(), detail.c_str());
  std::fflush(stdout);
}
}  // namespace

void pass(const std::string& check, const std::string& detail) { report("PASS", check, detail); }
void fail(const std::string& check, const std::string& detail) {
  ++g_failures;
  report("FAIL", check, detail);
}
void skip(const std::string& check, const std::string& reason) { report("SKIP", check, reason); }

std::string errno_name(int err) { return strerrorname_np(err) ? strerrorname_np(err) : "?"; }

void expect_errno(const std::string& check, long result, int expected) {
  const int err = errno;
  if (result >= 0) return fail(check, "succeeded (returned " + std::to_string(result) + ")");
  if (err != expected) {
    return fail(check, "failed with " + errno_name(err) + ", expected " + errno_name(expected));
  }
  pass(check, "refused with " + errno_name(err));
}

void expect_failure(const std::string& check, long result) {
  const int err = errno;
  if (result >= 0) return fail(check, "succeeded");
  pass(check, "refused with " + errno_name(err));
}

int in_child(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) _exit(body());
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

int errno_in_child(const std::function<long()>& call, int& status) {
  status = in_child([&call] {
    const long result = call();
    if (result >= 0) return 0;
    return errno > 0 && errno < 255 ? errno : 255;
  });
  if (status < 0 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

void expect_errno_in_child(const std::string& check, const std::function<long()>& call,
                           int expected) {
  int status = 0;
  const int err = errno_in_child(call, status);
  if (err < 0) return fail(check, "the attempt died (wait status " + std::to_string(status) + ")");
  errno = err;
  expect_errno(check, err == 0 ? 0 : -1, expected);
}

int try_create(const std::string& path, mode_t mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return -1;
  close(fd);
  unlink(path.c_str());
  return fd;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string status_field(const std::string& name) {
  std::istringstream status(read_file("/proc/self/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(name + ":", 0) == 0) {
      const size_t start = line.find_first_not_of(" \t", name.size() + 1);
      return start == std::string::npos ? "" : line.substr(start);
    }
  }
  return "";
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (!dir) return names;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  return names;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out.empty() ? "(none)" : out;
}

std::string project_root() {
  const char* root = std::getenv("PANDO_PROJECT_ROOT");
  return root ? root : "";
}

std::string home() {
  const char* dir = std::getenv("HOME");
  return dir ? dir : "";
}

int landlock_abi() {
  const long abi =
      syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi < 0 ? 0 : static_cast<int>(abi);
}

bool workspace() { return g_options.role == "workspace"; }

int socket_for(const std::string& check, int family, int type) {
  const int fd = socket(family, type | SOCK_CLOEXEC, 0);
  if (fd < 0) skip(check, "cannot create the socket here: " + errno_name(errno));
  return fd;
}

bool parse_options(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i];
    const std::string value = argv[i + 1];
    if (name == "--role") {
      g_options.role = value;
    } else if (name == "--caller-uid") {
      g_options.caller_uid = static_cast<uid_t>(std::strtoul(value.c_str(), nullptr, 10));
    } else if (name == "--caller-gid") {
      g_options.caller_gid = static_cast<gid_t>(std::strtoul(value.c_str(), nullptr, 10));
    } else if (name == "--socket") {
      g_options.socket = value;
    } else if (name == "--cgroups") {
      g_options.cgroups = value == "yes";
    } else if (name == "--runtime-path") {
      g_options.runtime_paths.push_back(value);
    } else if (name == "--pids-max") {
      g_options.pids_max = std::strtol(value.c_str(), nullptr, 10);
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && (g_options.role == "core" || g_options.role == "workspace") &&
         g_options.caller_uid != 0 && g_options.caller_gid != 0;
}

const Options& options() { return g_options; }
int failures() { return g_failures; }

}  // namespace pando::probe
