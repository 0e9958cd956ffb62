#include "common/child_output.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "common/unique_fd.h"
#include "proto/error.h"

extern char** environ;

namespace pando {

namespace {

using helper::v1::ERROR_INTERNAL;

[[noreturn]] void fail(const char* what) { throw_errno(what, ERROR_INTERNAL); }

void check_spawn(int err, const char* what) {
  if (err != 0) {
    errno = err;
    fail(what);
  }
}

// A posix_spawn attributes object, destroyed with its scope.
template <typename T, int (*init)(T*), int (*destroy)(T*)>
class SpawnObject {
 public:
  explicit SpawnObject(const char* what) { check_spawn(init(&object_), what); }
  ~SpawnObject() { destroy(&object_); }
  SpawnObject(const SpawnObject&) = delete;
  SpawnObject& operator=(const SpawnObject&) = delete;
  T* get() { return &object_; }

 private:
  T object_;
};
using SpawnActions = SpawnObject<posix_spawn_file_actions_t, posix_spawn_file_actions_init,
                                 posix_spawn_file_actions_destroy>;
using SpawnAttributes =
    SpawnObject<posix_spawnattr_t, posix_spawnattr_init, posix_spawnattr_destroy>;

// Reads the child's stdout until EOF, the deadline or the size cap. True on
// EOF.
bool read_until_eof(int fd, std::chrono::steady_clock::time_point deadline, size_t max_output,
                    std::string& out) {
  char chunk[16384];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) fail("poll");
    if (ready == 0) return false;
    const ssize_t got = read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("read");
    if (got == 0) return true;
    if (out.size() + static_cast<size_t>(got) > max_output) return false;
    out.append(chunk, static_cast<size_t>(got));
  }
}

// The pid, or -1 with errno set when the program cannot be executed.
pid_t spawn(const ChildCommand& command, int stdout_fd) {
  SpawnActions actions("posix_spawn_file_actions_init");
  check_spawn(posix_spawn_file_actions_addopen(actions.get(), 0, "/dev/null", O_RDONLY, 0),
              "posix_spawn_file_actions_addopen");
  check_spawn(posix_spawn_file_actions_adddup2(actions.get(), stdout_fd, 1),
              "posix_spawn_file_actions_adddup2");
  check_spawn(posix_spawn_file_actions_addopen(actions.get(), 2, "/dev/null", O_WRONLY, 0),
              "posix_spawn_file_actions_addopen");
  // A socket-activation fd, for one, is not close-on-exec.
  check_spawn(posix_spawn_file_actions_addclosefrom_np(actions.get(), 3),
              "posix_spawn_file_actions_addclosefrom_np");
  if (!command.working_directory.empty()) {
    check_spawn(
        posix_spawn_file_actions_addchdir_np(actions.get(), command.working_directory.c_str()),
        "posix_spawn_file_actions_addchdir_np");
  }
  SpawnAttributes attributes("posix_spawnattr_init");
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  check_spawn(posix_spawnattr_setsigmask(attributes.get(), &none), "posix_spawnattr_setsigmask");
  check_spawn(posix_spawnattr_setsigdefault(attributes.get(), &all),
              "posix_spawnattr_setsigdefault");
  check_spawn(
      posix_spawnattr_setflags(attributes.get(), POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF),
      "posix_spawnattr_setflags");

  std::vector<std::string> args = command.argv;
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  char* empty_environment[] = {nullptr};
  char** envp = command.inherit_environment ? environ : empty_environment;
  const auto spawn_call = command.search_path ? posix_spawnp : posix_spawn;
  pid_t pid = -1;
  const int err = spawn_call(&pid, argv[0], actions.get(), attributes.get(), argv.data(), envp);
  // glibc reports a failed exec as posix_spawn's own error.
  if (err == ENOENT || err == EACCES || err == ENOEXEC || err == ENOTDIR) {
    errno = err;
    return -1;
  }
  check_spawn(err, "posix_spawn");
  return pid;
}

}  // namespace

std::optional<ChildOutput> run_for_output(const ChildCommand& command) {
  if (command.argv.empty()) {
    errno = EINVAL;
    fail("run_for_output without a program");
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) fail("pipe2");
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);
  const pid_t pid = spawn(command, write_end.get());
  if (pid < 0) return std::nullopt;
  write_end.reset();

  ChildOutput result;
  const auto reap = [pid, &result] {
    while (waitpid(pid, &result.wait_status, 0) < 0) {
      if (errno != EINTR) fail("waitpid");
    }
  };
  try {
    result.complete =
        read_until_eof(read_end.get(), std::chrono::steady_clock::now() + command.timeout,
                       command.max_output, result.output);
  } catch (const Error&) {
    kill(pid, SIGKILL);
    reap();
    throw;
  }
  // Not reaped yet, so the pid cannot have been reused.
  if (!result.complete) kill(pid, SIGKILL);
  reap();
  return result;
}

}  // namespace pando
