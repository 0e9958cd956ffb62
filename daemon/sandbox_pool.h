#pragma once

// Launchers started ahead of requests. Starting one costs a clone() with five
// new namespaces and the request-independent part of the filesystem view; the
// pool pays that while no client waits. Each launcher serves exactly
// one session: its namespaces are fresh and never shared. Waiting launchers
// hold no request data, no caller fd and no cgroup of a session (the daemon
// moves a taken one into the session's cgroups before sending its plan).

#include <chrono>
#include <deque>

#include "common/unique_fd.h"
#include "daemon/launch.h"

namespace pando::daemon {

class SandboxPool {
 public:
  // A waiting launcher older than this is replaced, so that its copy of the
  // host's mounts and of /etc (ld.so.cache and the like) stays recent.
  static constexpr std::chrono::seconds kMaxIdleAge{60};

  // `size` launchers are kept waiting (0: each is started on request).
  SandboxPool(LauncherTemplate& launchers, unsigned size);
  ~SandboxPool();
  SandboxPool(const SandboxPool&) = delete;
  SandboxPool& operator=(const SandboxPool&) = delete;

  // The oldest launcher asked for that is still alive, else one started now.
  // Throws pando::Error (ERROR_LAUNCH_FAILED) when starting one fails.
  StartedSandbox take();

  // Asks for launchers until `size` are waiting or asked for, replacing
  // those older than kMaxIdleAge; returns without waiting for the template's
  // answers. Failures are logged, never thrown: a launch then starts its own
  // launcher and reports the failure to its client.
  void refill() noexcept;

  // Kills and reaps every waiting launcher.
  void clear() noexcept;

  unsigned size() const { return size_; }

 private:
  // Moves the launchers the template has answered for into waiting_.
  void collect() noexcept;

  LauncherTemplate& launchers_;
  unsigned size_;
  std::deque<StartedSandbox> waiting_;
};

}  // namespace pando::daemon
