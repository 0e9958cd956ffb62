#include "daemon/sandbox/setup_error.h"

#include <cerrno>
#include <cstring>

namespace pando::sandbox {

void throw_errno(const std::string& what) {
  const int saved = errno;
  throw SetupError(pando::helper::v1::ERROR_LAUNCH_FAILED, what + ": " + std::strerror(saved));
}

}  // namespace pando::sandbox
