#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "proto/helper.pb.h"

namespace pando::sandbox {

// Thrown by any setup step of pando-helper-sandbox. The launcher reports it to
// the daemon, which rejects the launch with `code` and the one-line `what()`.
class SetupError : public std::runtime_error {
 public:
  SetupError(pando::helper::v1::ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  pando::helper::v1::ErrorCode code() const { return code_; }

 private:
  pando::helper::v1::ErrorCode code_;
};

// Throws SetupError(ERROR_LAUNCH_FAILED, "<what>: <strerror(errno)>").
[[noreturn]] void throw_errno(const std::string& what);

}  // namespace pando::sandbox
