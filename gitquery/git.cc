#include "gitquery/git.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/unique_fd.h"

namespace pando::gitquery {

namespace {

constexpr std::size_t kMaxOut = 8 << 20;
constexpr std::size_t kMaxErr = 64 << 10;

// Reads both pipes until both end, the deadline passes or a cap is crossed (false then).
bool read_both(int out_fd, int err_fd, std::chrono::steady_clock::time_point deadline,
               GitRun& run) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&run.out, &run.err};
  const std::size_t caps[2] = {kMaxOut, kMaxErr};
  int open_pipes = 2;
  char chunk[16384];
  while (open_pipes > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    const int ready = poll(fds, 2, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t got = read(fds[i].fd, chunk, sizeof(chunk));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        fds[i].fd = -1;
        --open_pipes;
        continue;
      }
      if (sinks[i]->size() + static_cast<std::size_t>(got) > caps[i]) return false;
      sinks[i]->append(chunk, static_cast<std::size_t>(got));
    }
  }
  return true;
}

}  // namespace

GitRun run_git(const std::string& git, const std::string& directory,
               const std::vector<std::string>& args, const std::vector<std::string>& environment,
               std::chrono::milliseconds timeout) {
  GitRun run;
  int out[2];
  int err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return run;
  UniqueFd out_read(out[0]), out_write(out[1]);
  if (pipe2(err, O_CLOEXEC) != 0) return run;
  UniqueFd err_read(err[0]), err_write(err[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_write.get(), 2);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawn_file_actions_addchdir_np(&actions, directory.c_str());
  std::vector<std::string> owned_args = {git};
  owned_args.insert(owned_args.end(), args.begin(), args.end());
  std::vector<std::string> owned_env = environment;
  std::vector<char*> argv;
  std::vector<char*> envp;
  for (std::string& arg : owned_args) argv.push_back(arg.data());
  for (std::string& var : owned_env) envp.push_back(var.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, git.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    run.err = "cannot run " + git + ": " + std::string(std::strerror(spawned));
    return run;
  }
  run.started = true;
  out_write.reset();
  err_write.reset();
  const bool complete =
      read_both(out_read.get(), err_read.get(), std::chrono::steady_clock::now() + timeout, run);
  if (!complete) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.ran = complete && WIFEXITED(status);
  run.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (!complete) run.err = git + " did not answer within its time and size limits";
  return run;
}

namespace {

// What git prints as a scope and an origin: anything else means a field was read out of
// place (a NUL inside a value shifts every field after it), and nothing after it can be
// trusted.
bool is_known_scope(const std::string& scope) {
  for (const char* known : {"system", "global", "local", "worktree", "command"}) {
    if (scope == known) return true;
  }
  return false;
}

bool is_known_origin(const std::string& origin) {
  for (const char* prefix :
       {"file:", "command line:", "blob:", "standard input:", "submodule-blob:"}) {
    if (origin.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

}  // namespace

bool parse_config_listing(const std::string& listing, bool with_scope,
                          std::vector<ConfigEntry>& entries) {
  std::size_t at = 0;
  const auto field = [&listing, &at](std::string& into) {
    const std::size_t end = listing.find('\0', at);
    if (end == std::string::npos) return false;
    into = listing.substr(at, end - at);
    at = end + 1;
    return true;
  };
  while (at < listing.size()) {
    ConfigEntry entry;
    std::string key_value;
    if ((with_scope && !field(entry.scope)) || !field(entry.origin) || !field(key_value)) {
      return false;
    }
    if ((with_scope && !is_known_scope(entry.scope)) || !is_known_origin(entry.origin)) {
      return false;
    }
    const std::size_t newline = key_value.find('\n');
    entry.has_value = newline != std::string::npos;
    entry.key = key_value.substr(0, newline);
    if (entry.has_value) entry.value = key_value.substr(newline + 1);
    entries.push_back(std::move(entry));
  }
  return true;
}

bool says_not_a_repository(const std::string& err) {
  return err.find("fatal: not a git repository") != std::string::npos;
}

}  // namespace pando::gitquery
