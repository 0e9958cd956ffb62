#pragma once

// Framing shared by the client and the daemon (see proto/helper.proto).

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "proto/helper.pb.h"

namespace pando::wire {

using pando::helper::v1::FrameType;

inline constexpr std::array<uint8_t, 4> kMagic = {'P', 'N', 'D', 'H'};
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kPrefaceSize = 8;
inline constexpr size_t kHeaderSize = 5;

// Payload caps, checked before anything is allocated or read.
inline constexpr uint32_t kMaxControlPayload = 8 * 1024;
inline constexpr uint32_t kMaxDataPayload = 1024 * 1024;
// Longest accepted project root, in bytes (PATH_MAX includes the NUL).
inline constexpr size_t kMaxPathBytes = 4095;

std::array<uint8_t, kPrefaceSize> make_preface(uint32_t version = kProtocolVersion);

enum class PrefaceCheck { kOk, kBadMagic, kUnsupportedVersion };
PrefaceCheck check_preface(std::span<const uint8_t, kPrefaceSize> preface);

struct FrameHeader {
  uint32_t length = 0;
  uint8_t type = 0;
};

std::array<uint8_t, kHeaderSize> encode_header(FrameType type, uint32_t length);
FrameHeader decode_header(std::span<const uint8_t, kHeaderSize> bytes);

// Header + payload as one buffer, for control frames.
std::vector<uint8_t> encode_frame(FrameType type, std::span<const uint8_t> payload);
std::vector<uint8_t> encode_message_frame(FrameType type, const google::protobuf::MessageLite& msg);

}  // namespace pando::wire
