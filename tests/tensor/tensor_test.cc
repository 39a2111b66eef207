#include "tensor/tensor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/mappable_memory.h"

namespace braid {
namespace {

TEST_CASE("Tensor: owning tensors are aligned, sized and zeroed", "[tensor]") {
  for (DType dtype : kAllDTypes) {
    auto tensor = Tensor::Zeros({3, 5}, dtype);
    REQUIRE(tensor.ok());
    CHECK(tensor->numel() == 15);
    CHECK(tensor->nbytes() == 15 * DTypeSize(dtype));
    CHECK(tensor->IsContiguous());
    CHECK(tensor->storage()->owning());
    CHECK(reinterpret_cast<uintptr_t>(tensor->data()) % 64 == 0);
    const auto* bytes = static_cast<const uint8_t*>(tensor->data());
    CHECK(std::all_of(bytes, bytes + tensor->nbytes(), [](uint8_t b) { return b == 0; }));
  }
  auto empty = Tensor::Empty({0, 4}, DType::kF32);
  REQUIRE(empty.ok());
  CHECK(empty->numel() == 0);
  CHECK(empty->nbytes() == 0);
  auto negative = Tensor::Empty({2, -1}, DType::kF32);
  CHECK(negative.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Tensor: a view aliases caller memory without copying", "[tensor]") {
  std::vector<float> memory(12);
  std::iota(memory.begin(), memory.end(), 0.0f);
  Tensor view = Tensor::View(memory.data(), {3, 4}, DType::kF32);
  CHECK_FALSE(view.storage()->owning());
  CHECK(view.data() == memory.data());
  CHECK(view.At<float>({2, 1}) == 9.0f);
  view.At<float>({0, 3}) = 42.0f;
  CHECK(memory[3] == 42.0f);
  CHECK(view.DebugString() == "float32[3, 4] cpu");
}

TEST_CASE("Tensor: Narrow, Slice, Flatten and Reshape share storage", "[tensor]") {
  std::vector<int32_t> memory(24);
  std::iota(memory.begin(), memory.end(), 0);
  Tensor t = Tensor::View(memory.data(), {2, 3, 4}, DType::kI32);

  auto rows = t.Narrow(1, 1, 2);
  REQUIRE(rows.ok());
  CHECK(rows->shape() == Shape{2, 2, 4});
  CHECK_FALSE(rows->IsContiguous());
  CHECK(rows->At<int32_t>({1, 0, 2}) == 12 + 4 + 2);
  CHECK(rows->storage() == t.storage());

  auto front = t.Narrow(0, 1, 1);
  REQUIRE(front.ok());
  CHECK(front->IsContiguous());  // a leading narrow stays contiguous
  CHECK(front->data<int32_t>() == memory.data() + 12);

  auto every_other = t.Slice(2, 1, 4, 2);
  REQUIRE(every_other.ok());
  CHECK(every_other->shape() == Shape{2, 3, 2});
  CHECK(every_other->At<int32_t>({0, 1, 1}) == 4 + 3);
  auto negative = t.Slice(2, -2, 100);  // Python-style: last two
  REQUIRE(negative.ok());
  CHECK(negative->shape() == Shape{2, 3, 2});
  CHECK(negative->At<int32_t>({0, 0, 0}) == 2);

  auto flat = t.Flatten();
  REQUIRE(flat.ok());
  CHECK(flat->shape() == Shape{24});
  auto reshaped = t.Reshape({4, -1});
  REQUIRE(reshaped.ok());
  CHECK(reshaped->shape() == Shape{4, 6});
  CHECK(reshaped->At<int32_t>({3, 5}) == 23);

  CHECK(t.Reshape({5, 5}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(rows->Flatten().status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(t.Narrow(1, 2, 2).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(t.Narrow(3, 0, 1).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Tensor: CopyFrom handles strides; Clone makes a contiguous owner", "[tensor]") {
  std::vector<double> memory(20);
  std::iota(memory.begin(), memory.end(), 0.0);
  Tensor t = Tensor::View(memory.data(), {4, 5}, DType::kF64);
  auto column_pair = t.Narrow(1, 2, 2);  // strided 4x2
  REQUIRE(column_pair.ok());
  auto clone = column_pair->Clone();
  REQUIRE(clone.ok());
  CHECK(clone->IsContiguous());
  CHECK(clone->storage()->owning());
  std::vector<double> expected = {2, 3, 7, 8, 12, 13, 17, 18};
  CHECK(std::vector<double>(clone->span<double>().begin(), clone->span<double>().end()) == expected);

  // Write back through the strided view.
  for (double& v : clone->span<double>()) v = -v;
  REQUIRE(column_pair->CopyFrom(*clone).ok());
  CHECK(memory[2] == -2.0);
  CHECK(memory[18] == -18.0);
  CHECK(memory[4] == 4.0);  // untouched

  // Contiguous tensors of equal numel copy across shapes.
  auto flat = Tensor::Zeros({20}, DType::kF64);
  REQUIRE(flat.ok());
  REQUIRE(flat->CopyFrom(t).ok());
  CHECK(flat->span<double>()[18] == -18.0);

  auto wrong = Tensor::Zeros({20}, DType::kF32);
  REQUIRE(wrong.ok());
  CHECK(wrong->CopyFrom(t).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Tensor: CUDA tensors fail cleanly without a GPU build or device", "[tensor]") {
  auto cuda = Tensor::Empty({4}, DType::kF32, Device::Cuda(0));
  if (!CudaCompiledIn()) {
    CHECK(cuda.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(cuda.status().message()).find("--config=cuda") != std::string::npos);
  } else if (CudaDeviceCount() == 0) {
    CHECK_FALSE(cuda.ok());
  } else {
    CHECK(cuda.ok());
  }
  CHECK(ToString(Device::Cuda(3)) == "cuda:3");
  CHECK(*ParseDevice("cuda:1") == Device::Cuda(1));
  CHECK(*ParseDevice("cpu") == Device::Cpu());
  CHECK_FALSE(ParseDevice("tpu").ok());
}

TEST_CASE("Tensor: pinned host tensors and CudaDeviceScope, with and without a GPU", "[tensor]") {
  auto pinned = Tensor::EmptyPinned({1000}, DType::kF64);
  auto scope = CudaDeviceScope::Enter(Device::Cuda(0));
  auto bus_id = CudaDeviceBusId(0);
  // The CPU needs no CUDA at all.
  CHECK(CudaDeviceScope::Enter(Device::Cpu()).ok());
  if (!CudaCompiledIn()) {
    CHECK(pinned.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(pinned.status().message()).find("--config=cuda") != std::string::npos);
    CHECK(scope.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(bus_id.status().code() == absl::StatusCode::kFailedPrecondition);
  } else if (CudaDeviceCount() == 0) {
    // Each error names its CUDA call.
    CHECK(pinned.status().code() == absl::StatusCode::kInternal);
    CHECK(std::string(pinned.status().message()).find("cudaHostAlloc") != std::string::npos);
    CHECK(scope.status().code() == absl::StatusCode::kInternal);
    CHECK(std::string(scope.status().message()).find("cudaGetDevice") != std::string::npos);
    CHECK(std::string(bus_id.status().message()).find("cudaDeviceGetPCIBusId") != std::string::npos);
  } else {
    REQUIRE(pinned.ok());
    CHECK(pinned->device() == Device::Cpu());
    CHECK(pinned->storage()->pinned());
    // A round trip through the GPU, pinned on both ends.
    for (int64_t i = 0; i < 1000; ++i) pinned->data<double>()[i] = static_cast<double>(i) * 0.5;
    auto on_gpu = pinned->Clone(Device::Cuda(0));
    REQUIRE(on_gpu.ok());
    auto back = Tensor::EmptyPinned({1000}, DType::kF64);
    REQUIRE(back.ok());
    REQUIRE(back->CopyFrom(*on_gpu).ok());
    CHECK(std::memcmp(back->data(), pinned->data(), pinned->nbytes()) == 0);
    CHECK(scope.ok());
    CHECK(bus_id.ok());
    CHECK(CudaDeviceScope::Enter(Device::Cuda(CudaDeviceCount())).status().code() == absl::StatusCode::kInternal);
  }
}

TEST_CASE("Device: BRAID_REQUIRE_GPU=1 turns \"no GPU\" into an abort naming why", "[tensor]") {
  if (CudaDeviceCount() > 0) return;  // a GPU machine: nothing to refuse
  int err[2];
  REQUIRE(pipe(err) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    dup2(err[1], STDERR_FILENO);
    signal(SIGABRT, SIG_DFL);  // not Catch2's handler: the abort is the point
    setenv("BRAID_REQUIRE_GPU", "1", 1);
    (void)CudaDeviceCount();
    _exit(0);  // not reached when the check works
  }
  close(err[1]);
  std::string text;
  char buffer[512];
  ssize_t n;
  while ((n = read(err[0], buffer, sizeof(buffer))) > 0) text.append(buffer, static_cast<size_t>(n));
  close(err[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  INFO(text);
  CHECK(WIFSIGNALED(status));
  CHECK(text.find("BRAID_REQUIRE_GPU=1, but ") != std::string::npos);
}

TEST_CASE("Storage: mappable buffers are memfds listed for the peers to map", "[tensor]") {
  absl::StatusOr<Tensor> own = Tensor::Empty({(int64_t{1} << 18) + 3}, DType::kF32);
  absl::StatusOr<Tensor> big =
      Tensor::Empty({(int64_t{1} << 18) + 3}, DType::kF32, Device::Cpu(), HostMemory::kMappable);
  REQUIRE(own.ok());
  REQUIRE(big.ok());
  CHECK_FALSE(own->storage()->mappable());
  CHECK(own->storage()->peer_fast());  // huge pages
  CHECK_FALSE(FindMappable(own->data(), own->nbytes()).has_value());
  REQUIRE(big->storage()->mappable());
  CHECK(big->storage()->peer_fast());
  const auto* bytes = static_cast<const std::byte*>(big->data());
  std::optional<MappableRegion> whole = FindMappable(bytes, big->nbytes());
  REQUIRE(whole.has_value());
  CHECK(whole->base == bytes);
  CHECK(whole->length % 4096 == 0);
  CHECK(whole->length >= big->nbytes());
  CHECK(whole->fd >= 0);
  std::optional<MappableRegion> inside = FindMappable(bytes + 4096, 8);
  REQUIRE(inside.has_value());
  CHECK(inside->id == whole->id);
  CHECK_FALSE(FindMappable(bytes + whole->length - 4, 8).has_value());  // runs past its end
  absl::StatusOr<Tensor> other = Tensor::Empty({16}, DType::kF32, Device::Cpu(), HostMemory::kMappable);
  REQUIRE(other.ok());
  std::optional<MappableRegion> second = FindMappable(other->data(), other->nbytes());
  REQUIRE(second.has_value());
  CHECK(second->id != whole->id);
  // Asked twice before the free, so a remembered answer would be stale after it.
  CHECK(FindMappable(bytes, 8).has_value());
  CHECK(FindMappable(bytes, 8).has_value());
  *big = Tensor();  // the last reference: unmapped and unlisted
  CHECK_FALSE(FindMappable(bytes, 8).has_value());
}

TEST_CASE("Storage: a view of mappable memory is mappable, of private memory not", "[tensor]") {
  absl::StatusOr<std::byte*> memory = AllocateMappable(1 << 16);
  REQUIRE(memory.ok());
  Tensor inside = Tensor::View(*memory + 4096, {1024}, DType::kF32);
  CHECK(inside.storage()->mappable());
  CHECK(inside.storage()->peer_fast());
  CHECK_FALSE(inside.storage()->owning());
  // Running past the allocation's end: not all of it can be mapped.
  Tensor past = Tensor::View(*memory + (1 << 16) - 64, {32}, DType::kF32);
  CHECK_FALSE(past.storage()->mappable());
  std::vector<float> heap(1024);
  Tensor private_view = Tensor::View(heap.data(), {1024}, DType::kF32);
  CHECK_FALSE(private_view.storage()->mappable());
  CHECK_FALSE(private_view.storage()->peer_fast());
  FreeMappable(*memory);
  Tensor freed = Tensor::View(*memory, {16}, DType::kF32);  // the address only: not touched
  CHECK_FALSE(freed.storage()->mappable());
}

TEST_CASE("Storage: a forked child writes its own copy of a mappable buffer, not the parent's", "[tensor]") {
  absl::StatusOr<Tensor> big = Tensor::Zeros({int64_t{1} << 18}, DType::kF32, Device::Cpu(), HostMemory::kMappable);
  REQUIRE(big.ok());
  REQUIRE(FindMappable(big->data(), big->nbytes()).has_value());
  REQUIRE(FindMappable(big->data(), 8).has_value());  // remembered by this thread, forked with it
  float* values = big->data<float>();
  values[7] = 1.0f;
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const bool copied = values[7] == 1.0f && !FindMappable(big->data(), 8).has_value();
    values[7] = 2.0f;
    _exit(copied ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(values[7] == 1.0f);
  CHECK(FindMappable(big->data(), 8).has_value());
}

}  // namespace
}  // namespace braid
