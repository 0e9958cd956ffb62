// What a daemon start finds of an earlier instance's sessions (CgroupManager::
// remove_stale_sessions): their cgroups, still holding whatever that instance left running.

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "common/json_log.h"
#include "daemon/cgroup_version.h"
#include "daemon/cgroups.h"

namespace pando::daemon {

using namespace cgroup_fs;

namespace {

// Names of the subdirectories of `dir` for which `wanted` holds; none when `dir` is gone.
std::vector<std::string> subdirs(const std::string& dir,
                                 const std::function<bool(std::string_view)>& wanted) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) {
    if (errno == ENOENT) return out;
    fail("opendir " + dir, errno);
  }
  while (dirent* e = readdir(d)) {
    if (e->d_type == DT_DIR && wanted(e->d_name)) out.emplace_back(e->d_name);
  }
  closedir(d);
  return out;
}

}  // namespace

bool CgroupManager::is_session_name(std::string_view name) {
  return name.starts_with(kSessionPrefix) &&
         cgroup_text::valid_session_id(name.substr(kSessionPrefix.size()));
}

std::optional<uid_t> CgroupManager::caller_uid(std::string_view name) {
  if (!name.starts_with(kCallerPrefix)) return std::nullopt;
  // from_chars takes only digits for an unsigned type: a sign, a space or no digit fails.
  const std::string_view digits = name.substr(kCallerPrefix.size());
  uid_t uid = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), uid);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return uid;
}

std::unique_ptr<SessionCgroup> CgroupManager::adopt(const std::string& name,
                                                    std::shared_ptr<CallerCgroup> caller) const {
  std::vector<SessionCgroup::Dir> dirs;
  for (const auto& p : parents_) {
    SessionCgroup::Dir d = p;
    d.path = p.path + "/" + name;
    if (exists(d.path)) dirs.push_back(d);
  }
  return std::unique_ptr<SessionCgroup>(
      new SessionCgroup(name, std::move(dirs), std::move(caller)));
}

std::map<std::string, std::shared_ptr<CallerCgroup>> CgroupManager::take_over_callers(
    const std::set<std::string>& callers, const CallerLimits& limits) {
  std::map<std::string, std::shared_ptr<CallerCgroup>> taken_over;
  for (const auto& caller : callers) {
    try {
      taken_over[caller] = caller_cgroup(*caller_uid(caller), limits);
    } catch (const std::exception& e) {
      log::error("stale_caller_not_taken_over",
                 {{"cgroup", caller}, {"error", std::string(e.what())}});
    }
  }
  return taken_over;
}

CgroupManager::StaleSessions CgroupManager::remove_stale_sessions(
    const CallerLimits& caller_limits) {
  std::set<std::string> names;  // below the parents: session-<id> or caller-<uid>/session-<id>
  std::set<std::string> callers;
  const auto is_caller_name = [](std::string_view name) { return caller_uid(name).has_value(); };
  for (const auto& p : parents_) {
    for (const auto& name : subdirs(p.path, is_session_name)) names.insert(name);
    for (const auto& caller : subdirs(p.path, is_caller_name)) {
      callers.insert(caller);
      for (const auto& name : subdirs(p.path + "/" + caller, is_session_name)) {
        names.insert(caller + "/" + name);
      }
    }
  }
  auto taken_over = take_over_callers(callers, caller_limits);
  // Every session killed first, then one wait for all: their processes die side by side.
  std::vector<std::pair<std::string, std::unique_ptr<SessionCgroup>>> stale;
  for (const auto& name : names) {
    auto caller = taken_over.find(name.substr(0, name.find('/')));
    stale.emplace_back(name, adopt(name, caller == taken_over.end() ? nullptr : caller->second));
    stale.back().second->kill_all();
  }
  StaleSessions out;
  const auto deadline = std::chrono::steady_clock::now() + kStaleExitWait;
  for (auto& [name, session] : stale) {
    const auto left = std::max(deadline - std::chrono::steady_clock::now(),
                               std::chrono::steady_clock::duration::zero());
    session->wait_empty(std::chrono::duration_cast<std::chrono::milliseconds>(left));
    if (session->remove()) {
      out.removed.push_back(name);
    } else {
      out.busy.push_back(std::move(session));
    }
  }
  std::erase_if(callers, [&](const std::string& caller) { return taken_over.contains(caller); });
  taken_over.clear();
  remove_idle_callers(std::chrono::steady_clock::now(), {});
  for (const auto& caller : callers) {  // one not taken over goes now, or stays (logged)
    std::vector<SessionCgroup::Dir> dirs;
    for (const auto& p : parents_) dirs.push_back({.path = p.path + "/" + caller});
    const CallerCgroup left_over(std::move(dirs));
  }
  return out;
}

}  // namespace pando::daemon
