// What a polling loop needs to know about the cores it runs on.
#ifndef BRAID_BASE_CPU_H_
#define BRAID_BASE_CPU_H_

#include <atomic>

namespace braid {

// Cores this process may run on (its affinity mask), at least 1.
int UsableCpus();

// For a thread that works for others (a progress or completion thread): when
// woken, it waits for a core rather than preempt the thread running there,
// which is often the one that woke it and is about to return (SCHED_BATCH;
// its share of the CPU is unchanged; bench/RESULTS.md has what it saves an
// asynchronous call). Best effort: a refusal leaves the policy as it was.
void RunAsBackgroundThread();

// One polling iteration's pause: tells the core we spin (no syscall).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A full memory barrier: stores before it are visible before loads after it
// (what a Dekker-style "set my flag, then look at yours" needs). GCC's TSan
// rejects atomic_thread_fence; there, a locked read-modify-write, which is a
// full barrier on x86 too, stands in.
inline void FullFence() {
#if defined(__SANITIZE_THREAD__)
  std::atomic<int> barrier{0};
  barrier.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

}  // namespace braid

#endif  // BRAID_BASE_CPU_H_
