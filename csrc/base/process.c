/* process.c: which process an object belongs to, and the threads resv
 * starts in it.
 *
 * A store's threads and connections, a job in flight and an inbox's list
 * live in the process that made them; a child forked afterwards inherits
 * copies it must not use (their threads are gone, their mutexes may be held
 * for ever). Each object records the generation it was made in, and
 * compares it on use: a pthread_atfork handler counts the fork()s that made
 * this process, a child inheriting the count and adding one. Comparing a
 * counter costs a load; getpid() costs a system call on every call, about
 * a third of a memory-store call. */
#include "base.h"

static atomic_uint fork_generation;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void count_fork(void) { atomic_fetch_add(&fork_generation, 1); }
static void install_fork_counter(void) { pthread_atfork(NULL, NULL, count_fork); }

unsigned resv__generation_start(void) {
  pthread_once(&atfork_once, install_fork_counter);
  return atomic_load(&fork_generation);
}

unsigned resv__generation(void) {
  return atomic_load_explicit(&fork_generation, memory_order_relaxed);
}

uint32_t resv_process_generation(void) { return resv__generation_start(); }

/* ---- threads ------------------------------------------------------------ */

/* Every signal but the faults a thread's own code raises (a bad address,
 * a truncated map's SIGBUS): blocked, the kernel would still deliver
 * those, after resetting the process's handler for them to the default,
 * and a host's crash handler (or a sanitizer's) would never run. */
static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};

void resv__signals_block(sigset_t *old) {
  sigset_t all;
  sigfillset(&all);
  for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) sigdelset(&all, faults[i]);
  pthread_sigmask(SIG_SETMASK, &all, old);
}

void resv__signals_restore(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

int resv__thread_start(pthread_t *thread, void *(*fn)(void *), void *arg) {
  sigset_t old;
  resv__signals_block(&old); /* a new thread inherits its maker's mask */
  int rc = pthread_create(thread, NULL, fn, arg);
  resv__signals_restore(&old);
  return rc;
}
