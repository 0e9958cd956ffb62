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

}  // namespace pando::wire
