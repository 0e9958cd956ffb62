#include "daemon/git_query.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

#include "common/json_log.h"
#include "common/unique_fd.h"
#include "proto/error.h"

namespace pando::daemon {

namespace {

using pando::helper::v1::ERROR_LAUNCH_FAILED;

constexpr std::chrono::seconds kQueryTimeout{30};
constexpr std::size_t kMaxAnswer = 4 << 20;
constexpr std::size_t kMaxMessage = 4096;
constexpr int kMaxGroups = 64;
// fds of the child before exec: 0-2 the pipes, 3 the seccomp program, 4 the program (closed
// by the exec). Sources are parked above kParkFloor first so no dup2 overwrites one.
constexpr int kProgramFd = 4;
constexpr int kParkFloor = 64;
constexpr int kMoves = 5;
// Answers kept at most (one per project, caller and set of repositories).
constexpr std::size_t kMaxKept = 256;

[[noreturn]] void fail(const std::string& what) { throw_errno(what, ERROR_LAUNCH_FAILED); }

struct GitQuery {
  int program_fd = -1;  // O_PATH fd of pando-helper-git-query
  int seccomp_fd = -1;  // the sessions' compiled seccomp program (sealed memfd)
  std::string git;
  std::string project_root;
  std::string home;  // the caller's, from its account
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  std::vector<std::pair<char, std::string>> units;
};

UniqueFd park(int fd) {
  const int parked = fcntl(fd, F_DUPFD_CLOEXEC, kParkFloor);
  if (parked < 0) fail("F_DUPFD_CLOEXEC");
  return UniqueFd(parked);
}

struct ChildSetup {
  const int (*moves)[2];
  uid_t uid;
  gid_t gid;
  const gid_t* groups;
  std::size_t group_count;
  char* const* argv;
};

// Between clone and exec, in the daemon's memory (CLONE_VM) while the calling thread waits
// (CLONE_VFORK): raw system calls only, no allocation, nothing of glibc's that would signal
// the daemon's other threads (its setuid family does, to change them all).
int become_caller(void* arg) {
  const auto* setup = static_cast<const ChildSetup*>(arg);
  for (int i = 0; i < kMoves; ++i) {
    if (dup2(setup->moves[i][0], setup->moves[i][1]) < 0) _exit(127);
  }
  if (fcntl(kProgramFd, F_SETFD, FD_CLOEXEC) != 0 ||
      syscall(SYS_close_range, kProgramFd + 1, ~0U, 0) != 0 ||
      syscall(SYS_setgroups, setup->group_count, setup->groups) != 0 ||
      syscall(SYS_setresgid, setup->gid, setup->gid, setup->gid) != 0 ||
      syscall(SYS_setresuid, setup->uid, setup->uid, setup->uid) != 0 ||
      syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    _exit(126);
  }
  char* const envp[] = {nullptr};
  syscall(SYS_execveat, kProgramFd, "", setup->argv, envp, AT_EMPTY_PATH);
  _exit(127);
}

struct Child {
  UniqueFd pidfd;
  UniqueFd in;   // its stdin
  UniqueFd out;  // its stdout
  UniqueFd err;  // its stderr
};

Child start(const GitQuery& query) {
  if (query.uid == 0 || query.gid == 0) {
    throw Error(ERROR_LAUNCH_FAILED, "the git query never runs as root");
  }
  int fds[3][2];
  for (auto& pair : fds) {
    if (pipe2(pair, O_CLOEXEC) != 0) fail("pipe2");
  }
  UniqueFd ends[3][2];
  for (int i = 0; i < 3; ++i) {
    ends[i][0].reset(fds[i][0]);
    ends[i][1].reset(fds[i][1]);
  }
  const UniqueFd parked[kMoves] = {park(ends[0][0].get()), park(ends[1][1].get()),
                                   park(ends[2][1].get()), park(query.seccomp_fd),
                                   park(query.program_fd)};
  const int moves[kMoves][2] = {{parked[0].get(), 0},
                                {parked[1].get(), 1},
                                {parked[2].get(), 2},
                                {parked[3].get(), 3},
                                {parked[4].get(), kProgramFd}};
  std::string name = "pando-helper-git-query";
  std::string project_flag = "--project", git_flag = "--git", home_flag = "--home";
  std::string project = query.project_root, git = query.git, home = query.home;
  char* const argv[] = {name.data(), project_flag.data(), project.data(), git_flag.data(),
                        git.data(),  home_flag.data(),    home.data(),    nullptr};
  const std::size_t group_count = std::min<std::size_t>(query.groups.size(), kMaxGroups);
  ChildSetup setup{moves, query.uid, query.gid, query.groups.data(), group_count, argv};
  std::vector<char> stack(64 * 1024);
  sigset_t all, saved;
  sigfillset(&all);
  if (const int err = pthread_sigmask(SIG_SETMASK, &all, &saved); err != 0) {
    errno = err;
    fail("pthread_sigmask");
  }
  int pidfd = -1;
  const int flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | CLONE_NEWPID | CLONE_NEWNET |
                    CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD;
  const pid_t pid = clone(become_caller, stack.data() + stack.size(), flags, &setup, &pidfd);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) {
    errno = clone_errno;
    fail("clone the git query");
  }
  return {UniqueFd(pidfd), std::move(ends[0][1]), std::move(ends[1][0]), std::move(ends[2][0])};
}

void kill_and_reap(int pidfd) noexcept {
  (void)syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
  siginfo_t info{};
  while (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED) != 0 &&
         errno == EINTR) {
  }
}

// Writes the units, then reads the answer and the program's own complaints until both end.
// False past the deadline or the caps.
bool exchange(Child& child, const std::string& units, std::string& answer, std::string& err) {
  const auto deadline = std::chrono::steady_clock::now() + kQueryTimeout;
  std::size_t written = 0;
  pollfd fds[3] = {
      {child.in.get(), POLLOUT, 0}, {child.out.get(), POLLIN, 0}, {child.err.get(), POLLIN, 0}};
  if (units.empty()) {
    child.in.reset();
    fds[0].fd = -1;
  }
  char chunk[16384];
  while (fds[1].fd >= 0 || fds[2].fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    const int ready = poll(fds, 3, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    if (fds[0].fd >= 0 && fds[0].revents != 0) {
      const ssize_t n = write(fds[0].fd, units.data() + written, units.size() - written);
      if (n > 0) written += static_cast<std::size_t>(n);
      if (n < 0 || written == units.size()) {
        child.in.reset();
        fds[0].fd = -1;
      }
    }
    for (int i = 1; i < 3; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fds[i].fd = -1;
        continue;
      }
      std::string& sink = i == 1 ? answer : err;
      if (sink.size() + static_cast<std::size_t>(n) > (i == 1 ? kMaxAnswer : kMaxMessage)) {
        return false;
      }
      sink.append(chunk, static_cast<std::size_t>(n));
    }
  }
  return true;
}

GitAnswer parse_answer(const std::string& answer) {
  GitAnswer parsed;
  std::size_t at = 0;
  const auto field = [&]() -> std::string {
    const std::size_t end = answer.find('\0', at);
    if (end == std::string::npos) {
      throw Error(ERROR_LAUNCH_FAILED, "the git query's answer was cut short");
    }
    std::string text = answer.substr(at, end - at);
    at = end + 1;
    return text;
  };
  const auto path = [&]() {
    std::string text = field();
    if (!is_normal_relative(text)) {
      throw Error(ERROR_LAUNCH_FAILED, "the git query named a path outside the project");
    }
    return text;
  };
  for (;;) {
    const std::string kind = field();
    if (kind == "Z" && at == answer.size()) return parsed;
    if (kind == "F") {
      parsed.config_files.push_back(path());
    } else if (kind == "D") {
      parsed.hooks_dirs.push_back(path());
    } else if (kind == "P") {
      parsed.passed_through.push_back(path());
    } else if (kind == "L") {
      std::string link = path();
      parsed.links.emplace_back(std::move(link), field());
    } else if (kind == "E") {
      parsed.refusals.push_back(field());
    } else if (kind == "S") {
      std::string file = field();
      if (file.empty() || file.front() != '/') {
        throw Error(ERROR_LAUNCH_FAILED, "the git query named a file that is not absolute");
      }
      parsed.depends.push_back(std::move(file));
    } else {
      throw Error(ERROR_LAUNCH_FAILED, "the git query answered something unknown");
    }
  }
}

}  // namespace

bool is_normal_relative(const std::string& path) {
  if (path.empty()) return true;
  if (path.front() == '/' || path.back() == '/' || path.find('\0') != std::string::npos) {
    return false;
  }
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

namespace {

GitAnswer run_query(const GitQuery& query) {
  std::string units;
  for (const auto& [kind, path] : query.units) {
    units += kind;
    units += '\0';
    units += path;
    units += '\0';
  }
  Child child = start(query);
  std::string answer, err;
  const bool complete = exchange(child, units, answer, err);
  kill_and_reap(child.pidfd.get());
  if (!complete) {
    throw Error(ERROR_LAUNCH_FAILED, "the git query did not answer within " +
                                         std::to_string(kQueryTimeout.count()) +
                                         " s and its size limits");
  }
  if (answer.empty()) {
    while (!err.empty() && err.back() == '\n') err.pop_back();
    throw Error(ERROR_LAUNCH_FAILED,
                "the git query failed" + (err.empty() ? std::string() : ": " + err));
  }
  return parse_answer(answer);
}

}  // namespace

GitQueryProgram::GitQueryProgram(const std::string& sandbox_helper_path, std::string git_path)
    : git_(std::move(git_path)) {
  const std::string path =
      sandbox_helper_path.substr(0, sandbox_helper_path.rfind('/') + 1) + "pando-helper-git-query";
  program_.reset(open(path.c_str(), O_PATH | O_CLOEXEC));
  struct stat st {};
  if (!program_.valid() || fstat(program_.get(), &st) != 0) {
    missing_ = path + ": " + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) != 0) {
    missing_ = path + " is not a regular file owned by root and writable only by root";
  }
  if (!missing_.empty()) {
    program_.reset();
    log::error("git_query_unavailable",
               {{"detail", missing_},
                {"effect", std::string_view("every workspace launch will be refused")}});
  }
  git_present_ = access(git_.c_str(), X_OK) == 0;
  if (!git_present_) {
    log::warn("git_absent", {{"git_path", git_},
                             {"effect", std::string_view("no git here runs what a repository's "
                                                         "config names; set git_path if the "
                                                         "callers' git lives elsewhere")}});
  }
}

std::string GitQueryProgram::status_detail() const {
  if (!program_.valid()) return "unavailable: " + missing_;
  if (!git_present_) return git_ + " does not exist: no git here runs a repository's config";
  return "asks " + git_ + ", as the caller, what each repository reads and runs";
}

bool GitQueryProgram::Signature::operator==(const Signature& other) const {
  return exists == other.exists && dev == other.dev && ino == other.ino && size == other.size &&
         mtime.tv_sec == other.mtime.tv_sec && mtime.tv_nsec == other.mtime.tv_nsec &&
         ctime.tv_sec == other.ctime.tv_sec && ctime.tv_nsec == other.ctime.tv_nsec;
}

// As git opens it: links followed. Called with the caller's filesystem identity.
GitQueryProgram::Signature GitQueryProgram::signature_of(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  return {true, st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
}

std::optional<GitAnswer> GitQueryProgram::kept(const std::string& key) {
  std::vector<std::pair<std::string, Signature>> depends;
  {
    std::lock_guard lock(kept_mutex_);
    const auto found = kept_.find(key);
    if (found == kept_.end()) return std::nullopt;
    depends = found->second.depends;
  }
  for (const auto& [path, before] : depends) {
    if (!(signature_of(path) == before)) return std::nullopt;
  }
  std::lock_guard lock(kept_mutex_);
  const auto found = kept_.find(key);
  if (found == kept_.end()) return std::nullopt;
  found->second.used = ++uses_;
  return found->second.answer;
}

// An inode's times come from a clock that ticks every few milliseconds (and some filesystems
// keep whole seconds): a file changed within that tick after git read it can keep its
// timestamps. An answer with a dependency changed less than kRacySeconds before it was asked is
// not kept; git is asked again next time.
void GitQueryProgram::keep(const std::string& key, const GitAnswer& answer, const timespec& asked) {
  constexpr time_t kRacySeconds = 2;
  Kept entry{answer, {}, 0};
  for (const std::string& path : answer.depends) {
    const Signature signature = signature_of(path);
    if (signature.exists && signature.ctime.tv_sec + kRacySeconds >= asked.tv_sec) return;
    entry.depends.emplace_back(path, signature);
  }
  std::lock_guard lock(kept_mutex_);
  entry.used = ++uses_;
  kept_[key] = std::move(entry);
  while (kept_.size() > kMaxKept) {
    auto oldest = kept_.begin();
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->second.used < oldest->second.used) oldest = it;
    }
    kept_.erase(oldest);
  }
}

GitAnswer GitQueryProgram::ask(const PeerIdentity& peer, int seccomp_fd,
                               const std::string& project_root, const std::string& home,
                               const std::vector<std::pair<char, std::string>>& units) {
  if (!program_.valid()) {
    throw Error(ERROR_LAUNCH_FAILED, "cannot find what git runs in the project: " + missing_);
  }
  // No git here: none reads a config or runs a hook; the project's git metadata is pinned by
  // its shape alone.
  if (!git_present_) return {};
  std::string key = std::to_string(peer.uid) + ":" + std::to_string(peer.gid) + ":";
  for (const gid_t group : peer.groups) key += std::to_string(group) + ",";
  key += '\0' + home + '\0' + project_root;
  for (const auto& [kind, path] : units) key += std::string(1, '\0') + kind + path;
  const CallerFsIdentity as_caller(peer);
  if (std::optional<GitAnswer> answer = kept(key)) return std::move(*answer);
  timespec asked{};
  clock_gettime(CLOCK_REALTIME, &asked);
  GitQuery query;
  query.program_fd = program_.get();
  query.seccomp_fd = seccomp_fd;
  query.git = git_;
  query.project_root = project_root;
  query.home = home.empty() ? "/nonexistent" : home;
  query.uid = peer.uid;
  query.gid = peer.gid;
  query.groups = peer.groups;
  query.units = units;
  GitAnswer answer = run_query(query);
  if (answer.refusals.empty()) keep(key, answer, asked);
  return answer;
}

}  // namespace pando::daemon
