#include "tests/integration/frame_decoder.h"

#include <gtest/gtest.h>

#include <string>

namespace pando::testing {
namespace {

namespace v1 = pando::helper::v1;
using wire::encode_frame;
using wire::encode_header;
using wire::encode_message_frame;
using wire::kMaxControlPayload;
using wire::kMaxDataPayload;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(Caps, DataAndControlFramesHaveCapsUnknownTypesNone) {
  EXPECT_EQ(max_payload(v1::FRAME_STDIN_DATA), kMaxDataPayload);
  EXPECT_EQ(max_payload(v1::FRAME_LAUNCH_REQUEST), kMaxControlPayload);
  EXPECT_EQ(max_payload(0), 0u);
  EXPECT_EQ(max_payload(200), 0u);
}

TEST(Decoder, SplitsFramesFedByteByByte) {
  std::vector<uint8_t> stream;
  for (const auto& payload : {std::string("abc"), std::string(), std::string(5000, '\0')}) {
    const auto frame = encode_frame(v1::FRAME_STDOUT_DATA, bytes(payload));
    stream.insert(stream.end(), frame.begin(), frame.end());
  }
  FrameDecoder decoder;
  std::vector<FrameDecoder::Frame> frames;
  for (uint8_t b : stream) {
    ASSERT_TRUE(decoder.feed(std::span(&b, 1)));
    while (auto frame = decoder.next()) frames.push_back(*frame);
  }
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(std::string(frames[0].payload.begin(), frames[0].payload.end()), "abc");
  EXPECT_TRUE(frames[1].payload.empty());
  EXPECT_EQ(frames[2].payload.size(), 5000u);
  EXPECT_EQ(decoder.buffered(), 0u);
}

TEST(Decoder, RejectsOversizedFrameFromItsHeaderAlone) {
  FrameDecoder decoder;
  const auto header = encode_header(v1::FRAME_LAUNCH_REQUEST, kMaxControlPayload + 1);
  EXPECT_FALSE(decoder.feed(header));
  EXPECT_EQ(decoder.error(), FrameDecoder::Error::kTooLarge);
  EXPECT_FALSE(decoder.next().has_value());
  // Nothing more is accepted once the stream is invalid.
  const uint8_t more = 0;
  EXPECT_FALSE(decoder.feed(std::span(&more, 1)));
}

TEST(Decoder, RejectsDataFrameOverTheDataCap) {
  FrameDecoder decoder;
  EXPECT_FALSE(decoder.feed(encode_header(v1::FRAME_STDOUT_DATA, kMaxDataPayload + 1)));
  EXPECT_EQ(decoder.error(), FrameDecoder::Error::kTooLarge);
  FrameDecoder at_cap;
  EXPECT_TRUE(at_cap.feed(encode_header(v1::FRAME_STDOUT_DATA, kMaxDataPayload)));
}

TEST(Decoder, RejectsUnknownType) {
  FrameDecoder decoder;
  EXPECT_FALSE(decoder.feed(encode_header(static_cast<v1::FrameType>(42), 1)));
  EXPECT_EQ(decoder.error(), FrameDecoder::Error::kUnknownType);
}

TEST(Decoder, MessageFrameCarriesTheSerializedMessage) {
  v1::Exit exit;
  exit.set_exit_code(3);
  exit.set_reason(v1::END_CHILD_EXITED);
  FrameDecoder decoder;
  ASSERT_TRUE(decoder.feed(encode_message_frame(v1::FRAME_EXIT, exit)));
  auto frame = decoder.next();
  ASSERT_TRUE(frame.has_value());
  v1::Exit parsed;
  ASSERT_TRUE(
      parsed.ParseFromArray(frame->payload.data(), static_cast<int>(frame->payload.size())));
  EXPECT_EQ(parsed.exit_code(), 3);
}

}  // namespace
}  // namespace pando::testing
