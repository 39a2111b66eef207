// Tensor: a typed, strided window over memory on one device.
//
// A Tensor is shared storage + an element offset + shape + strides (in
// elements). It either owns its memory (Tensor::Empty: CPU memory 64-byte
// aligned; CUDA memory from cudaMalloc under --config=cuda) or is a
// non-owning view over the caller's memory (Tensor::View) — that is how a
// trainer hands braid its gradients without a copy; the caller keeps that
// memory alive while braid uses the view. Views made from a tensor
// (Narrow, Slice, Flatten, Reshape) share its storage. Copies are cheap
// (the storage is reference counted); the elements are never copied unless
// CopyFrom or Clone is called.
//
// Thread safety: const methods may be called from any thread; writing the
// elements from two threads at once is the caller's race, as with any memory.
#ifndef BRAID_TENSOR_TENSOR_H_
#define BRAID_TENSOR_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/logging.h"
#include "tensor/device.h"
#include "tensor/dtype.h"

namespace braid {

using Shape = std::vector<int64_t>;

// Where braid's host memory comes from: the process's own (huge pages from
// 1 MiB), or a memfd that the job's other processes on this host map
// (tensor/mappable_memory.h), so that collectives over shm read and write it
// in place: for buffers that collectives move, such as gradient buckets.
// Mappable memory has 4 KiB pages where the kernel gives shared memory no
// huge pages (shmem_enabled "never"), so it is not for compute buffers.
// Device memory ignores it.
enum class HostMemory { kPrivate, kMappable };

// Bytes behind a tensor. Owning storage frees its memory on destruction.
class Storage {
 public:
  // kMappable falls back to private memory where no memfd can be had.
  static absl::StatusOr<std::shared_ptr<Storage>> Allocate(size_t nbytes, Device device,
                                                           HostMemory memory = HostMemory::kPrivate);
  // Page-locked host memory (cudaHostAlloc, portable to every GPU; freed with
  // cudaFreeHost): CUDA copies to and from it at full speed and without an
  // extra bounce. kFailedPrecondition without --config=cuda; kInternal naming
  // cudaHostAlloc when CUDA fails (no driver, out of pinned memory).
  static absl::StatusOr<std::shared_ptr<Storage>> AllocatePinned(size_t nbytes);
  // The caller's memory, not freed here; mappable() when it lies inside one
  // AllocateMappable allocation.
  static std::shared_ptr<Storage> Borrow(void* data, size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  std::byte* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool owning() const { return owning_; }
  bool pinned() const { return pinned_; }
  // Host memory braid allocated that peer access reaches fast: mappable
  // memory, or private memory from 1 MiB up, on 2 MiB boundaries advised as
  // huge pages (process_vm_readv pins a huge page at a time, not 4 KiB).
  bool peer_fast() const;
  // Memory of a memfd the peers may map (AllocateMappable), owned or borrowed.
  bool mappable() const { return mappable_; }

 private:
  Storage(std::byte* data, size_t nbytes, Device device, bool owning, bool pinned = false, bool mappable = false)
      : data_(data), nbytes_(nbytes), device_(device), owning_(owning), pinned_(pinned), mappable_(mappable) {}
  std::byte* data_;
  size_t nbytes_;
  Device device_;
  bool owning_;
  bool pinned_;    // host memory from cudaHostAlloc
  bool mappable_;  // from AllocateMappable
};

class Tensor {
 public:
  // An undefined tensor (no storage); defined() is false.
  Tensor() = default;

  // A new contiguous tensor; contents uninitialized. Fails for negative
  // dimensions, a CUDA device without CUDA, or when memory runs out.
  static absl::StatusOr<Tensor> Empty(const Shape& shape, DType dtype, Device device = Device::Cpu(),
                                      HostMemory memory = HostMemory::kPrivate);
  // As Empty on the CPU, in pinned host memory (Storage::AllocatePinned), as
  // torch's pin_memory: the staging buffer for copies to and from CUDA tensors.
  static absl::StatusOr<Tensor> EmptyPinned(const Shape& shape, DType dtype);
  // As Empty, filled with zeros.
  static absl::StatusOr<Tensor> Zeros(const Shape& shape, DType dtype, Device device = Device::Cpu(),
                                      HostMemory memory = HostMemory::kPrivate);
  // A contiguous view over caller memory; braid never frees it. `data` may
  // be null only when the shape has no elements. Negative dimensions are a
  // programmer error (checked).
  static Tensor View(void* data, const Shape& shape, DType dtype, Device device = Device::Cpu());
  // A strided view over caller memory (strides in elements).
  static Tensor View(void* data, const Shape& shape, const Shape& strides, DType dtype,
                     Device device = Device::Cpu());

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::Cpu(); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const { return shape_.at(static_cast<size_t>(d)); }
  int64_t numel() const;
  size_t element_size() const { return DTypeSize(dtype_); }
  // numel() * element_size(): the bytes the elements occupy when contiguous.
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  int64_t offset() const { return offset_; }  // in elements, into the storage
  bool IsContiguous() const;
  // True when the storage is shared with another tensor or owned elsewhere.
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // The first element's address.
  void* data() const;
  template <typename T>
  T* data() const {
    BRAID_CHECK(DTypeOf<T>() == dtype_) << "data<" << DTypeName(DTypeOf<T>()) << ">() on a "
                                        << DTypeName(dtype_) << " tensor";
    return static_cast<T*>(data());
  }
  // The elements of a contiguous CPU tensor as a span (checked).
  template <typename T>
  absl::Span<T> span() const {
    BRAID_CHECK(IsContiguous() && device().is_cpu()) << "span() needs a contiguous CPU tensor";
    return absl::MakeSpan(data<T>(), static_cast<size_t>(numel()));
  }
  // The bytes of a contiguous tensor (any device; do not dereference CUDA bytes on the host).
  absl::Span<std::byte> bytes() const;

  // Element access on a CPU tensor by multi-index (checked).
  template <typename T>
  T& At(std::initializer_list<int64_t> index) const {
    return data<T>()[ElementOffset(index)];
  }

  // Views sharing this tensor's storage.
  // Elements [start, start + length) of dimension `d`.
  absl::StatusOr<Tensor> Narrow(int64_t d, int64_t start, int64_t length) const;
  // Python-style slice [start, end) with step of dimension `d`.
  absl::StatusOr<Tensor> Slice(int64_t d, int64_t start, int64_t end, int64_t step = 1) const;
  // A 1-D view; needs a contiguous tensor.
  absl::StatusOr<Tensor> Flatten() const;
  // A view with a new shape of the same numel (one dimension may be -1);
  // needs a contiguous tensor.
  absl::StatusOr<Tensor> Reshape(const Shape& shape) const;

  // Copies src's elements into this tensor: same dtype and numel (shapes may
  // differ only when both are contiguous); any strides on the CPU; between
  // devices (CPU<->CUDA, CUDA<->CUDA) for contiguous tensors under
  // --config=cuda. Blocks until the copy is done.
  absl::Status CopyFrom(const Tensor& src);
  // A new contiguous owning tensor with the same elements, on `device`.
  absl::StatusOr<Tensor> Clone(Device device) const;
  absl::StatusOr<Tensor> Clone() const { return Clone(device()); }

  // "float32[2, 3] cpu".
  std::string DebugString() const;

 private:
  Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, Shape strides, DType dtype)
      : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)),
        strides_(std::move(strides)), dtype_(dtype) {}
  int64_t ElementOffset(std::initializer_list<int64_t> index) const;

  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
};

// Row-major strides for `shape`.
Shape ContiguousStrides(const Shape& shape);
// Product of the dimensions (1 for a scalar shape).
int64_t ShapeNumel(const Shape& shape);

}  // namespace braid

#endif  // BRAID_TENSOR_TENSOR_H_
