#pragma once

// Runs a program and reads what it writes to stdout, bounded in time and
// size: getent(1) for the daemon's account lookups, git(1) for the client's
// selftest. The child gets /dev/null as stdin and stderr, no other fd of
// ours, default signal dispositions and an empty mask; posix_spawn runs no
// code of ours between fork and exec.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace pando {

struct ChildCommand {
  std::vector<std::string> argv;     // argv[0] is the program: an absolute path, or a name
  bool search_path = false;          // looked up in PATH (posix_spawnp)
  bool inherit_environment = false;  // this process's environment; else an empty one
  std::string working_directory;     // empty: this process's
  std::chrono::milliseconds timeout{5000};
  size_t max_output = 1 << 20;
};

struct ChildOutput {
  // EOF came within the timeout and the size cap; otherwise the child was
  // killed and `output` is what came before.
  bool complete = false;
  int wait_status = 0;
  std::string output;
};

// nullopt when the program cannot be executed (missing, not executable).
// Throws pando::Error (ERROR_INTERNAL) when a system call around the child
// fails. The child is always reaped.
std::optional<ChildOutput> run_for_output(const ChildCommand& command);

}  // namespace pando
