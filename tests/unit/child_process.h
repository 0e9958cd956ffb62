#pragma once

// Runs test code that changes process-wide state (credentials, Landlock,
// rlimits...) in a forked child, so the test binary itself stays untouched.

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <functional>
#include <string>

namespace pando::testing {

struct ChildResult {
  int exit_code = -1;  // -1 when the child did not exit normally
  std::string output;  // what the child reported through Fail()
};

class Child {
 public:
  explicit Child(int report_fd) : report_fd_(report_fd) {}

  // Records why the child failed; returns 1 so that `return child.Fail(...)`
  // ends the child with a non-zero code.
  int Fail(const std::string& message) const {
    const std::string line = message + "\n";
    ssize_t unused = write(report_fd_, line.data(), line.size());
    (void)unused;
    return 1;
  }

  int FailErrno(const std::string& what) const { return Fail(what + ": " + std::strerror(errno)); }

 private:
  int report_fd_;
};

// `body` runs in a fork and returns the child's exit code (0: pass). Call
// only from a single-threaded test process.
inline ChildResult RunInChild(const std::function<int(const Child&)>& body) {
  ChildResult result;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    result.output = std::string("pipe2: ") + std::strerror(errno);
    return result;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    result.output = std::string("fork: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return result;
  }
  if (pid == 0) {
    close(fds[0]);
    const Child child(fds[1]);
    int code = 1;
    try {
      code = body(child);
    } catch (const std::exception& e) {
      child.Fail(std::string("unexpected exception: ") + e.what());
    }
    _exit(code);
  }
  close(fds[1]);
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) result.output.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      result.output += std::string("waitpid: ") + std::strerror(errno);
      return result;
    }
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.output += "child killed by signal " + std::to_string(WTERMSIG(status));
  }
  return result;
}

}  // namespace pando::testing
