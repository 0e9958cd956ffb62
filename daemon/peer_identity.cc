#include "daemon/peer_identity.h"

#include <sys/fsuid.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "proto/error.h"

namespace pando::daemon {

PeerIdentity read_peer_identity(int socket_fd) {
  PeerIdentity peer;
  struct ucred cred {};
  socklen_t len = sizeof(cred);
  if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) {
    throw_errno("SO_PEERCRED", pando::helper::v1::ERROR_INTERNAL);
  }
  peer.pid = cred.pid;
  peer.uid = cred.uid;
  peer.gid = cred.gid;
  std::vector<gid_t> groups(64);
  for (;;) {
    socklen_t bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes) == 0) {
      groups.resize(bytes / sizeof(gid_t));
      break;
    }
    if (errno != ERANGE || groups.size() >= 65536) {
      throw_errno("SO_PEERGROUPS", pando::helper::v1::ERROR_INTERNAL);
    }
    groups.resize(bytes / sizeof(gid_t) + 1);
  }
  peer.groups = std::move(groups);
  return peer;
}

namespace {

// setfsuid/setfsgid report the previous value and never fail loudly: read the
// current one back with an invalid id to verify.
bool set_fs_ids(uid_t uid, gid_t gid) {
  setfsgid(gid);
  setfsuid(uid);
  return static_cast<uid_t>(setfsuid(static_cast<uid_t>(-1))) == uid &&
         static_cast<gid_t>(setfsgid(static_cast<gid_t>(-1))) == gid;
}

}  // namespace

CallerFsIdentity::CallerFsIdentity(const PeerIdentity& peer) {
  const int count = getgroups(0, nullptr);
  if (count < 0) throw_errno("getgroups", pando::helper::v1::ERROR_INTERNAL);
  saved_groups_.resize(static_cast<size_t>(count));
  if (getgroups(count, saved_groups_.data()) != count) {
    throw_errno("getgroups", pando::helper::v1::ERROR_INTERNAL);
  }
  // Raw syscall: glibc's setgroups() would apply to every thread.
  if (syscall(SYS_setgroups, peer.groups.size(), peer.groups.data()) != 0) {
    throw_errno("setgroups(caller)", pando::helper::v1::ERROR_INTERNAL);
  }
  if (!set_fs_ids(peer.uid, peer.gid)) {
    if (!set_fs_ids(0, 0)) std::abort();
    errno = EPERM;
    throw_errno("setfsuid(caller)", pando::helper::v1::ERROR_INTERNAL);
  }
}

CallerFsIdentity::~CallerFsIdentity() {
  if (!set_fs_ids(0, 0)) std::abort();
  if (syscall(SYS_setgroups, saved_groups_.size(), saved_groups_.data()) != 0) std::abort();
}

}  // namespace pando::daemon
