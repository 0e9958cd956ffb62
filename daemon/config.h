#pragma once

#include <string>

#include "proto/config.pb.h"

namespace pando::daemon {

using pando::helper::config::v1::DaemonConfig;
using pando::helper::config::v1::RoleConfig;

inline constexpr const char* kDefaultSocketPath = "/run/pando/helper.sock";
// Daemon-wide cap on pending work: connections not yet answered or launched,
// and project resolutions still running (see Daemon::add_pending).
inline constexpr unsigned kMaxPending = 256;
// The per-uid limit may not exceed a quarter of it: filling the daemon-wide
// cap always takes several users.
inline constexpr unsigned kMaxPendingPerUid = kMaxPending / 4;

// Parses the protobuf text config at `path`, fills in defaults, and validates
// it. Throws pando::Error (ERROR_CONFIG_INVALID) whose message names the file,
// line and field.
DaemonConfig load_config(const std::string& path);

// Same, from text (for tests). `origin` names the source in messages.
DaemonConfig parse_config(const std::string& text, const std::string& origin);

}  // namespace pando::daemon
