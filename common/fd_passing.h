#pragma once

#include <sys/types.h>

#include <cstddef>
#include <span>
#include <vector>

#include "common/unique_fd.h"

namespace pando {

// sendmsg() of `size` bytes from `data` with `fds` attached to the first byte
// (SCM_RIGHTS), retried on EINTR. Returns what sendmsg() returned (errno set
// on -1); a short count leaves the rest of the bytes to the caller.
ssize_t send_with_fds(int socket, const void* data, size_t size, std::span<const int> fds);

// recvmsg() into `data` with room for `max_fds` attached fds, which are
// appended to `fds` (close-on-exec); `flags` are added to MSG_CMSG_CLOEXEC.
// Retried on EINTR. Returns what recvmsg() returned; *truncated says whether
// the data or the fds did not fit (MSG_TRUNC / MSG_CTRUNC).
ssize_t receive_with_fds(int socket, void* data, size_t size, size_t max_fds, int flags,
                         std::vector<UniqueFd>& fds, bool& truncated);

}  // namespace pando
