/* The harness of the probes that run each variant in a child process of its own (a crash or a
 * hang ends that child only): `child` runs one variant and reports a line through `report`, a
 * signal handler reports the signal and the round (`round_no`), and `run_variants` prints
 * "title: v=report ..." on one line. Included by capture_end_signals.c and
 * calls_beside_capture_end.c. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int round_no, out_fd;

static void report(const char *line) {
  if (write(out_fd, line, strlen(line)) < 0) {}
}

static void on_sig(int s) {
  char b[80];
  snprintf(b, sizeof b, "%s@round%d", s == SIGALRM ? "HANG" : s == SIGSEGV ? "SIGSEGV" : "SIGNAL", round_no);
  report(b);
  _exit(100);
}

/* In the child: a crash or `seconds` without an end reports and exits. */
static void watch_child(unsigned seconds) {
  signal(SIGSEGV, on_sig); signal(SIGBUS, on_sig); signal(SIGABRT, on_sig); signal(SIGALRM, on_sig);
  alarm(seconds);
}

static int run_variants(const char *title, const char *variants, void (*child)(char)) {
  printf("%s:", title);
  for (int i = 0; variants[i]; i++) {
    int fds[2];
    if (pipe(fds)) return 1;
    pid_t pid = fork();
    if (pid == 0) { close(fds[0]); out_fd = fds[1]; child(variants[i]); _exit(0); }
    close(fds[1]);
    char b[200] = {0};
    ssize_t got = read(fds[0], b, sizeof b - 1);
    (void)got;
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    printf(" %c=%s", variants[i], b[0] ? b : "no-report");
    fflush(stdout);
  }
  printf("\n");
  return 0;
}
