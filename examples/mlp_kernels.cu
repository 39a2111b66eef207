// The CUDA form of the MLP's ops (mlp_cuda_launch.h). Plain on purpose: the
// model is a few GEMMs of at most 4096 x 4096, done in 32 x 32 shared-memory
// tiles (4 outputs a thread, every global load coalesced, transposed
// operands transposed on the way into shared memory).
#include <cuda_runtime.h>

#include <cstddef>

#include "examples/mlp_cuda_launch.h"

namespace braid::examples::mlp_cuda {
namespace {

constexpr int kTile = 32;
constexpr int kRowsPerThread = 4;  // a 32 x 8 block computes a 32 x 32 tile

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

int Launched() { return static_cast<int>(cudaGetLastError()); }

unsigned Blocks(size_t count, int threads) {
  const size_t blocks = (count + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
  return static_cast<unsigned>(blocks < 65535 ? (blocks == 0 ? 1 : blocks) : 65535);
}

// c[m x n] = op(a)[m x k] op(b)[k x n] + beta c, row-major. op(a)(i, p) is
// a[i * k + p], or a[p * m + i] transposed; op(b)(p, j) is b[p * n + j], or
// b[j * k + p] transposed. Each output sums p in order 0..k-1 (one
// accumulator), the same order on every call: results are deterministic.
template <bool kTransA, bool kTransB>
__global__ void GemmKernel(int m, int n, int k, const float* __restrict__ a, const float* __restrict__ b, float beta,
                           float* __restrict__ c) {
  __shared__ float as[kTile][kTile + 1];
  __shared__ float bs[kTile][kTile + 1];
  const int tx = threadIdx.x;  // 0..31: the column within the tile
  const int ty = threadIdx.y;  // 0..7: rows ty, ty + 8, ...
  const int row0 = blockIdx.y * kTile;
  const int col0 = blockIdx.x * kTile;
  float acc[kRowsPerThread] = {0, 0, 0, 0};
  for (int p0 = 0; p0 < k; p0 += kTile) {
    for (int r = ty; r < kTile; r += kTile / kRowsPerThread) {
      // as[r][tx] = op(a)(row0 + r, p0 + tx); bs[r][tx] = op(b)(p0 + r, col0 + tx).
      const int i = row0 + r, p = p0 + tx;
      float av = 0;
      if (kTransA) {
        // Coalesced along i: load the transposed tile and store it swapped.
        const int ti = row0 + tx, tp = p0 + r;
        if (ti < m && tp < k) av = a[static_cast<size_t>(tp) * m + ti];
        as[tx][r] = av;
      } else {
        if (i < m && p < k) av = a[static_cast<size_t>(i) * k + p];
        as[r][tx] = av;
      }
      float bv = 0;
      if (kTransB) {
        const int tj = col0 + r, tp = p0 + tx;
        if (tj < n && tp < k) bv = b[static_cast<size_t>(tj) * k + tp];
        bs[tx][r] = bv;
      } else {
        const int pp = p0 + r, j = col0 + tx;
        if (pp < k && j < n) bv = b[static_cast<size_t>(pp) * n + j];
        bs[r][tx] = bv;
      }
    }
    __syncthreads();
    const int depth = min(kTile, k - p0);
    for (int q = 0; q < depth; ++q) {
      const float bv = bs[q][tx];
#pragma unroll
      for (int s = 0; s < kRowsPerThread; ++s) acc[s] = fmaf(as[ty + s * (kTile / kRowsPerThread)][q], bv, acc[s]);
    }
    __syncthreads();
  }
  const int j = col0 + tx;
  if (j >= n) return;
#pragma unroll
  for (int s = 0; s < kRowsPerThread; ++s) {
    const int i = row0 + ty + s * (kTile / kRowsPerThread);
    if (i >= m) continue;
    float* out = c + static_cast<size_t>(i) * n + j;
    *out = beta == 0.0f ? acc[s] : acc[s] + beta * *out;
  }
}

__global__ void GatherRowsKernel(const float* x, const int* y, const int* rows, int n, int width, float* out_x,
                                 int* out_y) {
  const int r = blockIdx.x;
  if (r >= n) return;
  const size_t row = static_cast<size_t>(rows[r]);
  for (int c = threadIdx.x; c < width; c += blockDim.x) out_x[static_cast<size_t>(r) * width + c] = x[row * width + c];
  if (threadIdx.x == 0) out_y[r] = y[row];
}

__global__ void BiasRowsKernel(float* z, const float* b, int rows, int cols) {
  const size_t total = static_cast<size_t>(rows) * cols;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    z[i] = b[i % static_cast<size_t>(cols)];
  }
}

__global__ void ReluKernel(float* z, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    z[i] = z[i] > 0 ? z[i] : 0;
  }
}

__global__ void ReluBackwardKernel(float* da, const float* a, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    da[i] = a[i] > 0 ? da[i] : 0;
  }
}

// One thread per row, in double as the CPU form.
__global__ void SoftmaxCrossEntropyKernel(const float* logits, const int* labels, int rows, int classes, float* dz,
                                          float* row_losses) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* row = logits + static_cast<size_t>(r) * classes;
  float top = row[0];
  for (int c = 1; c < classes; ++c) top = fmaxf(top, row[c]);
  double sum = 0;
  for (int c = 0; c < classes; ++c) sum += exp(static_cast<double>(row[c] - top));
  const int label = labels[r];
  row_losses[r] = static_cast<float>(log(sum) - (row[label] - top));
  for (int c = 0; c < classes; ++c) {
    const double p = exp(static_cast<double>(row[c] - top)) / sum;
    dz[static_cast<size_t>(r) * classes + c] = static_cast<float>((p - (c == label ? 1.0 : 0.0)) / rows);
  }
}

// One thread per column, rows in order: the CPU form's sum.
__global__ void ColumnSumsKernel(const float* dz, int rows, int cols, float* db) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum = 0;
  for (int r = 0; r < rows; ++r) sum += dz[static_cast<size_t>(r) * cols + c];
  db[c] = sum;
}

__global__ void SgdUpdateKernel(float lr, const float* x, float* y, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] -= lr * x[i];
  }
}

}  // namespace

int GatherRows(const float* x, const int* y, const int* rows, int n, int width, float* out_x, int* out_y,
               void* stream) {
  if (n == 0) return 0;
  GatherRowsKernel<<<n, 256, 0, AsStream(stream)>>>(x, y, rows, n, width, out_x, out_y);
  return Launched();
}

int Gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, const float* b, float beta, float* c,
         void* stream) {
  if (m == 0 || n == 0) return 0;
  const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
  const dim3 block(kTile, kTile / kRowsPerThread);
  cudaStream_t s = AsStream(stream);
  if (trans_a && trans_b) {
    GemmKernel<true, true><<<grid, block, 0, s>>>(m, n, k, a, b, beta, c);
  } else if (trans_a) {
    GemmKernel<true, false><<<grid, block, 0, s>>>(m, n, k, a, b, beta, c);
  } else if (trans_b) {
    GemmKernel<false, true><<<grid, block, 0, s>>>(m, n, k, a, b, beta, c);
  } else {
    GemmKernel<false, false><<<grid, block, 0, s>>>(m, n, k, a, b, beta, c);
  }
  return Launched();
}

int BiasRows(float* z, const float* b, int rows, int cols, void* stream) {
  const size_t total = static_cast<size_t>(rows) * cols;
  if (total == 0) return 0;
  BiasRowsKernel<<<Blocks(total, 256), 256, 0, AsStream(stream)>>>(z, b, rows, cols);
  return Launched();
}

int Relu(float* z, size_t count, void* stream) {
  if (count == 0) return 0;
  ReluKernel<<<Blocks(count, 256), 256, 0, AsStream(stream)>>>(z, count);
  return Launched();
}

int ReluBackward(float* da, const float* a, size_t count, void* stream) {
  if (count == 0) return 0;
  ReluBackwardKernel<<<Blocks(count, 256), 256, 0, AsStream(stream)>>>(da, a, count);
  return Launched();
}

int SoftmaxCrossEntropy(const float* logits, const int* labels, int rows, int classes, float* dz, float* row_losses,
                        void* stream) {
  if (rows == 0) return 0;
  SoftmaxCrossEntropyKernel<<<Blocks(static_cast<size_t>(rows), 128), 128, 0, AsStream(stream)>>>(
      logits, labels, rows, classes, dz, row_losses);
  return Launched();
}

int ColumnSums(const float* dz, int rows, int cols, float* db, void* stream) {
  if (cols == 0) return 0;
  ColumnSumsKernel<<<Blocks(static_cast<size_t>(cols), 128), 128, 0, AsStream(stream)>>>(dz, rows, cols, db);
  return Launched();
}

int SgdUpdate(float lr, const float* x, float* y, size_t count, void* stream) {
  if (count == 0) return 0;
  SgdUpdateKernel<<<Blocks(count, 256), 256, 0, AsStream(stream)>>>(lr, x, y, count);
  return Launched();
}

}  // namespace braid::examples::mlp_cuda
