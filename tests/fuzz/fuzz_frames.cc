// libFuzzer target: the protocol core (proto/session_protocol.h) exactly as the
// daemon and the client drive it, on arbitrary byte streams split at arbitrary
// points, and the request validator it calls. The first input byte picks the
// side (bit 0: the daemon reading a client, or the client reading the daemon),
// direct stdio (bit 1) and the split sizes (the rest); the rest is the stream.

#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>

#include "proto/error.h"
#include "proto/request_validation.h"
#include "proto/session_protocol.h"

namespace {

using pando::wire::SessionProtocol;
using pando::wire::SessionState;

void drive(SessionProtocol& protocol, std::span<const uint8_t> stream, uint8_t control) {
  const bool direct_stdio = (control & 2) != 0;
  size_t piece = (control >> 2) + 1;
  size_t offset = 0;
  while (offset < stream.size()) {
    // What the daemon's session does between the request and the relay.
    if (protocol.state() == SessionState::kResolving) protocol.starting();
    if (protocol.state() == SessionState::kStarting) protocol.running(direct_stdio);
    const size_t left = stream.size() - offset;
    if (protocol.data_left() > 0) {
      const size_t n = std::min<size_t>({protocol.data_left(), piece, left});
      protocol.passed(static_cast<uint32_t>(n));
      offset += n;
      continue;
    }
    const size_t want = protocol.want();
    if (want == 0) break;
    const size_t n = std::min({want, piece, left});
    const bool with_fds = protocol.at_frame_start() && n == pando::wire::kHeaderSize &&
                          (stream[offset] & 1) != 0;
    const auto action = protocol.feed(stream.subspan(offset, n), with_fds);
    offset += n;
    if (std::holds_alternative<pando::wire::action::Reject>(action) &&
        protocol.state() != SessionState::kClosed) {
      __builtin_trap();  // a verdict always ends the connection
    }
    if (protocol.want() > pando::wire::kMaxControlPayload) __builtin_trap();
    piece = piece * 3 % 257 + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  const std::span<const uint8_t> stream(data + 1, size - 1);
  SessionProtocol protocol((control & 1) != 0 ? pando::wire::Sender::kDaemon
                                              : pando::wire::Sender::kClient);
  drive(protocol, stream, control);
  try {
    (void)pando::wire::validate_launch_request(stream);
  } catch (const pando::Error&) {
    // A refusal is an answer; anything else thrown is a finding.
  }
  return 0;
}
