// pando-helper-git-query: what the caller's git would read as config and run as hooks for the
// repositories of a project (SECURITY.md, step 12). The daemon starts it for each workspace
// launch as the caller (never root), with no_new_privs, in new pid, network, IPC and UTS
// namespaces, stdin a pipe of units, stdout a pipe for the answer and fd 3 the sessions'
// seccomp program. It confines itself further (read-only Landlock, that seccomp filter,
// rlimits) before it runs git, with a fixed environment.
//
// In: NUL-terminated pairs, "W" or "G" then an absolute path (a working tree, a git dir).
// Out: NUL-terminated fields, a record each:
//   F <path>          a config file git reads, or would through an include (pin read-only)
//   D <path>          a hooks directory (pin read-only)
//   P <path>          a missing directory a named path runs through (make and pin it)
//   L <link> <path>   a symbolic link in the project on the way to <path> (refuse)
//   E <message>       git refused a repository (refuse, with git's message)
//   S <absolute path> a file whose change could change this answer (existing or not)
//   Z                 the end: anything cut short has none
// <path> and <link> are relative to the project.

#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/sandbox/landlock.h"
#include "daemon/sandbox/seccomp.h"
#include "gitquery/query.h"
#include "gitquery/resolve.h"
#include "proto/error.h"

namespace {

namespace gq = pando::gitquery;

constexpr int kSeccompFd = 3;
constexpr std::size_t kMaxInput = 16 << 20;

[[noreturn]] void die(const std::string& message) {
  const std::string line = "pando-helper-git-query: " + message + "\n";
  (void)!write(2, line.data(), line.size());
  _exit(70);
}

void confine() {
  if (getuid() == 0 || geteuid() == 0 || getgid() == 0) die("runs as the caller, never as root");
  const rlimit no_core{0, 0};
  const rlimit cpu{60, 60};
  const rlimit files{256, 256};
  if (setrlimit(RLIMIT_CORE, &no_core) != 0 || setrlimit(RLIMIT_CPU, &cpu) != 0 ||
      setrlimit(RLIMIT_NOFILE, &files) != 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    die(std::string("rlimits: ") + std::strerror(errno));
  }
  try {
    pando::sandbox::apply_read_only_landlock();
    pando::sandbox::install_seccomp_program(pando::sandbox::read_seccomp_program(kSeccompFd));
  } catch (const pando::Error& e) {
    die(e.what());
  }
  close(kSeccompFd);
}

std::vector<gq::Unit> read_units() {
  std::string input;
  char chunk[65536];
  for (;;) {
    const ssize_t got = read(0, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) die(std::string("read: ") + std::strerror(errno));
    if (got == 0) break;
    input.append(chunk, static_cast<std::size_t>(got));
    if (input.size() > kMaxInput) die("too much input");
  }
  std::vector<gq::Unit> units;
  std::size_t at = 0;
  while (at < input.size()) {
    const std::size_t kind_end = input.find('\0', at);
    const std::size_t path_end =
        kind_end == std::string::npos ? kind_end : input.find('\0', kind_end + 1);
    if (path_end == std::string::npos) die("malformed input");
    const std::string kind = input.substr(at, kind_end - at);
    const std::string path = input.substr(kind_end + 1, path_end - kind_end - 1);
    if ((kind != "W" && kind != "G") || path.empty() || path.front() != '/') {
      die("malformed input");
    }
    units.push_back({kind == "W", path});
    at = path_end + 1;
  }
  return units;
}

class Output {
 public:
  void record(std::initializer_list<std::string> fields) {
    for (const std::string& field : fields) {
      text_ += field;
      text_ += '\0';
    }
  }
  // Each named path as the session must take it.
  void target(const gq::Project& project, const std::string& kind, const std::string& path) {
    const gq::Target target = gq::resolve(project, path);
    if (target.kind == gq::Target::Kind::kThroughLink) record({"L", target.relative, path});
    if (target.kind != gq::Target::Kind::kInside) return;
    for (const std::string& dir : target.passed_through) record({"P", dir});
    record({kind, target.relative});
  }
  void flush() {
    record({"Z"});
    std::size_t done = 0;
    while (done < text_.size()) {
      const ssize_t n = write(1, text_.data() + done, text_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(70);
      done += static_cast<std::size_t>(n);
    }
  }

 private:
  std::string text_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7 || std::strcmp(argv[1], "--project") != 0 || std::strcmp(argv[3], "--git") != 0 ||
      std::strcmp(argv[5], "--home") != 0) {
    die("started by pando-helperd only: --project DIR --git PATH --home DIR");
  }
  const std::string project_root = argv[2];
  const std::string git = argv[4];
  const std::string home = argv[6];
  confine();
  const std::vector<gq::Unit> units = read_units();
  gq::Project project;
  if (!gq::load_project(project_root, project)) {
    die("cannot open " + project_root + ": " + std::strerror(errno));
  }
  gq::Query query(git, home,
                  {"HOME=" + home, "PATH=/usr/bin:/bin", "LC_ALL=C", "GIT_TERMINAL_PROMPT=0",
                   "GIT_OPTIONAL_LOCKS=0"});
  for (const gq::Unit& unit : units) query.run(unit);
  Output out;
  for (const std::string& error : query.findings().errors) out.record({"E", error});
  for (const std::string& file : query.findings().config_files) out.target(project, "F", file);
  for (const std::string& dir : query.findings().hooks_dirs) out.target(project, "D", dir);
  for (const std::string& file : query.findings().depends) out.record({"S", file});
  out.flush();
  return 0;
}
