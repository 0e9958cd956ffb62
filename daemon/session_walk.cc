#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/json_log.h"
#include "daemon/daemon.h"
#include "daemon/session.h"

// Before its role starts, a launch finds what the role may not read or change in the project
// (SECURITY.md, step 12): the daemon reads the project (what changed since the last launch,
// where it keeps an index), asks the caller's git, and the launcher masks and pins what was
// found. The reading follows paths, so another session of the same caller that can write the
// project could move a directory out of its way and back while it runs, and a `.env` in it
// would go unmasked. So from the moment the daemon reads the project until the session's
// launcher reports (the walk window), no such session runs:
// - opening a window pauses, in their cgroup's freezer, the caller's running workspace sessions
//   of an overlapping project; closing it resumes them. Pauses are counted: a session paused by
//   two windows runs again when both have closed. Walks go on side by side.
// - a workspace role that starts while another window of its project is open pauses itself
//   (wait_for_other_walks). Between its start and the daemon seeing it, it runs unpaused beside
//   that walk (SECURITY.md, "Not done yet").
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

// A writer whose role runs. One still setting up pauses itself when its role starts, if a window
// of its project is still open then (wait_for_other_walks): pausing it here would make every
// launch of a busy project wait for the newer ones.
bool Session::may_write_during_walk() const { return writes_project() && accepted_ && !finished_; }

bool Session::pause_for_walk(const Session& walker) {
  if (walk_pauses_ == 0) {
    if (!launch_.cgroup || !launch_.cgroup->can_freeze()) {
      log::warn("walk_unpaused",
                {{"session", walker.id_},
                 {"other_session", id_},
                 {"project_root", walker.project_root_},
                 {"reason", std::string("no cgroup freezer for the other session")}});
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
  walk_window_open_ = false;
  for (const auto& weak : paused_for_walk_) {
    if (const auto paused = weak.lock()) paused->resume_after_walk();
  }
  paused_for_walk_.clear();
}

// This role has started while another launch of its project may still be walking it: it waits
// in the freezer until that walk is through. Called before this session's own window closes, so
// that the writers that window paused resume only with this one paused in turn.
void Session::wait_for_other_walks() {
  if (!writes_project()) return;
  for (const auto& other : daemon_.sessions()) {
    if (!other->walk_window_open_ || !shares_project_with(*other)) continue;
    if (pause_for_walk(*other)) other->paused_for_walk_.push_back(shared_from_this());
  }
}

// Where the project is indexed, it is brought up to date before the window opens: a first
// launch, which reads it whole, pauses no one for that.
void Session::index_before_window(std::shared_ptr<Prepared> prepared) {
  if (!daemon_.project_watch().keeps_index(prepared->launch.scan_root.get())) {
    return find_exits_in_window(std::move(prepared));
  }
  resolve_off_loop(
      [&daemon = daemon_, prepared, peer = peer_] {
        try {
          index_project(daemon, peer, prepared->launch);
        } catch (...) {
          prepared->error = std::current_exception();
        }
      },
      [this, prepared] {
        if (prepared->error) std::rethrow_exception(prepared->error);
        find_exits_in_window(prepared);
      },
      [this] {
        reject(v1::ERROR_PROJECT_TIMEOUT,
               fmt::format("reading project {} took longer than {} s (is its filesystem hung?)",
                           project_root_, kIndexTimeout.count()));
      },
      kIndexTimeout);
}

void Session::find_exits_in_window(std::shared_ptr<Prepared> prepared) {
  open_walk_window();
  const auto opened = std::chrono::steady_clock::now();
  resolve_off_loop(
      [&daemon = daemon_, prepared, peer = peer_] {
        try {
          find_project_exits(daemon, peer, prepared->launch);
        } catch (...) {
          prepared->error = std::current_exception();
        }
      },
      [this, prepared, opened] {
        if (prepared->error) std::rethrow_exception(prepared->error);
        const ProjectScan& scan = prepared->launch.scan;
        const auto took = std::chrono::duration_cast<std::chrono::microseconds>(
            std::chrono::steady_clock::now() - opened);
        log::info("project_read", {{"session", id_},
                                   {"incremental", scan.incremental},
                                   {"directories", static_cast<int64_t>(scan.directories)},
                                   {"read", static_cast<int64_t>(scan.read)},
                                   {"masks", prepared->launch.plan.masks_size()},
                                   {"pins", prepared->launch.plan.pins_size()},
                                   {"micros", static_cast<int64_t>(took.count())}});
        launch_prepared(prepared);
      },
      [this] {
        reject(v1::ERROR_PROJECT_TIMEOUT,
               fmt::format("reading project {} for its secrets and git metadata took longer "
                           "than {} s (is its filesystem hung?)",
                           project_root_, kSetupTimeout.count()));
      },
      kSetupTimeout);
}

}  // namespace pando::daemon
