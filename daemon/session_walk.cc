#include <algorithm>
#include <boost/asio/post.hpp>
#include <memory>
#include <string>

#include "common/json_log.h"
#include "daemon/daemon.h"
#include "daemon/session.h"

// A launcher walks the whole project to hide the caller's secret files (SECURITY.md step 12).
// The walk follows paths, so another session of the same caller that can write the project
// could move a directory out of the walk's way and back while it runs, and a `.env` in it would
// go unmasked. So from the moment a session's plan is sent until its launcher reports (the walk
// window), no such session runs:
// - the caller's workspace sessions whose project overlaps this one and whose launcher was
//   taken are paused in their cgroup's freezer, and resumed when the window closes (pauses are
//   counted: a session paused by two windows runs again when both have closed);
// - a workspace launch of an overlapping project that is ready meanwhile waits, its plan not
//   sent, until no such window is open; its launcher and role do not exist yet.
// Where the host gives sessions no freezer (`cgroups.allow_unlimited`), nothing can be paused:
// each such walk is logged as unpaused. Everything here runs on the event loop.

namespace pando::daemon {

namespace v1 = pando::helper::v1;

namespace {

bool same_or_under(const std::string& path, const std::string& tree) {
  return path == tree || (path.size() > tree.size() && path.compare(0, tree.size(), tree) == 0 &&
                          path[tree.size()] == '/');
}

}  // namespace

// Validated project roots are absolute and normalized: one holds the other exactly when one is
// a prefix of the other at a path boundary.
bool Session::shares_project_with(const Session& other) const {
  if (&other == this || other.peer_.uid != peer_.uid) return false;
  if (project_root_.empty() || other.project_root_.empty()) return false;
  return same_or_under(project_root_, other.project_root_) ||
         same_or_under(other.project_root_, project_root_);
}

// A writer whose launcher was taken may be running its role, or about to.
bool Session::may_write_during_walk() const { return writes_project() && launched_ && !finished_; }

bool Session::pause_for_walk(const Session& walker) {
  if (walk_pauses_ == 0) {
    if (!launch_.cgroup || !launch_.cgroup->can_freeze()) {
      log::warn("walk_unpaused", {{"session", walker.id_},
                                  {"writer", id_},
                                  {"project_root", walker.project_root_},
                                  {"reason", std::string("no cgroup freezer for the writer")}});
      return false;
    }
    launch_.cgroup->set_frozen(true);
  }
  ++walk_pauses_;
  return true;
}

void Session::resume_after_walk() noexcept {
  if (walk_pauses_ == 0 || --walk_pauses_ > 0 || !launch_.cgroup) return;
  try {
    launch_.cgroup->set_frozen(false);
  } catch (const std::exception& e) {
    log::error("session_resume_failed", {{"session", id_}, {"error", std::string(e.what())}});
  }
}

void Session::open_walk_window() {
  try {
    for (const auto& other : daemon_.sessions()) {
      if (!shares_project_with(*other) || !other->may_write_during_walk()) continue;
      if (other->pause_for_walk(*this)) paused_for_walk_.push_back(other);
    }
  } catch (const Error& e) {
    close_walk_window();
    throw Error(e.code(), "another session of yours that can write " + project_root_ +
                              " must be paused while this one's launcher looks for secret files "
                              "in it, and could not be: " +
                              e.what());
  }
  walk_window_open_ = true;
}

void Session::close_walk_window() noexcept {
  if (!walk_window_open_) return;
  walk_window_open_ = false;
  for (const auto& weak : paused_for_walk_) {
    if (const auto paused = weak.lock()) paused->resume_after_walk();
  }
  paused_for_walk_.clear();
  // Writers waiting for this window try again, each after the current handler.
  for (const auto& other : daemon_.sessions()) {
    if (!other->deferred_launch_ || !shares_project_with(*other)) continue;
    boost::asio::post(socket_.get_executor(), [waiting = std::weak_ptr<Session>(other)] {
      if (const auto session = waiting.lock()) session->resume_deferred_launch();
    });
  }
}

bool Session::walk_open_elsewhere() const {
  const auto& sessions = daemon_.sessions();
  return std::any_of(sessions.begin(), sessions.end(), [this](const auto& other) {
    return other->walk_window_open_ && shares_project_with(*other);
  });
}

// A workspace launch waits while another launch of its project walks it (session_walk.cc).
void Session::defer_launch(std::shared_ptr<Prepared> prepared) {
  deferred_launch_ = std::move(prepared);
  log::info("launch_waits_for_walk", {{"session", id_}, {"project_root", project_root_}});
  handshake_timer_.expires_after(kSetupTimeout);
  handshake_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec && self->deferred_launch_) {
      self->reject(v1::ERROR_LAUNCH_FAILED,
                   "another launch of " + self->project_root_ +
                       " did not finish looking for secret files in it in time");
    }
  });
}

void Session::resume_deferred_launch() {
  if (!deferred_launch_ || state() != State::kResolving || walk_open_elsewhere()) return;
  handshake_timer_.cancel();
  auto prepared = std::move(deferred_launch_);
  guarded([&] { on_launch_prepared(std::move(prepared)); });
}

}  // namespace pando::daemon
