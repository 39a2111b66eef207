// torch tensors and reduce ops as braid buffers and ops, and the checks and
// reshaping the list-shaped collectives need.
#ifndef BRAID_PYTHON_TORCH_BACKEND_TENSORS_H_
#define BRAID_PYTHON_TORCH_BACKEND_TENSORS_H_

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstdint>
#include <vector>

#include "capi/braid.h"

namespace braid_torch {

// What a collective does with its data: reductions need one of braid's
// dtypes; data that is only moved (broadcast, gathers, all-to-all,
// send/recv) may be of any dtype, carried as bytes.
enum class Use { kReduce, kMove };

// How a torch ReduceOp runs on braid for one dtype.
struct Reduction {
  braid_op op = BRAID_SUM;
  // PREMUL_SUM: each rank's input is multiplied by this before the sum.
  bool premultiply = false;
  double factor = 1;
  at::Tensor factor_tensor;  // PREMUL_SUM with a tensor factor
};

// The braid reduction for `op` on `type`, or a clear error naming what
// braid supports. bool reduces as uint8: SUM/MAX/BOR are a logical or,
// PRODUCT/MIN/BAND a logical and.
Reduction ToReduction(const c10d::ReduceOp& op, at::ScalarType type, const char* collective);

// A braid view of `tensor`, which must be dense and contiguous, on the CPU or a CUDA device.
braid_buffer ToBuffer(const at::Tensor& tensor, Use use, const char* collective);

// The one tensor of a call that takes a list of one.
const at::Tensor& Single(const std::vector<at::Tensor>& tensors, const char* collective);

// `tensor` (`what`) must have the dtype and device of `like` (`like_what`).
void CheckLike(const at::Tensor& tensor, const at::Tensor& like, const char* collective, const char* what,
               const char* like_what = "the input");
void CheckNumel(int64_t got, int64_t want, const char* collective, const char* what);
// A tensor a collective writes must be contiguous (a copy would not reach the caller's).
void CheckWritable(const at::Tensor& tensor, const char* collective, const char* what);

// `tensors` flattened into one new contiguous tensor, in order.
at::Tensor Flatten(const std::vector<at::Tensor>& tensors);
// Copies consecutive blocks of `flat` into `tensors` (the inverse of Flatten).
void Unflatten(const at::Tensor& flat, std::vector<at::Tensor>& tensors);

}  // namespace braid_torch

#endif  // BRAID_PYTHON_TORCH_BACKEND_TENSORS_H_
