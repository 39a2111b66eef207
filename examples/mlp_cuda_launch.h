// Internal to examples/: the launchers of mlp_kernels.cu, with a plain C++
// interface (nvcc compiles the .cu, g++ the rest). Each is asynchronous on
// `stream` (a cudaStream_t) on the current device and returns a cudaError_t
// value (0 = success). The ops are mlp.h's, on device memory.
#ifndef BRAID_EXAMPLES_MLP_CUDA_LAUNCH_H_
#define BRAID_EXAMPLES_MLP_CUDA_LAUNCH_H_

#include <cstddef>

namespace braid::examples::mlp_cuda {

int GatherRows(const float* x, const int* y, const int* rows, int n, int width, float* out_x, int* out_y,
               void* stream);
int Gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, const float* b, float beta, float* c,
         void* stream);
int BiasRows(float* z, const float* b, int rows, int cols, void* stream);
int Relu(float* z, size_t count, void* stream);
int ReluBackward(float* da, const float* a, size_t count, void* stream);
int SoftmaxCrossEntropy(const float* logits, const int* labels, int rows, int classes, float* dz, float* row_losses,
                        void* stream);
int ColumnSums(const float* dz, int rows, int cols, float* db, void* stream);
int SgdUpdate(float lr, const float* x, float* y, size_t count, void* stream);

}  // namespace braid::examples::mlp_cuda

#endif  // BRAID_EXAMPLES_MLP_CUDA_LAUNCH_H_
