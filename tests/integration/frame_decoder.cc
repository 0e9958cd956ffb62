#include "tests/integration/frame_decoder.h"

namespace pando::testing {

namespace v1 = pando::helper::v1;
using wire::decode_header;
using wire::FrameHeader;
using wire::kHeaderSize;
using wire::kMaxControlPayload;
using wire::kMaxDataPayload;

uint32_t max_payload(uint8_t type) {
  switch (type) {
    case v1::FRAME_STDIN_DATA:
    case v1::FRAME_STDOUT_DATA:
    case v1::FRAME_STDERR_DATA:
      return kMaxDataPayload;
    case v1::FRAME_LAUNCH_REQUEST:
    case v1::FRAME_STDIN_EOF:
    case v1::FRAME_SIGNAL:
    case v1::FRAME_STATUS_REQUEST:
    case v1::FRAME_SELFTEST_REQUEST:
    case v1::FRAME_ACCEPTED:
    case v1::FRAME_REJECTED:
    case v1::FRAME_EXIT:
    case v1::FRAME_STATUS:
      return kMaxControlPayload;
    default:
      return 0;
  }
}

bool FrameDecoder::feed(std::span<const uint8_t> bytes) {
  if (error_ != Error::kNone) return false;
  buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(consumed_));
  consumed_ = 0;
  buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  return check_pending_header();
}

bool FrameDecoder::check_pending_header() {
  if (buffered() < kHeaderSize) return true;
  const FrameHeader header =
      decode_header(std::span<const uint8_t, kHeaderSize>(buffer_.data() + consumed_, kHeaderSize));
  const uint32_t cap = max_payload(header.type);
  if (cap == 0) {
    error_ = Error::kUnknownType;
  } else if (header.length > cap) {
    error_ = Error::kTooLarge;
  }
  return error_ == Error::kNone;
}

std::optional<FrameDecoder::Frame> FrameDecoder::next() {
  if (error_ != Error::kNone || buffered() < kHeaderSize) return std::nullopt;
  const FrameHeader header =
      decode_header(std::span<const uint8_t, kHeaderSize>(buffer_.data() + consumed_, kHeaderSize));
  if (buffered() < kHeaderSize + header.length) return std::nullopt;
  Frame frame;
  frame.type = header.type;
  const auto begin = buffer_.begin() + static_cast<std::ptrdiff_t>(consumed_ + kHeaderSize);
  frame.payload.assign(begin, begin + header.length);
  consumed_ += kHeaderSize + header.length;
  if (consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  }
  check_pending_header();
  return frame;
}

}  // namespace pando::testing
