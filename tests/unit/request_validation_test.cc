#include "proto/request_validation.h"

#include <gtest/gtest.h>

#include "proto/error.h"
#include "proto/framing.h"

namespace pando::wire {
namespace {

namespace v1 = pando::helper::v1;

// The code `check` throws, ERROR_UNSPECIFIED when it accepts.
template <typename Check>
v1::ErrorCode code_of(Check&& check) {
  try {
    check();
  } catch (const Error& e) {
    return e.code();
  }
  return v1::ERROR_UNSPECIFIED;
}

v1::ErrorCode path_code(const std::string& path) {
  return code_of([&] { check_project_root_string(path); });
}

ValidRequest validate(const std::string& payload) {
  return validate_launch_request(
      std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
}

v1::ErrorCode validate_code(const std::string& payload) {
  return code_of([&] { validate(payload); });
}

std::string request(v1::Role role, const std::string& root) {
  v1::LaunchRequest r;
  r.set_role(role);
  r.set_project_root(root);
  return r.SerializeAsString();
}

TEST(ProjectRootString, AcceptsAbsoluteNormalizedPaths) {
  EXPECT_EQ(path_code("/home/alice/project"), v1::ERROR_UNSPECIFIED);
  EXPECT_EQ(path_code("/a"), v1::ERROR_UNSPECIFIED);
  EXPECT_EQ(path_code("/srv/with space/..dots../.hidden"), v1::ERROR_UNSPECIFIED);
}

TEST(ProjectRootString, RejectsEachMalformedShapeWithItsCode) {
  EXPECT_EQ(path_code(""), v1::ERROR_PATH_EMPTY);
  EXPECT_EQ(path_code("home/alice"), v1::ERROR_PATH_NOT_ABSOLUTE);
  EXPECT_EQ(path_code("./x"), v1::ERROR_PATH_NOT_ABSOLUTE);
  EXPECT_EQ(path_code("/home/alice/"), v1::ERROR_PATH_NOT_NORMALIZED);
  EXPECT_EQ(path_code("/home//alice"), v1::ERROR_PATH_NOT_NORMALIZED);
  EXPECT_EQ(path_code("/home/./alice"), v1::ERROR_PATH_NOT_NORMALIZED);
  EXPECT_EQ(path_code("/home/../etc"), v1::ERROR_PATH_NOT_NORMALIZED);
  EXPECT_EQ(path_code("/home/alice/.."), v1::ERROR_PATH_NOT_NORMALIZED);
  EXPECT_EQ(path_code("/home/alice/."), v1::ERROR_PATH_NOT_NORMALIZED);
  EXPECT_EQ(path_code("//"), v1::ERROR_PATH_NOT_NORMALIZED);
  EXPECT_EQ(path_code(std::string("/home/a\0b", 9)), v1::ERROR_PATH_HAS_NUL);
  EXPECT_EQ(path_code("/" + std::string(kMaxPathBytes, 'a')), v1::ERROR_PATH_TOO_LONG);
  EXPECT_EQ(path_code("/" + std::string(kMaxPathBytes - 1, 'a')), v1::ERROR_UNSPECIFIED);
}

TEST(LaunchRequest, ValidRequestIsReturned) {
  const auto result = validate(request(v1::ROLE_CORE, "/srv/p"));
  EXPECT_EQ(result.role, v1::ROLE_CORE);
  EXPECT_EQ(result.project_root, "/srv/p");
}

TEST(LaunchRequest, UnknownFieldsAreRejected) {
  std::string payload = request(v1::ROLE_WORKSPACE, "/srv/p");
  payload += std::string("\x1a\x02-x", 4);  // field 3, length-delimited
  EXPECT_EQ(validate_code(payload), v1::ERROR_UNKNOWN_FIELDS);
  std::string varint =
      request(v1::ROLE_WORKSPACE, "/srv/p") + std::string("\x78\x01", 2);  // field 15
  EXPECT_EQ(validate_code(varint), v1::ERROR_UNKNOWN_FIELDS);
}

TEST(LaunchRequest, RoleMustBeCoreOrWorkspace) {
  EXPECT_EQ(validate_code(request(v1::ROLE_UNSPECIFIED, "/srv/p")), v1::ERROR_UNKNOWN_ROLE);
  EXPECT_EQ(validate_code(request(static_cast<v1::Role>(3), "/srv/p")), v1::ERROR_UNKNOWN_ROLE);
  EXPECT_EQ(validate_code(request(static_cast<v1::Role>(-1), "/srv/p")), v1::ERROR_UNKNOWN_ROLE);
}

TEST(LaunchRequest, GarbageAndInvalidUtf8AreMalformed) {
  EXPECT_EQ(validate_code("\xff\xff\xff"), v1::ERROR_MALFORMED_REQUEST);
  EXPECT_EQ(validate_code(std::string("\x08\x02\x12\x03/\xc3\x28", 7)),
            v1::ERROR_MALFORMED_REQUEST);
}

TEST(LaunchRequest, PathErrorsComeThrough) {
  EXPECT_EQ(validate_code(request(v1::ROLE_CORE, "rel")), v1::ERROR_PATH_NOT_ABSOLUTE);
  EXPECT_EQ(validate_code(request(v1::ROLE_CORE, "")), v1::ERROR_PATH_EMPTY);
}

TEST(LaunchRequest, OverCapPayloadIsTooLarge) {
  EXPECT_EQ(validate_code(std::string(kMaxControlPayload + 1, 'x')), v1::ERROR_FRAME_TOO_LARGE);
}

// A selftest request is checked exactly like a launch request: every payload gets the same
// answer from both.
TEST(SelftestRequest, ValidatedLikeALaunchRequest) {
  const auto selftest = [](const std::string& payload) {
    return validate_selftest_request(
        std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
  };
  for (const std::string& payload :
       {request(v1::ROLE_CORE, "/srv/p"), request(v1::ROLE_WORKSPACE, "/srv/p"),
        request(v1::ROLE_UNSPECIFIED, "/srv/p"), request(v1::ROLE_CORE, "rel"),
        request(v1::ROLE_CORE, ""), request(v1::ROLE_CORE, "/srv//p"),
        request(v1::ROLE_CORE, "/srv/p") + std::string("\x1a\x02-x", 4),
        std::string("\xff\xff\xff"), std::string(kMaxControlPayload + 1, 'x')}) {
    EXPECT_EQ(code_of([&] { selftest(payload); }), validate_code(payload));
  }
  const auto valid = selftest(request(v1::ROLE_WORKSPACE, "/srv/p"));
  EXPECT_EQ(valid.role, v1::ROLE_WORKSPACE);
  EXPECT_EQ(valid.project_root, "/srv/p");
}

}  // namespace
}  // namespace pando::wire
