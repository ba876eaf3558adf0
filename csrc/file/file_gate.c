/* file_gate.c: the file store's write gate, a lock in front of LMDB's.
 *
 * LMDB's writer lock has no deadline: mdb_txn_begin for writing waits
 * for as long as another process holds it, and a process frozen inside a
 * commit (SIGSTOP, a debugger, a page swapped out) holds it for as long
 * as it is frozen. A host whose event loop must not block (nginx,
 * Tarantool, a spawned coroutine) cannot afford that wait, and a call
 * must answer by its deadline in every host. So every writer of a store
 * takes this gate first, in every process, and only then LMDB's lock,
 * which is then free or about to be: a write that may not wait tries the
 * gate (resv__gate_try) and hands itself to a dispatcher thread when it
 * is taken; that thread, and any caller that may wait, waits for the gate
 * until the call's deadline (resv__gate_enter), then answers timeout.
 *
 * The gate is a robust process-shared mutex in the store's directory
 * (the file resv.gate, one page, mapped by each process's environment):
 * a process that dies holding it leaves it to the next taker
 * (EOWNERDEAD, made consistent at once: the gate guards nothing of its
 * own, LMDB's robust lock recovers the transaction). The file is set up
 * under flock(), so that two processes opening a new store at once see
 * one initialised mutex; a process that writes without taking the gate
 * (an older resv, mdb_load) is still serialised by LMDB's lock, only
 * without a deadline. */
#include "file_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define GATE_SIZE 4096
#define GATE_MAGIC UINT64_C(0x726573762e676174) /* "resv.gat" */

/* The file's layout: the mutex first, then the word that says it was
 * initialised (written last, under the flock). */
typedef struct gate_page {
  pthread_mutex_t mutex;
  uint64_t magic;
} gate_page_t;

struct resv__gate {
  gate_page_t *page; /* the shared mapping */
};

/* Initialises the mutex of a new gate file (fd locked, size GATE_SIZE). */
static bool init_page(gate_page_t *page, const char *file, resv_error_t *err) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(&page->mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc)
    return resv__fail(err, RESV_EUNAVAILABLE, "open: %s: cannot make the write gate: %s",
                      file, strerror(rc));
  page->magic = GATE_MAGIC;
  return true;
}

/* Maps the gate of fd, setting it up when it is new. Called with fd
 * flocked. */
static gate_page_t *map_page(int fd, const char *file, resv_error_t *err) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    resv__fail(err, RESV_EUNAVAILABLE, "open: %s: %s", file, strerror(errno));
    return NULL;
  }
  bool fresh = st.st_size == 0;
  if (fresh && ftruncate(fd, GATE_SIZE) != 0) {
    resv__fail(err, RESV_ENOMEM, "open: %s: %s", file, strerror(errno));
    return NULL;
  }
  if (!fresh && st.st_size != GATE_SIZE) {
    resv__fail(err, RESV_EFORMAT, "open: %s is not a resv write gate (%lld bytes)", file,
               (long long)st.st_size);
    return NULL;
  }
  void *p = mmap(NULL, GATE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    resv__fail(err, RESV_ENOMEM, "open: %s: cannot map it: %s", file, strerror(errno));
    return NULL;
  }
  gate_page_t *page = p;
  bool ok = page->magic == GATE_MAGIC ||
            (page->magic == 0 ? init_page(page, file, err)
                              : resv__fail(err, RESV_EFORMAT,
                                           "open: %s is not a resv write gate", file));
  if (!ok) {
    munmap(p, GATE_SIZE);
    return NULL;
  }
  return page;
}

resv__gate_t *resv__gate_open(const char *dir, resv_error_t *err) {
  char file[PATH_MAX];
  snprintf(file, sizeof file, "%s/%s", dir, RESV__GATE_FILE);
  resv__gate_t *g = calloc(1, sizeof *g);
  if (!g) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a file store");
    return NULL;
  }
  int fd = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0660);
  if (fd < 0) {
    resv__fail(err, RESV_EUNAVAILABLE, "open: %s: %s", file, strerror(errno));
  } else if (flock(fd, LOCK_EX) == 0) {
    g->page = map_page(fd, file, err);
    flock(fd, LOCK_UN);
  } else {
    resv__fail(err, RESV_EUNAVAILABLE, "open: %s: flock: %s", file, strerror(errno));
  }
  if (fd >= 0) close(fd); /* the mapping stays */
  if (!g->page) {
    free(g);
    return NULL;
  }
  return g;
}

void resv__gate_close(resv__gate_t *g) {
  if (!g) return;
  munmap(g->page, GATE_SIZE);
  free(g);
}

/* The answer of a lock call: 0 held (a dead holder's gate is taken over),
 * else the error. */
static int taken(resv__gate_t *g, int rc) {
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(&g->page->mutex);
    return 0;
  }
  return rc;
}

bool resv__gate_try(resv__gate_t *g) {
  return taken(g, pthread_mutex_trylock(&g->page->mutex)) == 0;
}

/* Waits for the mutex until deadline (resv__monotonic_ms's clock). */
static int lock_until(resv__gate_t *g, int64_t deadline) {
#if defined(__SANITIZE_THREAD__)
  /* ThreadSanitizer does not see pthread_mutex_clocklock (it then reports
   * the unlock of a mutex it never saw locked): under it, waits on the
   * realtime clock of at most 50 ms each, up to the monotonic deadline. */
  for (;;) {
    int64_t left = deadline - resv__monotonic_ms();
    if (left <= 0) return ETIMEDOUT;
    struct timespec until;
    resv__deadline_timespec(resv__realtime_ms() + (left < 50 ? left : 50), &until);
    int rc = pthread_mutex_timedlock(&g->page->mutex, &until);
    if (rc != ETIMEDOUT) return rc;
  }
#else
  struct timespec until;
  resv__deadline_timespec(deadline, &until);
  return pthread_mutex_clocklock(&g->page->mutex, CLOCK_MONOTONIC, &until);
#endif
}

bool resv__gate_enter(resv__gate_t *g, int64_t deadline, const char *what,
                      resv_error_t *err) {
  int rc = taken(g, pthread_mutex_trylock(&g->page->mutex));
  if (rc == EBUSY) {
    do {
      rc = taken(g, lock_until(g, deadline));
    } while (rc == EINTR || rc == EAGAIN);
  }
  if (rc == 0) return true;
  if (rc == ETIMEDOUT)
    return resv__fail(err, RESV_ETIMEOUT,
                      "%s: another writer of the file store held its write gate past the call's "
                      "deadline (a process frozen inside a commit?)", what);
  return resv__fail(err, RESV_EUNAVAILABLE, "%s: the file store's write gate: %s", what,
                    strerror(rc));
}

void resv__gate_leave(resv__gate_t *g) { pthread_mutex_unlock(&g->page->mutex); }
