#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/unique_fd.h"

namespace pando::daemon {

// The caller's own stdin/stdout pipes, when it handed them over (direct stdio).
struct DirectStdio {
  UniqueFd stdin_read;
  UniqueFd stdout_write;
};

// A session's launcher: a copy of the launcher template in new mount, pid,
// network, IPC and UTS namespaces, a child of the daemon, with /dev/null as
// fds 0-2 and its control socket as fd 3. Until it gets a plan it only
// prepares what depends on no request, then waits.
struct StartedSandbox {
  pid_t pid = -1;
  UniqueFd pidfd;    // signals and exit without pid reuse races
  UniqueFd control;  // SOCK_SEQPACKET: plan out, SandboxEvents in
  std::chrono::steady_clock::time_point started_at;
};

// pando-helper-sandbox started once from the launcher binary (an O_PATH fd
// opened at daemon start), which forks every session's launcher on request:
// a launcher costs a clone(), not an exec, and inherits the seccomp program
// compiled once (see daemon/sandbox/main.cc). One thread at a time.
//
// Asking and taking the answer are separate steps: the template's clone()
// (new network and mount namespaces: about half a millisecond) runs while the
// daemon goes on serving, instead of the event loop waiting for it. The
// template answers in the order it was asked.
class LauncherTemplate {
 public:
  // Compiles the seccomp programs for all launchers and starts the template.
  // Throws pando::Error when either fails.
  explicit LauncherTemplate(int launcher_fd);
  // Kills and reaps the template (its launchers are the daemon's children).
  ~LauncherTemplate();
  LauncherTemplate(const LauncherTemplate&) = delete;
  LauncherTemplate& operator=(const LauncherTemplate&) = delete;

  // Asks for one more launcher without waiting for it. A template that died
  // is restarted once. Throws pando::Error (ERROR_LAUNCH_FAILED).
  void request_sandbox();
  // Launchers asked for whose answers have not been taken yet.
  size_t requested() const { return requested_.size(); }
  // The launcher of the oldest request if the template has answered it
  // already, without waiting. Throws pando::Error when the answer is a
  // failure.
  std::optional<StartedSandbox> take_answered();
  // The launcher of the oldest request, or of one made now when none is
  // pending, waiting for the answer. A template that died is restarted once.
  // Throws pando::Error (ERROR_LAUNCH_FAILED).
  StartedSandbox start_sandbox();
  // The sessions' seccomp program (a sealed memfd): pando-helper-git-query installs it too.
  int seccomp_program_fd() const { return seccomp_program_.get(); }

 private:
  struct Request {
    UniqueFd control;  // the daemon's end of the launcher's control socket
    std::chrono::steady_clock::time_point at;
  };
  enum class Answer { kLauncher, kNotYet, kTemplateGone };

  // Lifts the template out of SCHED_IDLE while the daemon waits on it; puts
  // it back when the wait ends (unless the template was stopped meanwhile).
  class Hurry;

  void start();
  // kWait: first waits for the answer to every request; kTaken: only takes
  // the answers already sent (the template stopped answering, or broke its
  // protocol).
  enum class Answers { kWait, kTaken };
  // Kills the template. Launchers it has answered for are killed and reaped
  // too; nobody could take them any more.
  void stop(Answers answers = Answers::kWait) noexcept;
  void restart(std::string_view reason);
  // False when the template is gone.
  bool send_request();
  // Reads the answer to the oldest request (`flags`: 0 to wait for it, or
  // MSG_DONTWAIT).
  Answer receive_answer(int flags, StartedSandbox& out);

  int launcher_fd_;
  UniqueFd devnull_;              // the template's fds 0-2, and so every launcher's
  UniqueFd seccomp_program_;      // sealed memfd, the template's fd 4
  UniqueFd group_write_program_;  // sealed memfd, the template's fd 5
  pid_t pid_ = -1;                // valid while pidfd_ is: the template is reaped in stop() only
  UniqueFd pidfd_;
  UniqueFd control_;
  std::deque<Request> requested_;
};

// SIGKILL through the pidfd, then reap (the process must be our child).
// Returns false, without waiting, when the signal could not be sent.
bool kill_and_reap(int pidfd) noexcept;

// The role's stdio: `child` become its fds 0-2; the daemon keeps the other
// ends (with direct stdio, stdin_write and stdout_read stay invalid: the role
// holds the caller's own pipes).
struct SessionStdio {
  UniqueFd child[3];
  UniqueFd stdin_write;
  UniqueFd stdout_read;
  UniqueFd stderr_read;
};
// Takes the caller's pipes out of `direct` when given. Throws pando::Error.
SessionStdio make_session_stdio(DirectStdio* direct);

// Sends the serialized plan with `fds` attached (SCM_RIGHTS), in the order
// daemon/sandbox/main.cc expects. Throws pando::Error (ERROR_LAUNCH_FAILED).
void send_plan(int control_fd, const std::string& plan, const std::vector<int>& fds);

}  // namespace pando::daemon
