#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace pando::daemon {

// Who is on the other end of a connected Unix socket, as the kernel says
// (SO_PEERCRED, SO_PEERGROUPS), captured at connect time. Never taken from
// request bytes.
struct PeerIdentity {
  pid_t pid = -1;
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  std::vector<gid_t> groups;
};

// Throws pando::Error (ERROR_INTERNAL) when the kernel does not answer.
PeerIdentity read_peer_identity(int socket_fd);

// Runs filesystem operations of this thread with the caller's fsuid, fsgid and
// supplementary groups, so the kernel applies the caller's permissions (and
// files the daemon creates belong to the caller). Root's DAC capabilities are
// inactive while a non-zero fsuid is set. Restores root on destruction and
// aborts the process if that fails: continuing with a wrong identity is worse.
// The daemon's event loop is single-threaded; fsuid/fsgid and the raw
// setgroups syscall are per-thread, so nothing else is affected.
class CallerFsIdentity {
 public:
  explicit CallerFsIdentity(const PeerIdentity& peer);
  ~CallerFsIdentity();
  CallerFsIdentity(const CallerFsIdentity&) = delete;
  CallerFsIdentity& operator=(const CallerFsIdentity&) = delete;

 private:
  std::vector<gid_t> saved_groups_;
};

}  // namespace pando::daemon
