// The store's wire format, shared by StoreServer and TcpStore (internal to
// store/; the format itself is documented in tcp_store.h). A
// FrameWriter builds one length-prefixed frame; a FieldReader walks a
// received payload and reports truncation instead of reading past its end.
// Both are plain values used by one thread at a time.
#ifndef BRAID_STORE_WIRE_H_
#define BRAID_STORE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace braid::store_internal {

inline constexpr uint8_t kProtocolVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 4;  // u32 little-endian payload length

enum class Opcode : uint8_t {
  // The authentication handshake (tcp_store.h).
  kHello = 0,
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kCompareSet = 4,
  kWait = 5,
  kCheck = 6,
  kDelete = 7,
  kNumKeys = 8,
  kArrive = 9,
  // Set without an answer (TcpStore::Set).
  kPut = 10,
};

// "Set", "Get", ... or "opcode N" for one this version does not know.
std::string OpcodeName(uint8_t opcode);

// Builds one frame: reserves the length header, appends fields, and Finish()
// fills in the length.
class FrameWriter {
 public:
  FrameWriter() : frame_(kFrameHeaderBytes, '\0') {}
  FrameWriter& U8(uint8_t value);
  FrameWriter& U32(uint32_t value);
  FrameWriter& I64(int64_t value);
  FrameWriter& String(absl::string_view value);  // u32 length, then the bytes
  // The finished frame (header + payload). The writer is spent afterwards.
  std::string Finish() &&;

 private:
  std::string frame_;
};

// Reads fields from a payload. Every Read returns false (and reads nothing)
// when the payload has too few bytes left.
class FieldReader {
 public:
  explicit FieldReader(absl::string_view payload) : rest_(payload) {}
  bool U8(uint8_t* value);
  bool U32(uint32_t* value);
  bool I64(int64_t* value);
  bool String(std::string* value);
  size_t remaining() const { return rest_.size(); }

 private:
  absl::string_view rest_;
};

// Little-endian decode of a frame header (at least 4 bytes at `data`).
uint32_t DecodeU32(const char* data);

}  // namespace braid::store_internal

#endif  // BRAID_STORE_WIRE_H_
