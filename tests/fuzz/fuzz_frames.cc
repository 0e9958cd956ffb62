// libFuzzer target: the frame decoder and the launch request validator, the
// first code that touches bytes from an untrusted client.

#include <cstddef>
#include <cstdint>
#include <span>

#include "proto/framing.h"
#include "proto/request_validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using pando::wire::FrameDecoder;
  const std::span<const uint8_t> input(data, size);
  if (size >= pando::wire::kPrefaceSize) {
    (void)pando::wire::check_preface(input.first<pando::wire::kPrefaceSize>());
  }
  FrameDecoder decoder;
  // Feed in uneven chunks so partial headers and payloads are exercised.
  size_t offset = 0;
  size_t chunk = 1;
  while (offset < size) {
    const size_t n = std::min(chunk, size - offset);
    if (!decoder.feed(input.subspan(offset, n))) break;
    while (auto frame = decoder.next()) {
      if (frame->payload.size() > pando::wire::max_payload(frame->type)) __builtin_trap();
      if (frame->type == pando::helper::v1::FRAME_LAUNCH_REQUEST) {
        (void)pando::wire::validate_launch_request(frame->payload);
      }
      if (frame->type == pando::helper::v1::FRAME_SELFTEST_REQUEST) {
        (void)pando::wire::validate_selftest_request(frame->payload);
      }
    }
    offset += n;
    chunk = chunk * 3 + 1;
  }
  (void)pando::wire::validate_launch_request(input);
  return 0;
}
