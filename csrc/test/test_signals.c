/* test_signals.c: a signal sent to the process is the host's, whatever
 * threads resv (and mongoc, from inside resv's calls) has started
 * (base.h, resv__thread_start). A test case of the store suite.
 *
 * The host here blocks SIGUSR1 in its thread once the store is open and
 * reads it from a signalfd, as cqueues' signal.listen does (sigwait is
 * the same case). A thread that does not block it would take it
 * instead, and SIGUSR1's default action ends the process. Each store
 * runs in a child of its own, so such an end fails the test, not the
 * run. */
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base.h"
#include "tests.h"

#define SIGNALS 50

static char dir[256];

static void setup(void) { test_temp_dir(dir, sizeof dir); }
static void teardown(void) { test_remove_dir(dir); }

static int threads_of_this_process(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* In a child: opens the store o says, makes a call, then takes SIGNALS
 * SIGUSR1s sent to the process from a signalfd, one at a time. */
static void host_reads_its_signals(void *arg) {
  const resv_options_t *o = arg;
  resv_error_t err;
  resv_store_t *s = resv_store_open(o, &err);
  if (!s) test_child_end(1, "open: %s", err.message);
  resv_type_t *t = resv_store_type(s, "test", 4, "signals", 7, &err);
  if (!t) test_child_end(1, "type: %s", err.message);
  resv_answer_t a = {0};
  resv_request_t r = {.op = RESV_OP_GET, .key = test_key("email", "a@x")};
  if (!resv_call(t, &r, &a, &err)) test_child_end(1, "get: %s", err.message);
  resv_answer_clear(&a);
  int threads = threads_of_this_process();
  if (threads < 2) test_child_end(1, "the store started no thread (%d): nothing is tested", threads);
  usleep(50 * 1000); /* the threads are waiting for work */
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, NULL);
  int fd = signalfd(-1, &usr1, SFD_CLOEXEC);
  if (fd < 0) test_child_end(1, "signalfd");
  for (int i = 0; i < SIGNALS; i++) {
    kill(getpid(), SIGUSR1);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    struct signalfd_siginfo info;
    if (poll(&p, 1, 5000) != 1 || read(fd, &info, sizeof info) != sizeof info)
      test_child_end(1, "signal %d of %d never reached the signalfd", i + 1, SIGNALS);
  }
  resv_store_close(s);
  test_child_exit(0);
}

static void signals_stay_the_hosts(const resv_options_t *o) {
  char msg[256] = "";
  int status = test_child_run(host_reads_its_signals, (void *)o, msg, sizeof msg);
  ck_assert_msg(!WIFSIGNALED(status) || WTERMSIG(status) != SIGUSR1,
                "a thread of the store took the host's SIGUSR1, which ended the process");
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the host: %d %s", status, msg);
}

/* The mask a thread of resv's starts with: the faults its own code may
 * raise stay unblocked (blocked, the kernel would reset the host's
 * handler for them, a crash reporter's or a sanitizer's, to the
 * default before delivering them); the rest is blocked. */
static void *own_mask(void *arg) {
  pthread_sigmask(SIG_SETMASK, NULL, (sigset_t *)arg);
  return NULL;
}

START_TEST(a_thread_of_resv_blocks_every_signal_but_the_faults) {
  sigset_t mask;
  pthread_t th;
  ck_assert_int_eq(resv__thread_start(&th, own_mask, &mask), 0);
  ck_assert_int_eq(pthread_join(th, NULL), 0);
  const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
  for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
    ck_assert_msg(!sigismember(&mask, faults[i]), "%s is blocked", strsignal(faults[i]));
  const int others[] = {SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD,
                        SIGALRM, SIGWINCH};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
    ck_assert_msg(sigismember(&mask, others[i]), "%s is not blocked", strsignal(others[i]));
  /* The maker's own mask is as it was. */
  pthread_sigmask(SIG_SETMASK, NULL, &mask);
  ck_assert(!sigismember(&mask, SIGUSR1));
}
END_TEST

/* (The memory store starts no thread.) */
START_TEST(a_file_store_leaves_the_hosts_signals_to_the_host) {
  signals_stay_the_hosts(&(resv_options_t){.path = dir, .sync = RESV_SYNC_DISK, .threads = 2});
  /* "process" adds the checkpoint thread to the dispatcher's. */
  signals_stay_the_hosts(&(resv_options_t){.path = dir, .sync = RESV_SYNC_PROCESS, .threads = 2});
}
END_TEST

START_TEST(a_mongodb_store_leaves_the_hosts_signals_to_the_host) {
  /* mongoc's monitoring threads start at the pool's first client. */
  signals_stay_the_hosts(
      &(resv_options_t){.uri = test_mongo_uri(), .threads = 2, .timeout_ms = 5000});
}
END_TEST

void signals_tcase(Suite *s) {
  const TTest *tests[] = {
      a_thread_of_resv_blocks_every_signal_but_the_faults,
      a_file_store_leaves_the_hosts_signals_to_the_host,
      a_mongodb_store_leaves_the_hosts_signals_to_the_host,
      NULL,
  };
  test_tcase(s, "signals", 60, setup, teardown, tests);
}
