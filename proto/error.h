#pragma once

// The one way pando-helper code reports a failure (see CONTRIBUTING.md): a
// function that can fail throws pando::Error, whose code is the stable
// ErrorCode the caller is shown and whose what() is one line for a human.

#include <stdexcept>
#include <string>

#include "proto/helper.pb.h"

namespace pando {

class Error : public std::runtime_error {
 public:
  Error(pando::helper::v1::ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  pando::helper::v1::ErrorCode code() const { return code_; }

 private:
  pando::helper::v1::ErrorCode code_;
};

// Throws Error(code, "<what>: <strerror(errno)>"), errno read first.
[[noreturn]] void throw_errno(const std::string& what,
                              pando::helper::v1::ErrorCode code = pando::helper::v1::ERROR_LAUNCH_FAILED);

}  // namespace pando
