// The collectives conformance suite, written once: every collective x
// algorithm x dtype x op against a reference every rank computes locally
// (each rank's input is a known function of rank and element, so the check is
// exact). collectives_test runs it over every transport in forked processes;
// tests/collectives/transport/mpi runs it under a real mpirun over the mpi transport, native
// collectives included. BRAID_TEST_MATRIX=full widens it.
#ifndef BRAID_TESTS_COLLECTIVES_CONFORMANCE_H_
#define BRAID_TESTS_COLLECTIVES_CONFORMANCE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "collectives/communicator.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"
#include "tensor/tensor.h"

namespace braid::testing {

// BRAID_TEST_MATRIX=full.
bool FullMatrix();
// A 64-bit mixing function (data that is not a simple pattern).
uint64_t Mix(uint64_t x);
// A digest of `count` floats' bits (ranks compare results bit for bit).
uint64_t HashBits(const float* data, size_t count);

// Rank `rank`'s element `i` for an op: small integers for floats (sums and
// products stay exact in every float type), the full range for integers (so
// they wrap).
template <typename T>
T Value(int rank, size_t i, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(Mix(static_cast<uint64_t>(rank) * 1000003 + i));
  } else {
    float v;
    if (op == ReduceOp::kProd) {
      const float choices[] = {1.0f, 2.0f, 0.5f, -1.0f};
      v = choices[(static_cast<size_t>(rank) + i) % 4];
    } else {
      v = static_cast<float>(static_cast<int>((static_cast<size_t>(rank) * 7 + i * 3) % 17) - 8);
    }
    if constexpr (std::is_same_v<T, Half>) return FloatToHalf(v);
    else if constexpr (std::is_same_v<T, BFloat16>) return FloatToBFloat16(v);
    else return static_cast<T>(v);
  }
}

template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, Half>) return HalfToFloat(v);
  else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16ToFloat(v);
  else return static_cast<double>(v);
}

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, Half>) return FloatToHalf(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, BFloat16>) return FloatToBFloat16(static_cast<float>(v));
  else return static_cast<T>(v);
}

// The reduction of element i over ranks 0..n-1.
template <typename T>
T Reference(int n, size_t i, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    U acc = static_cast<U>(Value<T>(0, i, op));
    for (int r = 1; r < n; ++r) {
      const U v = static_cast<U>(Value<T>(r, i, op));
      switch (op) {
        case ReduceOp::kProd: acc = static_cast<U>(static_cast<uint64_t>(acc) * v); break;
        case ReduceOp::kMin: acc = static_cast<U>(std::min(static_cast<T>(acc), static_cast<T>(v))); break;
        case ReduceOp::kMax: acc = static_cast<U>(std::max(static_cast<T>(acc), static_cast<T>(v))); break;
        default: acc = static_cast<U>(acc + v); break;
      }
    }
    T result = static_cast<T>(acc);
    if (op == ReduceOp::kAvg) result = static_cast<T>(static_cast<int64_t>(result) / n);
    return result;
  } else {
    double acc = ToDouble(Value<T>(0, i, op));
    for (int r = 1; r < n; ++r) {
      const double v = ToDouble(Value<T>(r, i, op));
      switch (op) {
        case ReduceOp::kProd: acc *= v; break;
        case ReduceOp::kMin: acc = std::min(acc, v); break;
        case ReduceOp::kMax: acc = std::max(acc, v); break;
        default: acc += v; break;
      }
    }
    if (op == ReduceOp::kAvg) {
      // The implementation divides in the element's precision (f32 for 16-bit floats).
      if constexpr (std::is_same_v<T, double>) return acc / n;
      else return FromDouble<T>(static_cast<float>(acc) / static_cast<float>(n));
    }
    return FromDouble<T>(acc);
  }
}

template <typename T>
void Fill(const Tensor& t, int rank, ReduceOp op, size_t offset = 0) {
  T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = Value<T>(rank, offset + static_cast<size_t>(i), op);
}

template <typename T>
absl::Status ExpectEqual(const T* got, const T& want, size_t i, const std::string& what) {
  if (std::memcmp(got, &want, sizeof(T)) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": element ", i, " is ", ToDouble(*got), ", expected ", ToDouble(want)));
}

struct Suite {
  Communicator& comm;
  Deadline deadline;
  int n;
  int me;
  // The algorithm of every collective but all-reduce (which names its own):
  // kAuto = braid's, kNative = the transport's engine.
  Algorithm others = Algorithm::kAuto;
  // Where the call's tensors live. Data is filled and checked on the host;
  // on a CUDA device each call gets device copies (OnDevice) and its results
  // are copied back (ToHost) before the check.
  Device device = Device::Cpu();

  // `host` itself on the CPU; else a copy of it on `device`.
  absl::StatusOr<Tensor> OnDevice(const Tensor& host) const {
    if (device.is_cpu()) return host;
    return host.Clone(device);
  }
  // Copies a call's tensor back into `host` (nothing to do on the CPU).
  absl::Status ToHost(const Tensor& host, const Tensor& on_device) const {
    if (device.is_cpu()) return absl::OkStatus();
    Tensor copy = host;
    return copy.CopyFrom(on_device);
  }

  CallOptions Others() const {
    CallOptions call;
    call.algorithm = others;
    return call;
  }

  absl::Status Run(absl::StatusOr<WorkHandle> work) {
    BRAID_RETURN_IF_ERROR(work.status());
    return (*work)->Wait(deadline);
  }

  template <typename T>
  absl::Status AllReduce(size_t count, ReduceOp op, Algorithm algorithm, bool in_place) {
    const DType dtype = DTypeOf<T>();
    const std::string what = absl::StrCat("allreduce ", AlgorithmName(algorithm), " ", DTypeName(dtype), " ",
                                          ReduceOpName(op), " count ", count, in_place ? " in place" : "");
    BRAID_ASSIGN_OR_RETURN(Tensor input, Tensor::Empty({static_cast<int64_t>(count)}, dtype));
    Fill<T>(input, me, op);
    Tensor output = input;
    if (!in_place) {
      BRAID_ASSIGN_OR_RETURN(output, Tensor::Zeros({static_cast<int64_t>(count)}, dtype));
    }
    CallOptions call;
    call.algorithm = algorithm;
    BRAID_ASSIGN_OR_RETURN(const Tensor d_input, OnDevice(input));
    Tensor d_output = d_input;
    if (!in_place) {
      BRAID_ASSIGN_OR_RETURN(d_output, OnDevice(output));
    }
    BRAID_RETURN_IF_ERROR(Annotate(Run(comm.AllReduce(d_input, d_output, op, call)), what));
    BRAID_RETURN_IF_ERROR(ToHost(output, d_output));
    if (!in_place) BRAID_RETURN_IF_ERROR(ToHost(input, d_input));
    for (size_t i = 0; i < count; ++i) {
      BRAID_RETURN_IF_ERROR(ExpectEqual(output.data<T>() + i, Reference<T>(n, i, op), i, what));
    }
    if (!in_place) {  // the input is untouched
      for (size_t i = 0; i < count; ++i) {
        BRAID_RETURN_IF_ERROR(ExpectEqual(input.data<T>() + i, Value<T>(me, i, op), i, what + " (input)"));
      }
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status ReduceScatter(size_t count, ReduceOp op) {
    const DType dtype = DTypeOf<T>();
    const std::string what = absl::StrCat("reducescatter ", DTypeName(dtype), " ", ReduceOpName(op), " count ", count);
    BRAID_ASSIGN_OR_RETURN(Tensor input, Tensor::Empty({static_cast<int64_t>(count * n)}, dtype));
    BRAID_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros({static_cast<int64_t>(count)}, dtype));
    Fill<T>(input, me, op);
    BRAID_ASSIGN_OR_RETURN(const Tensor d_input, OnDevice(input));
    BRAID_ASSIGN_OR_RETURN(const Tensor d_output, OnDevice(output));
    BRAID_RETURN_IF_ERROR(Annotate(Run(comm.ReduceScatter(d_input, d_output, op, Others())), what));
    BRAID_RETURN_IF_ERROR(ToHost(output, d_output));
    for (size_t i = 0; i < count; ++i) {
      BRAID_RETURN_IF_ERROR(ExpectEqual(output.data<T>() + i, Reference<T>(n, me * count + i, op), i, what));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status AllGather(size_t count) {
    const DType dtype = DTypeOf<T>();
    const std::string what = absl::StrCat("allgather ", DTypeName(dtype), " count ", count);
    BRAID_ASSIGN_OR_RETURN(Tensor input, Tensor::Empty({static_cast<int64_t>(count)}, dtype));
    BRAID_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros({static_cast<int64_t>(count * n)}, dtype));
    Fill<T>(input, me, ReduceOp::kSum);
    BRAID_ASSIGN_OR_RETURN(const Tensor d_input, OnDevice(input));
    BRAID_ASSIGN_OR_RETURN(const Tensor d_output, OnDevice(output));
    BRAID_RETURN_IF_ERROR(Annotate(Run(comm.AllGather(d_input, d_output, Others())), what));
    BRAID_RETURN_IF_ERROR(ToHost(output, d_output));
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) {
        BRAID_RETURN_IF_ERROR(ExpectEqual(output.data<T>() + r * count + i, Value<T>(r, i, ReduceOp::kSum),
                                          r * count + i, what));
      }
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status Broadcast(size_t count, int root) {
    const DType dtype = DTypeOf<T>();
    const std::string what = absl::StrCat("broadcast ", DTypeName(dtype), " count ", count, " root ", root);
    BRAID_ASSIGN_OR_RETURN(Tensor buffer, Tensor::Zeros({static_cast<int64_t>(count)}, dtype));
    if (me == root) Fill<T>(buffer, root, ReduceOp::kSum);
    BRAID_ASSIGN_OR_RETURN(const Tensor d_buffer, OnDevice(buffer));
    BRAID_RETURN_IF_ERROR(Annotate(Run(comm.Broadcast(d_buffer, root, Others())), what));
    BRAID_RETURN_IF_ERROR(ToHost(buffer, d_buffer));
    for (size_t i = 0; i < count; ++i) {
      BRAID_RETURN_IF_ERROR(ExpectEqual(buffer.data<T>() + i, Value<T>(root, i, ReduceOp::kSum), i, what));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status Reduce(size_t count, ReduceOp op, int root) {
    const DType dtype = DTypeOf<T>();
    const std::string what = absl::StrCat("reduce ", DTypeName(dtype), " ", ReduceOpName(op), " count ", count,
                                          " root ", root);
    BRAID_ASSIGN_OR_RETURN(Tensor input, Tensor::Empty({static_cast<int64_t>(count)}, dtype));
    BRAID_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros({static_cast<int64_t>(count)}, dtype));
    Fill<T>(input, me, op);
    BRAID_ASSIGN_OR_RETURN(const Tensor d_input, OnDevice(input));
    BRAID_ASSIGN_OR_RETURN(const Tensor d_output, OnDevice(output));
    BRAID_RETURN_IF_ERROR(Annotate(Run(comm.Reduce(d_input, d_output, op, root, Others())), what));
    BRAID_RETURN_IF_ERROR(ToHost(output, d_output));
    if (me != root) return absl::OkStatus();
    for (size_t i = 0; i < count; ++i) {
      BRAID_RETURN_IF_ERROR(ExpectEqual(output.data<T>() + i, Reference<T>(n, i, op), i, what));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status AllToAll(size_t count) {
    const DType dtype = DTypeOf<T>();
    const std::string what = absl::StrCat("alltoall ", DTypeName(dtype), " count ", count);
    BRAID_ASSIGN_OR_RETURN(Tensor input, Tensor::Empty({static_cast<int64_t>(count * n)}, dtype));
    BRAID_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros({static_cast<int64_t>(count * n)}, dtype));
    Fill<T>(input, me, ReduceOp::kSum);
    BRAID_ASSIGN_OR_RETURN(const Tensor d_input, OnDevice(input));
    BRAID_ASSIGN_OR_RETURN(const Tensor d_output, OnDevice(output));
    BRAID_RETURN_IF_ERROR(Annotate(Run(comm.AllToAll(d_input, d_output, Others())), what));
    BRAID_RETURN_IF_ERROR(ToHost(output, d_output));
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) {
        // Rank r's block `me` arrives as our block r.
        BRAID_RETURN_IF_ERROR(ExpectEqual(output.data<T>() + r * count + i,
                                          Value<T>(r, me * count + i, ReduceOp::kSum), r * count + i, what));
      }
    }
    return absl::OkStatus();
  }
};

struct ConformanceOptions {
  // The all-reduce algorithms to check, each against the same reference;
  // those the transport cannot run (window, peer-access off shm) are skipped.
  std::vector<Algorithm> allreduce_algorithms = {Algorithm::kRing,       Algorithm::kTree,   Algorithm::kDoubleTree,
                                                 Algorithm::kRhd,        Algorithm::kOneShot, Algorithm::kWindow,
                                                 Algorithm::kPeerAccess, Algorithm::kHierarchical};
  // Also run every other collective natively (the transport's engine), after braid's.
  bool native_others = false;
  // Where the calls' tensors live (Suite::device): a CUDA device checks host
  // staging on a host transport.
  Device device = Device::Cpu();
};

// Every collective in every dtype, barrier and a send/recv ring, on `comm`
// (whose segment size should be small: many pipeline steps at test sizes).
// Collective: every rank of the communicator calls it. The first failure,
// naming the collective, dtype, op and element.
absl::Status RunConformance(Communicator& comm, Deadline deadline, const ConformanceOptions& options = {});

}  // namespace braid::testing

#endif  // BRAID_TESTS_COLLECTIVES_CONFORMANCE_H_
