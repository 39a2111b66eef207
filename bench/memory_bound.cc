// The memory bound an all-reduce on this host is measured against: THREADS
// threads (one per rank) each run `a += b` over its share of two float
// arrays of SIZE bytes, each share first touched by its own thread. Traffic
// counts 3 bytes per byte of `a` (a read, b read, a written). An all-reduce's
// bus bandwidth at that traffic is a quarter of it: each rank reads its
// input and its peers' and writes its output, through a cache that cannot
// hold them (issue 29 defines the bound this way).
//
//   memory_bound --sizes=67108864,268435456 --threads=2
// prints, per size: "size <bytes> traffic_gbps <x> bound_gbps <x/4>".
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(std::string, sizes, "67108864,268435456", "Array sizes in bytes, comma-separated.");
ABSL_FLAG(int, threads, 2, "Threads, one per rank.");
ABSL_FLAG(int, reps, 7, "Timed passes; the best is reported.");

namespace {

using Clock = std::chrono::steady_clock;

// The best pass's seconds for `threads` threads each adding its share of b into a.
double BestPassSeconds(size_t bytes, int threads, int reps) {
  const size_t count = bytes / sizeof(float);
  // Left uninitialized here: each thread first-touches its own share.
  float* a = new float[count];
  float* b = new float[count];
  const size_t passes = static_cast<size_t>(reps) + 1;  // the first warms
  std::barrier sync(threads);
  std::vector<std::thread> workers;
  std::vector<std::vector<double>> took(static_cast<size_t>(threads), std::vector<double>(passes));
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const size_t begin = count * static_cast<size_t>(t) / static_cast<size_t>(threads);
      const size_t end = count * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
      std::fill(a + begin, a + end, 1.0f);
      std::fill(b + begin, b + end, 0.5f);
      for (size_t rep = 0; rep < passes; ++rep) {
        sync.arrive_and_wait();
        const auto start = Clock::now();
        float* __restrict dst = a + begin;
        const float* __restrict src = b + begin;
        for (size_t i = 0; i < end - begin; ++i) dst[i] += src[i];
        took[static_cast<size_t>(t)][rep] = std::chrono::duration<double>(Clock::now() - start).count();
      }
    });
  }
  for (std::thread& w : workers) w.join();
  double best = 1e30;
  for (size_t rep = 1; rep < passes; ++rep) {
    double slowest = 0;
    for (const auto& mine : took) slowest = std::max(slowest, mine[rep]);
    best = std::min(best, slowest);
  }
  volatile float sink = a[count / 2];
  (void)sink;
  delete[] a;
  delete[] b;
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int threads = std::max(1, absl::GetFlag(FLAGS_threads));
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  for (absl::string_view field : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    size_t bytes = 0;
    if (!absl::SimpleAtoi(field, &bytes) || bytes < sizeof(float) * static_cast<size_t>(threads)) {
      std::fprintf(stderr, "memory_bound: bad size '%.*s'\n", static_cast<int>(field.size()), field.data());
      return 2;
    }
    const double seconds = BestPassSeconds(bytes, threads, reps);
    const double traffic = 3.0 * static_cast<double>(bytes) / seconds / 1e9;
    std::printf("size %zu traffic_gbps %.3f bound_gbps %.3f\n", bytes, traffic, traffic / 4);
  }
  return 0;
}
