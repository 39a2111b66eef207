// What an all-reduce of two ranks could reach if every buffer lived in memory
// both ranks map (issue 29, item 3): no kernel copy, no scratch, each rank
// loading both inputs of its half and storing the sum into both outputs.
// Two processes (fork) share one memfd holding in0, in1, out0, out1 of SIZE
// bytes each; rank r sums half r. Per pass, after a barrier in the same
// memory:
//   out, streaming stores: out0[h] = out1[h] = in0[h] + in1[h], around the
//        cache (no read for ownership of the outputs)
//   out, plain stores:     the same with ordinary stores
//   in place:              in0[h] = in1[h] = in0[h] + in1[h]
// and prints the busbw of each (SIZE / seconds: an all-reduce of 2 ranks),
// the best of REPS passes, to set beside braid_bench's in and out of place.
// A probe of the design, not braid: its barrier spins on a counter in the
// shared memory and gives up (exit 1) after 60 s, as when the other process died.
//
//   shared_outputs_probe --size=67108864 --reps=10
#include <immintrin.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"

ABSL_FLAG(size_t, size, size_t{64} << 20, "Bytes in each buffer (a multiple of 64).");
ABSL_FLAG(int, reps, 10, "Timed passes per mode; the best is reported.");

namespace {

enum class Mode { kOutStreaming, kOutPlain, kInPlace };

struct Shared {
  std::atomic<uint64_t> arrived{0};
  double best_seconds[3] = {0, 0, 0};
};

void Barrier(Shared* shared, uint64_t* generation) {
  *generation += 2;
  shared->arrived.fetch_add(1, std::memory_order_acq_rel);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (uint64_t spins = 1; shared->arrived.load(std::memory_order_acquire) < *generation; ++spins) {
    _mm_pause();
    if (spins % 4096 == 0 && std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "shared_outputs_probe: the other rank did not reach the barrier in 60 s\n");
      _exit(1);
    }
  }
}

__attribute__((target("avx2"))) void SumHalf(Mode mode, float* in0, float* in1, float* out0, float* out1,
                                             size_t begin, size_t end) {
  for (size_t i = begin; i < end; i += 8) {
    const __m256 sum = _mm256_add_ps(_mm256_load_ps(in0 + i), _mm256_load_ps(in1 + i));
    switch (mode) {
      case Mode::kOutStreaming:
        _mm256_stream_ps(out0 + i, sum);
        _mm256_stream_ps(out1 + i, sum);
        break;
      case Mode::kOutPlain:
        _mm256_store_ps(out0 + i, sum);
        _mm256_store_ps(out1 + i, sum);
        break;
      case Mode::kInPlace:
        _mm256_store_ps(in0 + i, sum);
        _mm256_store_ps(in1 + i, sum);
        break;
    }
  }
  _mm_sfence();
}

void Rank(int rank, size_t count, int reps, float* base, Shared* shared) {
  float* in0 = base;
  float* in1 = base + count;
  float* out0 = base + 2 * count;
  float* out1 = base + 3 * count;
  const size_t half = count / 2;
  const size_t begin = rank == 0 ? 0 : half;
  const size_t end = rank == 0 ? half : count;
  // Each rank first-touches its own input and output, as a process would.
  float* mine_in = rank == 0 ? in0 : in1;
  float* mine_out = rank == 0 ? out0 : out1;
  for (size_t i = 0; i < count; ++i) mine_in[i] = static_cast<float>(i % 1000) * 0.5f;
  std::memset(mine_out, 0, count * sizeof(float));
  uint64_t generation = 0;
  for (Mode mode : {Mode::kOutStreaming, Mode::kOutPlain, Mode::kInPlace}) {
    double best = 1e30;
    for (int pass = 0; pass <= reps; ++pass) {  // pass 0 warms
      Barrier(shared, &generation);
      const auto start = std::chrono::steady_clock::now();
      SumHalf(mode, in0, in1, out0, out1, begin, end);
      Barrier(shared, &generation);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (pass > 0) best = std::min(best, seconds);
    }
    if (rank == 0) shared->best_seconds[static_cast<int>(mode)] = best;
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const size_t bytes = absl::GetFlag(FLAGS_size) / 64 * 64;
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  const size_t count = bytes / sizeof(float);
  const int fd = memfd_create("shared_outputs_probe", 0);
  const size_t total = 4 * bytes + 4096;
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(total)) != 0) {
    std::perror("memfd");
    return 1;
  }
  void* map = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* shared = new (static_cast<char*>(map) + 4 * bytes) Shared;
  const pid_t child = fork();
  if (child < 0) return 1;
  Rank(child == 0 ? 1 : 0, count, reps, static_cast<float*>(map), shared);
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  const char* names[3] = {"out of place, streaming stores", "out of place, plain stores", "in place"};
  for (int m = 0; m < 3; ++m) {
    std::printf("size %zu mode \"%s\" busbw_gbps %.2f\n", bytes, names[m], bytes / shared->best_seconds[m] / 1e9);
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
