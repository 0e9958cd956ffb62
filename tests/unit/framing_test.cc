#include "proto/framing.h"

#include <gtest/gtest.h>

namespace pando::wire {
namespace {

namespace v1 = pando::helper::v1;

TEST(Preface, AcceptsItsOwnVersion) {
  const auto preface = make_preface();
  EXPECT_EQ(check_preface(preface), PrefaceCheck::kOk);
  EXPECT_EQ(std::string(preface.begin(), preface.begin() + 4), "PNDH");
}

TEST(Preface, RejectsOtherVersionsAndMagic) {
  EXPECT_EQ(check_preface(make_preface(2)), PrefaceCheck::kUnsupportedVersion);
  EXPECT_EQ(check_preface(make_preface(0)), PrefaceCheck::kUnsupportedVersion);
  auto garbage = make_preface();
  garbage[0] = 'G';
  EXPECT_EQ(check_preface(garbage), PrefaceCheck::kBadMagic);
}

TEST(Header, RoundTripsBigEndianLength) {
  const auto header = encode_header(v1::FRAME_STDOUT_DATA, 0x01020304);
  EXPECT_EQ(header[0], 1);
  EXPECT_EQ(header[3], 4);
  const FrameHeader decoded = decode_header(header);
  EXPECT_EQ(decoded.length, 0x01020304u);
  EXPECT_EQ(decoded.type, v1::FRAME_STDOUT_DATA);
}

}  // namespace
}  // namespace pando::wire
