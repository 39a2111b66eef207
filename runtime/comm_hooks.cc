#include "runtime/comm_hooks.h"

#include <map>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/status.h"
#include "tensor/dtype.h"
#include "tensor/reduce.h"

namespace braid {
namespace {

class AllReduceHookImpl : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  absl::StatusOr<WorkHandle> Launch(Communicator& comm, GradBucket& bucket) override {
    return comm.AllReduce(bucket.buffer, ReduceOp::kAvg, bucket.call_options());
  }
};

// Divides by the world size before rounding (so the sum cannot overflow
// where the average would not), sums the 16-bit values, widens back.
template <typename Narrow>
class CompressHook : public CommHook {
 public:
  std::string name() const override {
    return std::is_same_v<Narrow, Half> ? "fp16_compress" : "bf16_compress";
  }

  absl::StatusOr<WorkHandle> Launch(Communicator& comm, GradBucket& bucket) override {
    const DType dtype = bucket.buffer.dtype();
    if (!Compressed(bucket)) return comm.AllReduce(bucket.buffer, ReduceOp::kAvg, bucket.call_options());
    const int64_t n = bucket.buffer.numel();
    Tensor compressed;
    {
      MutexLock lock(&mu_);
      Tensor& slot = compressed_[bucket.index];
      if (!slot.defined() || slot.numel() != n) {
        BRAID_ASSIGN_OR_RETURN(slot,
                               Tensor::Empty({n}, DTypeOf<Narrow>(), bucket.buffer.device(), HostMemory::kMappable));
      }
      compressed = slot;
    }
    if (bucket.stream != nullptr) {
      // On the stream: divide, narrow, sum; Finish widens there too.
      BRAID_RETURN_IF_ERROR(bucket.stream->Divide(dtype, bucket.buffer.data(), static_cast<size_t>(n), bucket.world_size));
      BRAID_RETURN_IF_ERROR(bucket.stream->Cast(DTypeOf<Narrow>(), compressed.data(), dtype, bucket.buffer.data(),
                                                static_cast<size_t>(n)));
      return comm.AllReduce(compressed, ReduceOp::kSum, bucket.call_options());
    }
    Narrow* out = compressed.data<Narrow>();
    const double scale = 1.0 / bucket.world_size;
    DispatchFloat(dtype, [&](auto zero) {
      using T = decltype(zero);
      const T* in = bucket.buffer.data<T>();
      for (int64_t i = 0; i < n; ++i) out[i] = ToNarrow(static_cast<float>(in[i] * static_cast<T>(scale)));
    });
    return comm.AllReduce(compressed, ReduceOp::kSum, bucket.call_options());
  }

  absl::Status Finish(GradBucket& bucket) override {
    const DType dtype = bucket.buffer.dtype();
    if (!Compressed(bucket)) return absl::OkStatus();
    Tensor compressed;
    {
      MutexLock lock(&mu_);
      compressed = compressed_[bucket.index];
    }
    if (bucket.stream != nullptr) {
      return bucket.stream->Cast(dtype, bucket.buffer.data(), DTypeOf<Narrow>(), compressed.data(),
                                 static_cast<size_t>(bucket.buffer.numel()));
    }
    const Narrow* in = compressed.data<Narrow>();
    const int64_t n = bucket.buffer.numel();
    DispatchFloat(dtype, [&](auto zero) {
      using T = decltype(zero);
      T* out = bucket.buffer.data<T>();
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(ToFloat(in[i]));
    });
    return absl::OkStatus();
  }

 private:
  // f32/f64 on the host, or on a device stream; a CUDA bucket staged
  // through host memory (no stream) is reduced uncompressed.
  static bool Compressed(const GradBucket& bucket) {
    const DType dtype = bucket.buffer.dtype();
    if (dtype != DType::kF32 && dtype != DType::kF64) return false;
    return bucket.stream != nullptr || !bucket.buffer.device().is_cuda();
  }
  template <typename Fn>
  static void DispatchFloat(DType dtype, Fn&& fn) {
    if (dtype == DType::kF32) {
      fn(float{});
    } else {
      fn(double{});
    }
  }
  static Narrow ToNarrow(float x) {
    if constexpr (std::is_same_v<Narrow, Half>) {
      return FloatToHalf(x);
    } else {
      return FloatToBFloat16(x);
    }
  }
  static float ToFloat(Narrow x) {
    if constexpr (std::is_same_v<Narrow, Half>) {
      return HalfToFloat(x);
    } else {
      return BFloat16ToFloat(x);
    }
  }

  absl::Mutex mu_;
  std::map<int, Tensor> compressed_ ABSL_GUARDED_BY(mu_);  // per bucket, reused every iteration
};

}  // namespace

std::shared_ptr<CommHook> AllReduceHook() { return std::make_shared<AllReduceHookImpl>(); }
std::shared_ptr<CommHook> Fp16CompressHook() { return std::make_shared<CompressHook<Half>>(); }
std::shared_ptr<CommHook> Bf16CompressHook() { return std::make_shared<CompressHook<BFloat16>>(); }

}  // namespace braid
