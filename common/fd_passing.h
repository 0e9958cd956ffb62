#pragma once

#include <sys/types.h>

#include <cstddef>
#include <span>

namespace pando {

// sendmsg() of `size` bytes from `data` with `fds` attached to the first byte
// (SCM_RIGHTS), retried on EINTR. Returns what sendmsg() returned (errno set
// on -1); a short count leaves the rest of the bytes to the caller.
ssize_t send_with_fds(int socket, const void* data, size_t size, std::span<const int> fds);

}  // namespace pando
