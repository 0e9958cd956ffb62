#include "proto/request_validation.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "proto/error.h"
#include "proto/framing.h"

namespace pando::wire {

namespace v1 = pando::helper::v1;

const char* role_name(v1::Role role) {
  switch (role) {
    case v1::ROLE_CORE:
      return "core";
    case v1::ROLE_WORKSPACE:
      return "workspace";
    default:
      return "unknown";
  }
}

namespace {

// Lite messages keep unknown fields without an API to ask for them: walk the
// (already parsed, so well-formed) wire bytes for any field number but 1 and 2.
bool has_unknown_fields(std::span<const uint8_t> payload) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(payload.data(), static_cast<int>(payload.size()));
  while (const uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    if (field != v1::LaunchRequest::kRoleFieldNumber &&
        field != v1::LaunchRequest::kProjectRootFieldNumber) {
      return true;
    }
    if (!WireFormatLite::SkipField(&in, tag)) return true;
  }
  return false;
}

}  // namespace

void check_project_root_string(std::string_view path) {
  if (path.empty()) throw Error(v1::ERROR_PATH_EMPTY, "project root is empty");
  if (path.find('\0') != std::string_view::npos) {
    throw Error(v1::ERROR_PATH_HAS_NUL, "project root contains a NUL byte");
  }
  if (path.size() > kMaxPathBytes) {
    throw Error(v1::ERROR_PATH_TOO_LONG,
                "project root is longer than " + std::to_string(kMaxPathBytes) + " bytes");
  }
  if (path.front() != '/') throw Error(v1::ERROR_PATH_NOT_ABSOLUTE, "project root is not absolute");
  if (path.size() > 1 && path.back() == '/') {
    throw Error(v1::ERROR_PATH_NOT_NORMALIZED, "project root has a trailing '/'");
  }
  size_t start = 1;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string_view component = path.substr(start, end - start);
    if (path.size() > 1 && component.empty()) {
      throw Error(v1::ERROR_PATH_NOT_NORMALIZED, "project root contains an empty component ('//')");
    }
    if (component == "." || component == "..") {
      throw Error(v1::ERROR_PATH_NOT_NORMALIZED,
                  "project root contains a '" + std::string(component) + "' component");
    }
    start = end + 1;
  }
}

namespace {

// SelftestRequest has LaunchRequest's fields with the same numbers, so one
// check serves both; `what` names the request in messages.
template <typename Request>
ValidRequest validate_request(std::span<const uint8_t> payload, const std::string& what) {
  static_assert(static_cast<int>(Request::kRoleFieldNumber) ==
                    static_cast<int>(v1::LaunchRequest::kRoleFieldNumber) &&
                static_cast<int>(Request::kProjectRootFieldNumber) ==
                    static_cast<int>(v1::LaunchRequest::kProjectRootFieldNumber));
  if (payload.size() > kMaxControlPayload) {
    throw Error(v1::ERROR_FRAME_TOO_LARGE, what + " is too large");
  }
  Request request;
  if (!request.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    throw Error(v1::ERROR_MALFORMED_REQUEST,
                what + " does not parse (malformed protobuf or invalid UTF-8)");
  }
  if (has_unknown_fields(payload)) {
    throw Error(v1::ERROR_UNKNOWN_FIELDS, what + " carries fields this daemon does not define");
  }
  if (request.role() != v1::ROLE_CORE && request.role() != v1::ROLE_WORKSPACE) {
    throw Error(v1::ERROR_UNKNOWN_ROLE, "role must be core or workspace");
  }
  check_project_root_string(request.project_root());
  return ValidRequest{request.role(), request.project_root()};
}

}  // namespace

ValidRequest validate_launch_request(std::span<const uint8_t> payload) {
  return validate_request<v1::LaunchRequest>(payload, "launch request");
}

ValidRequest validate_selftest_request(std::span<const uint8_t> payload) {
  return validate_request<v1::SelftestRequest>(payload, "selftest request");
}

}  // namespace pando::wire
