/* reaper.c: the threads that close stores without waiting.
 *
 * resv_store_close is what a garbage collector calls (Lua's ffi.gc), and
 * a collector must never wait on the network: a call blocked on the
 * server would hold it for as long as the call. So a store that may still
 * talk to a server is torn down by a reaper thread of its own, bounded by
 * the in-flight call's deadline and the driver's timeouts. The process
 * waits for its reapers when it exits (and when libresv is unloaded:
 * atexit in a shared object runs at dlclose), so none is cut off
 * mid-teardown or outlives the code it runs.
 *
 * A reaper runs the work store.c hands it and knows nothing of a store:
 * this file calls nothing of store.c's. */
#include "internal.h"

#include <stdlib.h>

static pthread_mutex_t reapers_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reapers_cond = PTHREAD_COND_INITIALIZER;
static pthread_once_t reapers_once = PTHREAD_ONCE_INIT;

/* A reaper's thread is joined, never detached: a thread is gone only once
 * its exit (the thread-local destructors of the TLS library the driver
 * uses, among others) has run, and exit() or the unloading of libresv
 * must not pull the code or the libraries' state from under it. Finished
 * reapers are joined at the next close and at exit. Guarded by
 * reapers_mutex. */
typedef struct reaper {
  pthread_t thread;
  void (*work)(void *arg);
  void *arg;
  bool done;
  struct reaper *next;
} reaper_t;
static reaper_t *reaper_list;
static int reapers; /* running */

/* Joins the reapers that are done (their threads have at most their exit
 * path left). Called with reapers_mutex held. */
static void join_done_reapers_locked(void) {
  reaper_t **link = &reaper_list;
  while (*link) {
    reaper_t *r = *link;
    if (r->done) {
      pthread_join(r->thread, NULL);
      *link = r->next;
      free(r);
    } else {
      link = &r->next;
    }
  }
}

static void wait_for_reapers(void) {
  pthread_mutex_lock(&reapers_mutex);
  while (reapers > 0) pthread_cond_wait(&reapers_cond, &reapers_mutex);
  join_done_reapers_locked();
  pthread_mutex_unlock(&reapers_mutex);
}

/* fork() copies the count and the list but not the threads: the child has
 * none (the parent's records are left, never freed, in the child). The
 * reapers that are done are joined first: the child then inherits no
 * thread that ended unjoined, whose stack glibc would hand to the child's
 * next thread (ThreadSanitizer saw that as one thread started twice). */
static void reapers_lock(void) {
  pthread_mutex_lock(&reapers_mutex);
  join_done_reapers_locked();
}
static void reapers_unlock(void) { pthread_mutex_unlock(&reapers_mutex); }
static void reapers_after_fork_child(void) {
  reapers = 0;
  reaper_list = NULL;
  pthread_mutex_unlock(&reapers_mutex);
}

static void install_reapers(void) {
  atexit(wait_for_reapers);
  pthread_atfork(reapers_lock, reapers_unlock, reapers_after_fork_child);
}

static void *reap(void *arg) {
  reaper_t *r = arg;
  r->work(r->arg);
  pthread_mutex_lock(&reapers_mutex);
  r->done = true;
  if (--reapers == 0) pthread_cond_broadcast(&reapers_cond);
  pthread_mutex_unlock(&reapers_mutex);
  return NULL;
}

int resv__store_reapers(void) {
  pthread_mutex_lock(&reapers_mutex);
  int n = reapers;
  pthread_mutex_unlock(&reapers_mutex);
  return n;
}

bool resv__reaper_start(void (*work)(void *arg), void *arg) {
  pthread_once(&reapers_once, install_reapers);
  reaper_t *r = calloc(1, sizeof *r);
  if (!r) return false;
  r->work = work;
  r->arg = arg;
  pthread_mutex_lock(&reapers_mutex);
  join_done_reapers_locked();
  if (resv__thread_start(&r->thread, reap, r) != 0) {
    pthread_mutex_unlock(&reapers_mutex);
    free(r);
    return false;
  }
  reapers++;
  r->next = reaper_list;
  reaper_list = r;
  pthread_mutex_unlock(&reapers_mutex);
  return true;
}
