// libFuzzer target: the transport frame header check. Any 80 bytes are an
// (expected, received) pair of headers as a rank could see them on a socket
// or in a ring: CheckFrame and DescribeFrame must neither crash nor misbehave,
// and a frame always matches itself unless it is not a braid frame.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "collectives/transport/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 * sizeof(braid::FrameHeader)) return 0;
  braid::FrameHeader expected, got;
  std::memcpy(&expected, data, sizeof(expected));
  std::memcpy(&got, data + sizeof(expected), sizeof(got));
  const int rank = size > 80 ? data[80] % 8 : 0;
  const absl::Status status = braid::CheckFrame(expected, got, rank, (rank + 1) % 8);
  (void)braid::DescribeFrame(expected);
  (void)braid::DescribeFrame(got);
  if (status.ok() && got.magic != braid::FrameHeader::kMagic) std::abort();  // accepted a non-braid frame
  return 0;
}
