#include "proto/framing.h"

#include <algorithm>
#include <cstring>

namespace pando::wire {

namespace v1 = pando::helper::v1;

std::array<uint8_t, kPrefaceSize> make_preface(uint32_t version) {
  return {kMagic[0],
          kMagic[1],
          kMagic[2],
          kMagic[3],
          static_cast<uint8_t>(version >> 24),
          static_cast<uint8_t>(version >> 16),
          static_cast<uint8_t>(version >> 8),
          static_cast<uint8_t>(version)};
}

PrefaceCheck check_preface(std::span<const uint8_t, kPrefaceSize> preface) {
  if (!std::equal(kMagic.begin(), kMagic.end(), preface.begin())) return PrefaceCheck::kBadMagic;
  const uint32_t version = (uint32_t{preface[4]} << 24) | (uint32_t{preface[5]} << 16) |
                           (uint32_t{preface[6]} << 8) | uint32_t{preface[7]};
  return version == kProtocolVersion ? PrefaceCheck::kOk : PrefaceCheck::kUnsupportedVersion;
}

std::array<uint8_t, kHeaderSize> encode_header(FrameType type, uint32_t length) {
  return {static_cast<uint8_t>(length >> 24), static_cast<uint8_t>(length >> 16),
          static_cast<uint8_t>(length >> 8), static_cast<uint8_t>(length),
          static_cast<uint8_t>(type)};
}

FrameHeader decode_header(std::span<const uint8_t, kHeaderSize> bytes) {
  FrameHeader header;
  header.length = (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) |
                  (uint32_t{bytes[2]} << 8) | uint32_t{bytes[3]};
  header.type = bytes[4];
  return header;
}

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

std::vector<uint8_t> encode_frame(FrameType type, std::span<const uint8_t> payload) {
  const auto header = encode_header(type, static_cast<uint32_t>(payload.size()));
  std::vector<uint8_t> out(header.size() + payload.size());
  std::memcpy(out.data(), header.data(), header.size());
  if (!payload.empty()) std::memcpy(out.data() + header.size(), payload.data(), payload.size());
  return out;
}

std::vector<uint8_t> encode_message_frame(FrameType type,
                                          const google::protobuf::MessageLite& msg) {
  const std::string payload = msg.SerializeAsString();
  return encode_frame(type,
                      std::span(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
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

}  // namespace pando::wire
