#include "store/wire.h"

#include "absl/strings/str_cat.h"

namespace braid::store_internal {

std::string OpcodeName(uint8_t opcode) {
  switch (static_cast<Opcode>(opcode)) {
    case Opcode::kHello: return "Hello";
    case Opcode::kSet: return "Set";
    case Opcode::kGet: return "Get";
    case Opcode::kAdd: return "Add";
    case Opcode::kCompareSet: return "CompareSet";
    case Opcode::kWait: return "Wait";
    case Opcode::kCheck: return "Check";
    case Opcode::kDelete: return "Delete";
    case Opcode::kNumKeys: return "NumKeys";
    case Opcode::kArrive: return "Arrive";
    case Opcode::kPut: return "Put";
  }
  return absl::StrCat("opcode ", opcode);
}

uint32_t DecodeU32(const char* data) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  return static_cast<uint32_t>(bytes[0]) | static_cast<uint32_t>(bytes[1]) << 8 |
         static_cast<uint32_t>(bytes[2]) << 16 | static_cast<uint32_t>(bytes[3]) << 24;
}

FrameWriter& FrameWriter::U8(uint8_t value) {
  frame_.push_back(static_cast<char>(value));
  return *this;
}

FrameWriter& FrameWriter::U32(uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8) frame_.push_back(static_cast<char>(value >> shift));
  return *this;
}

FrameWriter& FrameWriter::I64(int64_t value) {
  const auto bits = static_cast<uint64_t>(value);
  for (int shift = 0; shift < 64; shift += 8) frame_.push_back(static_cast<char>(bits >> shift));
  return *this;
}

FrameWriter& FrameWriter::String(absl::string_view value) {
  U32(static_cast<uint32_t>(value.size()));
  frame_.append(value.data(), value.size());
  return *this;
}

std::string FrameWriter::Finish() && {
  const auto length = static_cast<uint32_t>(frame_.size() - kFrameHeaderBytes);
  for (int i = 0; i < 4; ++i) frame_[i] = static_cast<char>(length >> (8 * i));
  return std::move(frame_);
}

bool FieldReader::U8(uint8_t* value) {
  if (rest_.empty()) return false;
  *value = static_cast<uint8_t>(rest_[0]);
  rest_.remove_prefix(1);
  return true;
}

bool FieldReader::U32(uint32_t* value) {
  if (rest_.size() < 4) return false;
  *value = DecodeU32(rest_.data());
  rest_.remove_prefix(4);
  return true;
}

bool FieldReader::I64(int64_t* value) {
  if (rest_.size() < 8) return false;
  uint64_t bits = 0;
  for (int i = 7; i >= 0; --i) bits = bits << 8 | static_cast<unsigned char>(rest_[i]);
  *value = static_cast<int64_t>(bits);
  rest_.remove_prefix(8);
  return true;
}

bool FieldReader::String(std::string* value) {
  // Checks the claimed length against what is really there before copying,
  // so a lying length allocates nothing.
  if (rest_.size() < 4) return false;
  const uint32_t length = DecodeU32(rest_.data());
  if (rest_.size() - 4 < length) return false;
  value->assign(rest_.data() + 4, length);
  rest_.remove_prefix(4 + static_cast<size_t>(length));
  return true;
}

}  // namespace braid::store_internal
