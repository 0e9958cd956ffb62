#pragma once

// The integration tests' own reader of daemon frames, whatever the state: an
// oracle written apart from the protocol core (proto/session_protocol.cc) that
// the daemon and the client use. It rejects a frame whose declared length
// exceeds the cap for its type as soon as its header is complete, before
// buffering any of its payload.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "proto/framing.h"

namespace pando::testing {

// Largest payload of a frame type in either direction; 0 when the type is unknown.
uint32_t max_payload(uint8_t type);

class FrameDecoder {
 public:
  enum class Error { kNone, kUnknownType, kTooLarge };
  struct Frame {
    uint8_t type = 0;
    std::vector<uint8_t> payload;
  };

  // Appends bytes; returns false once the stream is invalid (see error()).
  bool feed(std::span<const uint8_t> bytes);
  // Next complete frame, if any.
  std::optional<Frame> next();
  Error error() const { return error_; }
  size_t buffered() const { return buffer_.size() - consumed_; }

 private:
  bool check_pending_header();
  std::vector<uint8_t> buffer_;
  size_t consumed_ = 0;
  Error error_ = Error::kNone;
};

}  // namespace pando::testing
