// What a polling loop needs to know about the cores it runs on.
#ifndef BRAID_BASE_CPU_H_
#define BRAID_BASE_CPU_H_

namespace braid {

// Cores this process may run on (its affinity mask), at least 1.
int UsableCpus();

// One polling iteration's pause: tells the core we spin (no syscall).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace braid

#endif  // BRAID_BASE_CPU_H_
