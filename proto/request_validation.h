#pragma once

// Validation of what a client sends before any privileged work happens:
// the LaunchRequest bytes and the project root string. Pure functions, shared
// by the daemon and the fuzz target.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "proto/helper.pb.h"

namespace pando::wire {

struct RequestError {
  pando::helper::v1::ErrorCode code;
  std::string message;  // one line
};

struct ValidRequest {
  pando::helper::v1::Role role;
  std::string project_root;
};

// Checks that `path` is absolute, normalized ("//", "/./", "/../", a trailing
// "/", "." or ".." components are refused), free of NUL bytes and not over
// kMaxPathBytes. Returns code ERROR_UNSPECIFIED when the string is acceptable.
RequestError check_project_root_string(std::string_view path);

std::variant<ValidRequest, RequestError> validate_launch_request(std::span<const uint8_t> payload);

// A SelftestRequest: the same fields as a LaunchRequest, checked the same way.
std::variant<ValidRequest, RequestError> validate_selftest_request(
    std::span<const uint8_t> payload);

const char* role_name(pando::helper::v1::Role role);

}  // namespace pando::wire
