#include "daemon/sandbox_pool.h"

#include <poll.h>
#include <sched.h>

#include <string>

#include "common/json_log.h"

namespace pando::daemon {

namespace {

bool has_exited(const StartedSandbox& sandbox) {
  pollfd p{sandbox.pidfd.get(), POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

// A waiting launcher has no children and dies at once.
void discard(StartedSandbox& sandbox) {
  if (!kill_and_reap(sandbox.pidfd.get())) {
    log::warn("prestarted_sandbox_kill_failed", {{"pid", static_cast<int64_t>(sandbox.pid)}});
  }
}

// A launcher still preparing runs at SCHED_IDLE; a client waits on it now.
// Best effort: without CAP_SYS_NICE this fails, and the launcher then never
// left the normal policy (daemon/sandbox/main.cc).
StartedSandbox& leave_idle(StartedSandbox& sandbox) {
  sched_param param{};
  (void)sched_setscheduler(sandbox.pid, SCHED_OTHER, &param);
  return sandbox;
}

}  // namespace

SandboxPool::SandboxPool(LauncherTemplate& launchers, unsigned size)
    : launchers_(launchers), size_(size) {}

SandboxPool::~SandboxPool() { clear(); }

StartedSandbox SandboxPool::take() {
  collect();
  while (!waiting_.empty()) {
    StartedSandbox sandbox = std::move(waiting_.front());
    waiting_.pop_front();
    if (!has_exited(sandbox)) return std::move(leave_idle(sandbox));
    // It failed on its own (its setup error waits unread on the control
    // socket); a fresh one will report the same error if it persists.
    log::warn("prestarted_sandbox_exited", {{"pid", static_cast<int64_t>(sandbox.pid)}});
    discard(sandbox);
  }
  StartedSandbox sandbox = launchers_.start_sandbox();
  return std::move(leave_idle(sandbox));
}

// A failed answer ends the round; the answers after it wait for the next.
void SandboxPool::collect() noexcept {
  try {
    while (std::optional<StartedSandbox> answered = launchers_.take_answered()) {
      waiting_.push_back(std::move(*answered));
    }
  } catch (const std::exception& e) {
    log::error("prestart_failed", {{"error", std::string(e.what())}});
  }
}

void SandboxPool::refill() noexcept {
  collect();
  const auto now = std::chrono::steady_clock::now();
  while (!waiting_.empty() && now - waiting_.front().started_at > kMaxIdleAge) {
    discard(waiting_.front());
    waiting_.pop_front();
  }
  while (waiting_.size() + launchers_.requested() < size_) {
    try {
      launchers_.request_sandbox();
    } catch (const std::exception& e) {
      log::error("prestart_failed", {{"error", std::string(e.what())}});
      return;
    }
  }
}

void SandboxPool::clear() noexcept {
  collect();
  for (StartedSandbox& sandbox : waiting_) discard(sandbox);
  waiting_.clear();
}

}  // namespace pando::daemon
