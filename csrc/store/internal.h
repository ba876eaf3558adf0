/* internal.h: what the files of the store (csrc/store/) share, and what
 * the tests and benchmarks reach of it. The store is the one part that
 * knows every other: it opens a backend (the memory store, the file store
 * or the MongoDB store) through its header, hands the calls that do not
 * run inline to the dispatcher, and counts them. Nothing below includes
 * this header. */
#ifndef RESV_INTERNAL_H
#define RESV_INTERNAL_H

#include "backend.h"
#include "dispatch.h"
#include "file.h"
#include "memory.h"
#include "mongo.h"

#include <unistd.h>

/* ---- Stores and types ------------------------------------------------ */

/* A clock value meaning "read the system clock". */
#define RESV__SYSTEM_CLOCK INT64_MIN

struct resv_store {
  const resv__backend_ops_t *ops;
  void *backend;
  /* The dispatcher: made at open for a backend that does not run inline,
   * NULL for one that does; for one that hands calls off (hands_off),
   * made by the first call that has to wait (hand_off_pool), so that a
   * store whose calls never wait starts no thread. Set once, under
   * pool_mutex, which also guards pool_closed (no dispatcher is made any
   * more). */
  _Atomic(resv__pool_t *) pool;
  pthread_mutex_t pool_mutex;
  bool pool_closed;
  int threads, queue; /* the options, for a dispatcher made later */
  pid_t pid;          /* the process that opened the store */
  unsigned generation; /* fork_generation in that process */
  atomic_bool closed;
  /* The references besides the owner's: a stopper's while it runs
   * (resv_store_stop). Whoever lets go last (finding 0) tears the store
   * down. */
  atomic_int refs;
  atomic_bool stopping; /* a stopper was started */
  pthread_mutex_t shutdown_mutex; /* guards shut; held while shutting down */
  bool shut;          /* resv_store_shutdown's work is done */
  atomic_int active;  /* inline calls in progress */
  _Atomic int64_t clock_ms;
  int64_t timeout_ms;
  resv__limits_t limits;
  resv__stats_t *stats; /* the counters of resv_store_stats, given to the
                         * backend and to each submitted job */
  atomic_bool uncounted; /* bench/stats_cost.c's baseline: no counting */
  pthread_mutex_t types_mutex;
  /* The types by collection name: a chained hash table (linked through
   * type->next) that doubles when it holds as many types as buckets, so
   * resv_store_type is O(1) however many types there are (types.c). */
  resv_type_t **type_buckets;
  size_t type_nbuckets; /* a power of two; 0 before the first type */
  size_t ntypes;
  char database[64]; /* MongoDB's limit: 63 bytes */
};

/* A store used in a child forked after it was opened (process.c). */
static inline bool resv__store_forked(const resv_store_t *store) {
  return store->generation != resv__generation();
}

/* False with RESV_ECLOSED in a process forked after open or once the
 * store is closed (store.c). */
bool resv__store_check_open(resv_store_t *store, resv_error_t *err);
/* Shuts the store down (waiting, when a call is on the server, for it to
 * end) and frees it with its types (store.c). */
void resv__store_teardown(resv_store_t *store);
/* Frees the store's types (types.c), at teardown. */
void resv__store_free_types(resv_store_t *store);
/* Starts a reaper thread (reaper.c) that runs work(arg) (store.c's
 * teardown or stop); the process waits for it at exit. False when there
 * is no memory or thread for one, and work was not run. */
bool resv__reaper_start(void (*work)(void *arg), void *arg);

/* The entries and bytes of every type of the store (the backend's usage
 * op); false, both -1, for a store without one (MongoDB). */
bool resv__store_usage(resv_store_t *store, int64_t *entries, int64_t *bytes);
/* Turns the counting of resv_call's inline calls off and on, for the
 * baseline of bench/stats_cost.c (the same store, the same code path but
 * for one predictable branch). Counting is on from open. */
void resv__store_set_counting(resv_store_t *store, bool on);

/* Stores being torn down by resv_store_close's reaper threads (for
 * tests; the process waits for them at exit). */
int resv__store_reapers(void);

#endif /* RESV_INTERNAL_H */
