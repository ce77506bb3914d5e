// A diagnostic for a test child that dies of SIGSEGV on the GPU machine (which has no promise of
// gdb): LD_PRELOADed, it prints the faulting thread's return addresses and /proc/self/maps to
// stderr, so that the addresses can be symbolized here against the same staged binary
// (addr2line -f -e BINARY OFFSET, the offset being the address less the binary's mapping base).
// Installed before Rust's main, which then leaves its own stack-overflow handler out.
//   gcc -shared -fPIC -O1 -o /tmp/segv_trace.so bench/probes/segv_trace.c
//   CUDA_EVENT_TEST_ROLE=reset-measure LD_PRELOAD=/tmp/segv_trace.so .gpu-static-13/bin/lifecycle-* \
//     --exact a_device_reset_during_a_measurement_is_an_error_not_a_crash --include-ignored --nocapture
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <ucontext.h>
static void on_segv(int sig, siginfo_t *si, void *uc_) {
  ucontext_t *uc = uc_;
  char buf[256];
  int n = snprintf(buf, sizeof buf, "\n=== SIGNAL %d addr %p pc %llx tid %d\n", sig, si->si_addr,
                   (unsigned long long)uc->uc_mcontext.gregs[REG_RIP], (int)gettid());
  write(2, buf, n);
  void *frames[64];
  int k = backtrace(frames, 64);
  backtrace_symbols_fd(frames, k, 2);
  int fd = open("/proc/self/maps", O_RDONLY);
  ssize_t r;
  write(2, "=== maps\n", 9);
  while ((r = read(fd, buf, sizeof buf)) > 0) write(2, buf, r);
  signal(sig, SIG_DFL);
  raise(sig);
}
__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, 0);
  sigaction(SIGBUS, &sa, 0);
}
