#include "tensor/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "tensor/mappable_memory.h"
#include "tensor/reduce.h"

#ifdef BRAID_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace braid {
namespace {

constexpr size_t kCpuAlignment = 64;
// Large host buffers ask for transparent huge pages: first touch of 4 KiB
// pages runs at under 1 GB/s here, huge pages at ~12 GB/s (DESIGN.md).
// From 1 MiB, rounded up to whole huge pages: a gradient bucket just under
// 2 MiB is then read by peer access too (at most twice the memory asked).
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugePagesFrom = size_t{1} << 20;

#ifdef BRAID_WITH_CUDA
absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}
#endif

}  // namespace

absl::StatusOr<std::shared_ptr<Storage>> Storage::Allocate(size_t nbytes, Device device, HostMemory memory) {
  if (device.is_cuda()) {
#ifdef BRAID_WITH_CUDA
    void* data = nullptr;
    if (nbytes > 0) {
      BRAID_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device.index), "cudaSetDevice"));
      BRAID_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&data, nbytes),
                                       absl::StrCat("cudaMalloc(", nbytes, " bytes) on ", ToString(device))));
    }
    return std::shared_ptr<Storage>(new Storage(static_cast<std::byte*>(data), nbytes, device, true));
#else
    return absl::FailedPreconditionError(
        absl::StrCat("cannot allocate on ", ToString(device), ": braid was built without --config=cuda"));
#endif
  }
  void* data = nullptr;
  if (memory == HostMemory::kMappable && nbytes > 0) {
    absl::StatusOr<std::byte*> mappable = AllocateMappable(nbytes);
    if (mappable.ok()) return std::shared_ptr<Storage>(new Storage(*mappable, nbytes, device, true, false, true));
  }
  if (nbytes > 0) {
    const size_t alignment = nbytes >= kHugePagesFrom ? kHugePage : kCpuAlignment;
    const size_t rounded = (nbytes + alignment - 1) / alignment * alignment;
    if (posix_memalign(&data, alignment, rounded) != 0) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", nbytes, " bytes"));
    }
    if (alignment == kHugePage) madvise(data, rounded, MADV_HUGEPAGE);  // advisory only
  }
  return std::shared_ptr<Storage>(new Storage(static_cast<std::byte*>(data), nbytes, device, true));
}

bool Storage::peer_fast() const {
  return mappable_ || (owning_ && !pinned_ && device_.is_cpu() && nbytes_ >= kHugePagesFrom);
}

absl::StatusOr<std::shared_ptr<Storage>> Storage::AllocatePinned(size_t nbytes) {
#ifdef BRAID_WITH_CUDA
  void* data = nullptr;
  if (nbytes > 0) {
    // Portable: pinned for every GPU's context, not only the current one's.
    BRAID_RETURN_IF_ERROR(CudaStatus(cudaHostAlloc(&data, nbytes, cudaHostAllocPortable),
                                     absl::StrCat("cudaHostAlloc(", nbytes, " bytes)")));
  }
  return std::shared_ptr<Storage>(new Storage(static_cast<std::byte*>(data), nbytes, Device::Cpu(), true, true));
#else
  return absl::FailedPreconditionError(
      absl::StrCat("cannot allocate ", nbytes, " bytes of pinned host memory: braid was built without --config=cuda"));
#endif
}

std::shared_ptr<Storage> Storage::Borrow(void* data, size_t nbytes, Device device) {
  // A caller's buffer from braid_mem_alloc (torch's tensors under
  // braid.torch.use_mappable_memory) is as mappable as braid's own.
  const bool mappable = device.is_cpu() && nbytes > 0 && FindMappable(data, nbytes).has_value();
  return std::shared_ptr<Storage>(new Storage(static_cast<std::byte*>(data), nbytes, device, false, false, mappable));
}

Storage::~Storage() {
  if (!owning_ || data_ == nullptr) return;
  if (pinned_) {
#ifdef BRAID_WITH_CUDA
    cudaFreeHost(data_);
#endif
    return;
  }
  if (device_.is_cuda()) {
#ifdef BRAID_WITH_CUDA
    cudaFree(data_);
#endif
    return;
  }
  if (mappable_) {
    FreeMappable(data_);
  } else {
    std::free(data_);
  }
}

Shape ContiguousStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

int64_t ShapeNumel(const Shape& shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  return numel;
}

namespace {

absl::Status CheckShape(const Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("negative dimension in shape [", absl::StrJoin(shape, ", "), "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> Tensor::Empty(const Shape& shape, DType dtype, Device device, HostMemory memory) {
  BRAID_RETURN_IF_ERROR(CheckShape(shape));
  const size_t nbytes = static_cast<size_t>(ShapeNumel(shape)) * DTypeSize(dtype);
  BRAID_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage, Storage::Allocate(nbytes, device, memory));
  return Tensor(std::move(storage), 0, shape, ContiguousStrides(shape), dtype);
}

absl::StatusOr<Tensor> Tensor::EmptyPinned(const Shape& shape, DType dtype) {
  BRAID_RETURN_IF_ERROR(CheckShape(shape));
  const size_t nbytes = static_cast<size_t>(ShapeNumel(shape)) * DTypeSize(dtype);
  BRAID_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage, Storage::AllocatePinned(nbytes));
  return Tensor(std::move(storage), 0, shape, ContiguousStrides(shape), dtype);
}

absl::StatusOr<Tensor> Tensor::Zeros(const Shape& shape, DType dtype, Device device, HostMemory memory) {
  BRAID_ASSIGN_OR_RETURN(Tensor tensor, Empty(shape, dtype, device, memory));
  if (tensor.nbytes() == 0) return tensor;
  if (device.is_cuda()) {
#ifdef BRAID_WITH_CUDA
    BRAID_RETURN_IF_ERROR(CudaStatus(cudaMemset(tensor.data(), 0, tensor.nbytes()), "cudaMemset"));
#endif
  } else {
    std::memset(tensor.data(), 0, tensor.nbytes());
  }
  return tensor;
}

Tensor Tensor::View(void* data, const Shape& shape, DType dtype, Device device) {
  return View(data, shape, ContiguousStrides(shape), dtype, device);
}

Tensor Tensor::View(void* data, const Shape& shape, const Shape& strides, DType dtype, Device device) {
  BRAID_CHECK_OK(CheckShape(shape));
  BRAID_CHECK(strides.size() == shape.size()) << "shape and strides differ in rank";
  const int64_t numel = ShapeNumel(shape);
  BRAID_CHECK(data != nullptr || numel == 0) << "Tensor::View of null memory with " << numel << " elements";
  // The extent the view can reach, so the storage knows its size.
  int64_t last = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] > 0) last += (shape[i] - 1) * strides[i];
  }
  const size_t nbytes = numel == 0 ? 0 : static_cast<size_t>(last + 1) * DTypeSize(dtype);
  return Tensor(Storage::Borrow(data, nbytes, device), 0, shape, strides, dtype);
}

int64_t Tensor::numel() const { return ShapeNumel(shape_); }

bool Tensor::IsContiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (shape_[i] == 0) return true;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data() const {
  if (!storage_) return nullptr;
  return storage_->data() + offset_ * static_cast<int64_t>(element_size());
}

absl::Span<std::byte> Tensor::bytes() const {
  BRAID_CHECK(IsContiguous()) << "bytes() needs a contiguous tensor";
  return absl::MakeSpan(static_cast<std::byte*>(data()), nbytes());
}

int64_t Tensor::ElementOffset(std::initializer_list<int64_t> index) const {
  BRAID_CHECK(device().is_cpu()) << "At() on " << ToString(device());
  BRAID_CHECK(static_cast<int64_t>(index.size()) == dim())
      << "At() with " << index.size() << " indices on a " << dim() << "-d tensor";
  int64_t offset = 0;
  size_t d = 0;
  for (int64_t i : index) {
    BRAID_CHECK(i >= 0 && i < shape_[d]) << "index " << i << " out of range for dimension " << d;
    offset += i * strides_[d];
    ++d;
  }
  return offset;
}

absl::StatusOr<Tensor> Tensor::Narrow(int64_t d, int64_t start, int64_t length) const {
  if (d < 0 || d >= dim()) {
    return absl::InvalidArgumentError(absl::StrCat("Narrow: dimension ", d, " out of range for ", DebugString()));
  }
  const int64_t extent = shape_[static_cast<size_t>(d)];
  if (start < 0 || length < 0 || start + length > extent) {
    return absl::InvalidArgumentError(absl::StrCat("Narrow: [", start, ", ", start + length,
                                                   ") outside dimension ", d, " of size ", extent));
  }
  Shape shape = shape_;
  shape[static_cast<size_t>(d)] = length;
  return Tensor(storage_, offset_ + start * strides_[static_cast<size_t>(d)], std::move(shape), strides_, dtype_);
}

absl::StatusOr<Tensor> Tensor::Slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  if (d < 0 || d >= dim()) {
    return absl::InvalidArgumentError(absl::StrCat("Slice: dimension ", d, " out of range for ", DebugString()));
  }
  if (step <= 0) return absl::InvalidArgumentError(absl::StrCat("Slice: step ", step, " must be positive"));
  const int64_t extent = shape_[static_cast<size_t>(d)];
  // Python semantics: negative indices count from the end; clamp to range.
  auto clamp = [extent](int64_t i) {
    if (i < 0) i += extent;
    return i < 0 ? 0 : (i > extent ? extent : i);
  };
  start = clamp(start);
  end = clamp(end);
  const int64_t length = end > start ? (end - start + step - 1) / step : 0;
  Shape shape = shape_;
  Shape strides = strides_;
  shape[static_cast<size_t>(d)] = length;
  strides[static_cast<size_t>(d)] *= step;
  return Tensor(storage_, offset_ + start * strides_[static_cast<size_t>(d)], std::move(shape), std::move(strides),
                dtype_);
}

absl::StatusOr<Tensor> Tensor::Flatten() const { return Reshape({numel()}); }

absl::StatusOr<Tensor> Tensor::Reshape(const Shape& new_shape) const {
  if (!IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("Reshape/Flatten of non-contiguous ", DebugString(),
                                                   ": Clone() it first"));
  }
  Shape shape = new_shape;
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1 && inferred < 0) {
      inferred = static_cast<int>(i);
    } else if (shape[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("Reshape: bad shape [", absl::StrJoin(new_shape, ", "), "]"));
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || numel() % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat("Reshape: cannot infer -1 in [", absl::StrJoin(new_shape, ", "),
                                                     "] for ", numel(), " elements"));
    }
    shape[static_cast<size_t>(inferred)] = numel() / known;
  }
  if (ShapeNumel(shape) != numel()) {
    return absl::InvalidArgumentError(absl::StrCat("Reshape: [", absl::StrJoin(new_shape, ", "), "] has ",
                                                   ShapeNumel(shape), " elements, tensor has ", numel()));
  }
  Shape strides = ContiguousStrides(shape);
  return Tensor(storage_, offset_, std::move(shape), std::move(strides), dtype_);
}

namespace {

// Copies a strided CPU tensor element by element, innermost dimension last.
void StridedCopy(const Tensor& dst, const Tensor& src) {
  const size_t item = dst.element_size();
  const int64_t rank = dst.dim();
  const int64_t numel = dst.numel();
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  auto* dst_base = static_cast<std::byte*>(dst.data());
  auto* src_base = static_cast<const std::byte*>(src.data());
  // src is walked by the same flat order as dst, in src's own shape.
  std::vector<int64_t> src_index(static_cast<size_t>(src.dim()), 0);
  for (int64_t n = 0; n < numel; ++n) {
    int64_t dst_offset = 0;
    for (int64_t d = 0; d < rank; ++d) dst_offset += index[static_cast<size_t>(d)] * dst.strides()[static_cast<size_t>(d)];
    int64_t src_offset = 0;
    for (int64_t d = 0; d < src.dim(); ++d) {
      src_offset += src_index[static_cast<size_t>(d)] * src.strides()[static_cast<size_t>(d)];
    }
    std::memcpy(dst_base + dst_offset * static_cast<int64_t>(item), src_base + src_offset * static_cast<int64_t>(item),
                item);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < dst.shape()[static_cast<size_t>(d)]) break;
      index[static_cast<size_t>(d)] = 0;
    }
    for (int64_t d = src.dim() - 1; d >= 0; --d) {
      if (++src_index[static_cast<size_t>(d)] < src.shape()[static_cast<size_t>(d)]) break;
      src_index[static_cast<size_t>(d)] = 0;
    }
  }
}

}  // namespace

absl::Status Tensor::CopyFrom(const Tensor& src) {
  if (!defined() || !src.defined()) return absl::InvalidArgumentError("CopyFrom with an undefined tensor");
  if (src.dtype() != dtype_ || src.numel() != numel()) {
    return absl::InvalidArgumentError(absl::StrCat("CopyFrom: ", src.DebugString(), " into ", DebugString(),
                                                   " (dtype and element count must match)"));
  }
  if (numel() == 0) return absl::OkStatus();
  const bool both_contiguous = IsContiguous() && src.IsContiguous();
  if (!both_contiguous && src.shape() != shape_) {
    return absl::InvalidArgumentError(absl::StrCat("CopyFrom: shapes differ and a tensor is strided: ",
                                                   src.DebugString(), " into ", DebugString()));
  }
  if (device().is_cpu() && src.device().is_cpu()) {
    if (both_contiguous) {
      HostCopy(absl::MakeSpan(static_cast<std::byte*>(data()), nbytes()),
               absl::MakeConstSpan(static_cast<const std::byte*>(src.data()), nbytes()));
    } else {
      StridedCopy(*this, src);
    }
    return absl::OkStatus();
  }
  if (!both_contiguous) {
    return absl::UnimplementedError(absl::StrCat("CopyFrom between devices needs contiguous tensors: ",
                                                 src.DebugString(), " into ", DebugString()));
  }
#ifdef BRAID_WITH_CUDA
  BRAID_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(data(), src.data(), nbytes(), cudaMemcpyDefault),
                                   absl::StrCat("cudaMemcpy ", src.DebugString(), " -> ", DebugString())));
  // cudaMemcpy from pageable memory may return before its DMA lands: done
  // means done, for readers on any stream.
  return CudaStatus(cudaStreamSynchronize(cudaStreamLegacy),
                    absl::StrCat("cudaMemcpy ", src.DebugString(), " -> ", DebugString()));
#else
  return absl::FailedPreconditionError(
      absl::StrCat("CopyFrom ", src.DebugString(), " -> ", DebugString(), ": braid was built without --config=cuda"));
#endif
}

absl::StatusOr<Tensor> Tensor::Clone(Device device) const {
  BRAID_ASSIGN_OR_RETURN(Tensor copy, Empty(shape_, dtype_, device));
  BRAID_RETURN_IF_ERROR(copy.CopyFrom(*this));
  return copy;
}

std::string Tensor::DebugString() const {
  if (!defined()) return "undefined";
  return absl::StrCat(DTypeName(dtype_), "[", absl::StrJoin(shape_, ", "), "] ", ToString(device()));
}

}  // namespace braid
