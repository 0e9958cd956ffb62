#include "proto/error.h"

#include <cerrno>
#include <cstring>

namespace pando {

void throw_errno(const std::string& what, pando::helper::v1::ErrorCode code) {
  const int saved = errno;
  throw Error(code, what + ": " + std::strerror(saved));
}

}  // namespace pando
