#pragma once

// Validation of what a client sends before any privileged work happens:
// the LaunchRequest bytes and the project root string. Pure functions, called
// by the protocol core (proto/session_protocol.h); each refusal throws
// pando::Error with its own code.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "proto/error.h"
#include "proto/helper.pb.h"

namespace pando::wire {

struct ValidRequest {
  pando::helper::v1::Role role;
  std::string project_root;
};

// Checks that `path` is absolute, normalized ("//", "/./", "/../", a trailing
// "/", "." or ".." components are refused), free of NUL bytes and not over
// kMaxPathBytes.
void check_project_root_string(std::string_view path);

ValidRequest validate_launch_request(std::span<const uint8_t> payload);

// A SelftestRequest: the same fields as a LaunchRequest, checked the same way.
ValidRequest validate_selftest_request(std::span<const uint8_t> payload);

const char* role_name(pando::helper::v1::Role role);

}  // namespace pando::wire
