#include "bench/bench_common.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/socket.h"

namespace braid::bench {
namespace {

// ---------------------------------------------------------------------------
// Check data

// SplitMix64's finalizer: a cheap, well-mixed hash of (rank, element).
uint64_t Mix(int rank, size_t i) {
  uint64_t x = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank) * 0xd1b54a32d192ed03ull +
               0x632be59bd9b4e019ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int SmallValue(int rank, size_t i) {
  return static_cast<int>((static_cast<uint64_t>(rank) * 7 + (i % 17) * 3) % 17) - 8;
}

double ProdValue(int rank, size_t i) {
  static constexpr double kFactors[4] = {1, 2, 0.5, -1};
  return kFactors[Mix(rank, i) & 3];
}

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename T>
T FromDouble(double value) {
  if constexpr (std::is_same_v<T, Half>) {
    return FloatToHalf(static_cast<float>(value));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return FloatToBFloat16(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

// The value rank `rank` contributes at element i.
template <typename T>
T InputValue(ReduceOp op, int rank, size_t i) {
  if constexpr (kIsFloat<T>) {
    return FromDouble<T>(op == ReduceOp::kProd ? ProdValue(rank, i) : SmallValue(rank, i));
  } else {
    return static_cast<T>(Mix(rank, i));  // full range; truncation keeps the low bits
  }
}

template <typename T>
T ExpectedValue(ReduceOp op, int world_size, size_t i) {
  if constexpr (kIsFloat<T>) {
    if (op == ReduceOp::kProd) {
      double product = 1;
      for (int r = 0; r < world_size; ++r) product *= ProdValue(r, i);
      return FromDouble<T>(product);
    }
    int acc = SmallValue(0, i);
    for (int r = 1; r < world_size; ++r) {
      const int v = SmallValue(r, i);
      switch (op) {
        case ReduceOp::kMin: acc = std::min(acc, v); break;
        case ReduceOp::kMax: acc = std::max(acc, v); break;
        default: acc += v; break;
      }
    }
    if (op != ReduceOp::kAvg) return FromDouble<T>(acc);
    // One division of the exact sum, in the precision the kernels divide in.
    if constexpr (std::is_same_v<T, double>) {
      return static_cast<double>(acc) / static_cast<double>(world_size);
    } else {
      return FromDouble<T>(static_cast<float>(acc) / static_cast<float>(world_size));
    }
  } else {
    using U = std::make_unsigned_t<T>;
    T acc = InputValue<T>(op, 0, i);
    for (int r = 1; r < world_size; ++r) {
      const T v = InputValue<T>(op, r, i);
      switch (op) {
        case ReduceOp::kMin: acc = std::min(acc, v); break;
        case ReduceOp::kMax: acc = std::max(acc, v); break;
        // Wrapping arithmetic, without signed-overflow undefined behaviour.
        case ReduceOp::kProd: acc = static_cast<T>(static_cast<uint64_t>(static_cast<U>(acc)) * static_cast<U>(v)); break;
        default: acc = static_cast<T>(static_cast<uint64_t>(static_cast<U>(acc)) + static_cast<U>(v)); break;
      }
    }
    if (op == ReduceOp::kAvg) acc = static_cast<T>(static_cast<int64_t>(acc) / world_size);
    return acc;
  }
}

template <typename W>
int64_t CountWordMismatches(absl::Span<const std::byte> expected, absl::Span<const std::byte> actual) {
  const size_t n = std::min(expected.size(), actual.size()) / sizeof(W);
  int64_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    W a;
    W b;
    std::memcpy(&a, expected.data() + i * sizeof(W), sizeof(W));
    std::memcpy(&b, actual.data() + i * sizeof(W), sizeof(W));
    wrong += a != b;
  }
  return wrong;
}

}  // namespace

absl::StatusOr<uint64_t> ParseBytes(absl::string_view text) {
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  uint64_t scale = 1;
  // Accept "b", "kb", "kib" and bare "k" spellings.
  if (absl::EndsWith(s, "ib")) {
    s.resize(s.size() - 2);
    if (s.empty() || (s.back() != 'k' && s.back() != 'm' && s.back() != 'g')) {
      return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a byte count (e.g. 8, 64K, 1M, 2G)"));
    }
  } else if (absl::EndsWith(s, "b")) {
    s.resize(s.size() - 1);
  }
  if (!s.empty()) {
    switch (s.back()) {
      case 'k': scale = uint64_t{1} << 10; break;
      case 'm': scale = uint64_t{1} << 20; break;
      case 'g': scale = uint64_t{1} << 30; break;
      default: break;
    }
    if (scale != 1) s.pop_back();
  }
  uint64_t value = 0;
  if (s.empty() || !absl::SimpleAtoi(s, &value) || s[0] == '-' || s[0] == '+') {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a byte count (e.g. 8, 64K, 1M, 2G)"));
  }
  if (value > std::numeric_limits<uint64_t>::max() / scale) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is too large"));
  }
  return value * scale;
}

absl::StatusOr<int64_t> ParseInt(absl::string_view text, int64_t lo, int64_t hi) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < lo || value > hi) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not an integer in [", lo, ", ", hi, "]"));
  }
  return value;
}

std::vector<Flag> CommonFlags(CommonOptions* o) {
  std::vector<Flag> flags;
  flags.push_back({'b', "minbytes", "BYTES", "smallest size (default 8; K/M/G suffixes)",
                   [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<uint64_t> bytes = ParseBytes(v);
                     if (!bytes.ok()) return bytes.status();
                     o->min_bytes = *bytes;
                     return absl::OkStatus();
                   }});
  flags.push_back({'e', "maxbytes", "BYTES", "largest size (default 64M)", [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<uint64_t> bytes = ParseBytes(v);
                     if (!bytes.ok()) return bytes.status();
                     o->max_bytes = *bytes;
                     return absl::OkStatus();
                   }});
  flags.push_back({'f', "stepfactor", "N", "multiply the size by N each step (default 2)",
                   [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<int64_t> n = ParseInt(v, 2, 1 << 20);
                     if (!n.ok()) return n.status();
                     o->step_factor = *n;
                     o->step_factor_given = true;
                     return absl::OkStatus();
                   }});
  flags.push_back({'i', "stepbytes", "BYTES", "add BYTES each step instead of multiplying (alternative to -f)",
                   [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<uint64_t> bytes = ParseBytes(v);
                     if (!bytes.ok()) return bytes.status();
                     if (*bytes == 0) return absl::InvalidArgumentError("must be positive");
                     o->step_bytes = *bytes;
                     return absl::OkStatus();
                   }});
  flags.push_back({'n', "iters", "N", "timed iterations per size (default 20)", [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<int64_t> n = ParseInt(v, 1, 1 << 24);
                     if (!n.ok()) return n.status();
                     o->iters = static_cast<int>(*n);
                     return absl::OkStatus();
                   }});
  flags.push_back({'w', "warmup_iters", "N", "untimed iterations before each timing (default 5)",
                   [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<int64_t> n = ParseInt(v, 0, 1 << 24);
                     if (!n.ok()) return n.status();
                     o->warmup_iters = static_cast<int>(*n);
                     return absl::OkStatus();
                   }});
  flags.push_back({'c', "check", "0|1", "1: verify every size once, exactly, before timing it (default 1)",
                   [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<int64_t> n = ParseInt(v, 0, 1);
                     if (!n.ok()) return n.status();
                     o->check = static_cast<int>(*n);
                     return absl::OkStatus();
                   }});
  flags.push_back({'d', "datatype", "TYPE", "float (default), double, half, bfloat16, int8, uint8, int32, int64",
                   [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<DType> dtype = ParseDType(v);
                     if (!dtype.ok()) {
                       return absl::InvalidArgumentError(absl::StrCat(
                           "unknown datatype \"", v, "\" (float, double, half, bfloat16, int8, uint8, int32, int64)"));
                     }
                     o->dtype = *dtype;
                     return absl::OkStatus();
                   }});
  flags.push_back({'o', "op", "OP", "sum (default), prod, min, max, avg", [o](absl::string_view v) -> absl::Status {
                     absl::StatusOr<ReduceOp> op = ParseReduceOp(v);
                     if (!op.ok()) {
                       return absl::InvalidArgumentError(
                           absl::StrCat("unknown op \"", v, "\" (sum, prod, min, max, avg)"));
                     }
                     o->op = *op;
                     return absl::OkStatus();
                   }});
  flags.push_back({0, "json", "FILE", "also write every row and a machine description to FILE (rank 0)",
                   [o](absl::string_view v) -> absl::Status {
                     if (v.empty()) return absl::InvalidArgumentError("needs a file name");
                     o->json_path = std::string(v);
                     return absl::OkStatus();
                   }});
  return flags;
}

absl::Status ValidateCommon(const CommonOptions& o) {
  if (o.step_bytes > 0 && o.step_factor_given) {
    return absl::InvalidArgumentError("-f/--stepfactor and -i/--stepbytes are alternatives: give one");
  }
  if (o.min_bytes > o.max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("-b/--minbytes (", o.min_bytes, ") is larger than -e/--maxbytes (", o.max_bytes, ")"));
  }
  if (o.max_bytes > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("-e/--maxbytes ", o.max_bytes, " is beyond 1 TiB"));
  }
  if (o.max_bytes / DTypeSize(o.dtype) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("-e/--maxbytes ", o.max_bytes, " holds no ", NcclTypeName(o.dtype),
                                                   " element"));
  }
  return absl::OkStatus();
}

std::vector<size_t> SweepCounts(const CommonOptions& o) {
  std::vector<size_t> counts;
  const size_t element = DTypeSize(o.dtype);
  uint64_t size = o.min_bytes;
  while (size <= o.max_bytes) {
    counts.push_back(static_cast<size_t>(size / element));
    const uint64_t next = o.step_bytes > 0 ? size + o.step_bytes : size * static_cast<uint64_t>(o.step_factor);
    if (next <= size) break;  // -b 0 with a factor: a single size
    size = next;
  }
  return counts;
}

const char* NcclTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float";
    case DType::kF64: return "double";
    case DType::kF16: return "half";
    case DType::kBF16: return "bfloat16";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "?";
}

void FillCheckInput(DType dtype, ReduceOp op, int rank, absl::Span<std::byte> data, size_t first) {
  DispatchDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    const size_t n = data.size() / sizeof(T);
    T* out = reinterpret_cast<T*>(data.data());
    for (size_t i = 0; i < n; ++i) out[i] = InputValue<T>(op, rank, first + i);
  });
}

void FillExpected(DType dtype, ReduceOp op, int world_size, absl::Span<std::byte> data, size_t first) {
  DispatchDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    const size_t n = data.size() / sizeof(T);
    T* out = reinterpret_cast<T*>(data.data());
    for (size_t i = 0; i < n; ++i) out[i] = ExpectedValue<T>(op, world_size, first + i);
  });
}

void FillPattern(DType dtype, int rank, absl::Span<std::byte> data, size_t first) {
  const size_t element = DTypeSize(dtype);
  const size_t n = data.size() / element;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = Mix(rank, first + i);
    std::memcpy(data.data() + i * element, &bits, element);  // little-endian: the low bytes
  }
}

void FillSentinel(absl::Span<std::byte> data) { std::memset(data.data(), 0xff, data.size()); }

int64_t CountMismatches(DType dtype, absl::Span<const std::byte> expected, absl::Span<const std::byte> actual) {
  switch (DTypeSize(dtype)) {
    case 1: return CountWordMismatches<uint8_t>(expected, actual);
    case 2: return CountWordMismatches<uint16_t>(expected, actual);
    case 4: return CountWordMismatches<uint32_t>(expected, actual);
    default: return CountWordMismatches<uint64_t>(expected, actual);
  }
}

double AlgBandwidth(size_t bytes, double time_us) {
  if (time_us <= 0) return 0;
  return static_cast<double>(bytes) / (time_us * 1e3);  // bytes / (us * 1e-6) / 1e9
}

double AllReduceBusFactor(int world_size) {
  return world_size > 0 ? 2.0 * (world_size - 1) / world_size : 0;
}

const char* CollectiveName(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce: return "allreduce";
    case Collective::kReduceScatter: return "reducescatter";
    case Collective::kAllGather: return "allgather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllToAll: return "alltoall";
    case Collective::kSendRecv: return "sendrecv";
  }
  return "?";
}

absl::StatusOr<Collective> ParseCollective(absl::string_view name) {
  std::string key = absl::AsciiStrToLower(name);
  key.erase(std::remove_if(key.begin(), key.end(), [](char c) { return c == '_' || c == '-'; }), key.end());
  for (Collective c : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
                       Collective::kBroadcast, Collective::kReduce, Collective::kAllToAll, Collective::kSendRecv}) {
    if (key == CollectiveName(c)) return c;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown collective \"", name, "\" (allreduce, reducescatter, allgather, broadcast, reduce, alltoall, sendrecv)"));
}

CollectiveCounts CountsFor(Collective collective, size_t count, int world_size) {
  const size_t n = static_cast<size_t>(std::max(world_size, 1));
  const size_t block = count / n;
  switch (collective) {
    case Collective::kReduceScatter: return {block * n, block, block};
    case Collective::kAllGather: return {block, block * n, block};
    case Collective::kAllToAll: return {block * n, block * n, block};
    default: return {count, count, count};
  }
}

double BusFactor(Collective collective, int world_size) {
  if (world_size <= 0) return 0;
  const double n = world_size;
  switch (collective) {
    case Collective::kAllReduce: return 2.0 * (n - 1) / n;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll: return (n - 1) / n;
    default: return 1;
  }
}

bool CollectiveReduces(Collective collective) {
  return collective == Collective::kAllReduce || collective == Collective::kReduceScatter ||
         collective == Collective::kReduce || collective == Collective::kSendRecv;
}

bool CollectiveHasRoot(Collective collective) {
  return collective == Collective::kBroadcast || collective == Collective::kReduce;
}

}  // namespace braid::bench
