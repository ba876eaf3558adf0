/* internal.h: what the files of the core share and the public header hides.
 *
 * The store (store.c) owns a backend, chosen at open: the memory store
 * (memory.c) answers on the caller's thread; the MongoDB store (mongo_*.c)
 * runs resv_call on the caller's thread (execute_blocking) and submitted
 * calls on the dispatcher (pool.c). A backend is a table of functions over
 * an opaque pointer, so the store, the jobs and the validation are written
 * once for both. */
#ifndef RESV_INTERNAL_H
#define RESV_INTERNAL_H

#include "resv.h"

#include <pthread.h>
#include <stdatomic.h>

#define RESV__DEFAULT_THREADS 8
#define RESV__DEFAULT_QUEUE 1024
#define RESV__DEFAULT_TIMEOUT_MS 5000
#define RESV__DEFAULT_MAX_STRING 1024
/* Every call on a reservation costs O(its holds) (the answer lists them),
 * so their number is bounded: 50,000 unbounded holds made a memory-store
 * reserve take over a millisecond and a MongoDB document megabytes. */
#define RESV__DEFAULT_MAX_HOLDS 100
#define RESV__DEFAULT_MAX_KEYS 16
#define RESV__MAX_KEYS 1024
/* sweep_grace_ms: how long an expired pending reservation stays before
 * reclaiming or a sweep may delete it; at most 2^53 (a Lua number). */
#define RESV__DEFAULT_GRACE_MS 60000
#define RESV__MAX_GRACE_MS (INT64_C(1) << 53)
/* How long a waiter waits past a call's deadline for the worker to answer
 * it itself (its own timeout fires at the deadline) before it answers
 * RESV_ETIMEOUT on its own. */
#define RESV__DEADLINE_GRACE_MS 250
/* The deadlines of a call run on its caller's thread: one that may wait
 * (resv_call), which a backend that has to wait turns into the call's own
 * deadline (timeout_ms from now); and one that must not (a host's event
 * loop, through resv_submit): a backend that would wait answers
 * RESV__EWOULDBLOCK instead, a code that never reaches a caller (the
 * store then hands the call to its dispatcher). */
#define RESV__DEADLINE_MAY_WAIT INT64_MAX
#define RESV__DEADLINE_NO_WAIT INT64_MIN
#define RESV__EWOULDBLOCK 1000
/* The longest deadline, a store's or a call's: a day. */
#define RESV__MAX_TIMEOUT_MS (24 * 3600 * 1000)
#define RESV__COLLECTION_PREFIX "wow_reservation__"
/* MongoDB's limit for "<database>.<collection>", in bytes. */
#define RESV__MAX_NAMESPACE 255

/* ---- Errors (error.c) ------------------------------------------------ */

/* Fills err (when not NULL) and returns false, so failure paths read
 * `return resv__fail(err, RESV_EINVALID, "...")`. */
bool resv__fail(resv_error_t *err, int32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool resv__fail_server(resv_error_t *err, int32_t code, int32_t server_code,
                       const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void resv__error_clear(resv_error_t *err);
/* The error of a new attempt on a reservation that has max_holds holds,
 * the same from every store. Returns false. */
bool resv__fail_holds_full(resv_error_t *err, int32_t max_holds);

/* ---- Clocks (clock.c) ------------------------------------------------ */

int64_t resv__realtime_ms(void);
int64_t resv__monotonic_ms(void);
/* Fills ts with the monotonic instant deadline_ms, for waiting on a
 * condition variable made by resv__cond_init. */
void resv__deadline_timespec(int64_t deadline_ms, struct timespec *ts);
/* Initialises cond to time its waits on the monotonic clock. */
void resv__cond_init(pthread_cond_t *cond);
/* Every sum of two instants or durations goes through these, so none can
 * overflow int64 (undefined behaviour, and a wrapped expiry grants a key
 * twice). resv__add_ms_checked stores a + b and returns true, or returns
 * false (nothing stored) when the sum is past int64; resv__add_ms_sat
 * gives the sum clamped to INT64_MIN..INT64_MAX (a deadline that far is
 * no deadline). */
bool resv__add_ms_checked(int64_t a, int64_t b, int64_t *sum);
int64_t resv__add_ms_sat(int64_t a, int64_t b);
/* The expiry of a reserve at now: now + ttl_ms into *expires, or false
 * with RESV_EINVALID naming both values when the sum is past int64. */
bool resv__expiry(int64_t now, int64_t ttl_ms, int64_t *expires,
                  resv_error_t *err);

/* ---- Processes (process.c) ------------------------------------------ */

/* The fork generation of this process, counting fork()s from now on: an
 * object made in this process records it at creation. */
unsigned resv__generation_start(void);
/* The fork generation now (one load): differs from the recorded one in a
 * child forked after the object was made. */
unsigned resv__generation(void);

/* ---- Answers (answer.c) ---------------------------------------------- */

/* Sets every field of answer, copying the strings into its storage.
 * owner_tenant/owner_id may be NULL (no owner). Fails only for memory. */
bool resv__answer_set(resv_answer_t *answer, int32_t status, int32_t state,
                      int64_t expires_at, int64_t version,
                      const resv_str_t *owner_tenant,
                      const resv_str_t *owner_id, const resv_str_t *holds,
                      size_t nholds, resv_error_t *err);
/* Sets a status with no reservation data (abandoned, absent, ...). */
bool resv__answer_status(resv_answer_t *answer, int32_t status,
                         resv_error_t *err);
/* Moves src into dst (freeing dst's storage); src is left zeroed. */
void resv__answer_move(resv_answer_t *dst, resv_answer_t *src);
/* Makes answer an answer of n keys with `status`: answer->keys[0 .. n-1]
 * zeroed but for storage kept from an earlier use, for the caller to fill
 * with resv__answer_set (through resv__answer_key). */
bool resv__answer_keys(resv_answer_t *answer, int32_t status, size_t n,
                       resv_error_t *err);
/* The writable answer of key i of an answer made by resv__answer_keys. */
resv_answer_t *resv__answer_key(resv_answer_t *answer, size_t i);

/* ---- Validation (validate.c) ----------------------------------------- */

/* A store's limits on a request. */
typedef struct resv__limits {
  size_t max_string; /* longest string, bytes */
  size_t max_keys;   /* most keys of a *_all op */
} resv__limits_t;

/* Checks a request's strings and numbers for its op: UTF-8, no NUL,
 * at most max_string bytes, non-empty namespace, key, owner id and
 * attempt, ttl > 0, version >= 0; for the *_all ops 1 to max_keys keys,
 * no two the same. */
bool resv__validate_request(const resv_request_t *req, const resv__limits_t *limits,
                            resv_error_t *err);
/* True for RESV_OP_RESERVE_ALL, CONFIRM_ALL and ABANDON_ALL. */
bool resv__op_is_all(int32_t op);
/* The single-key op of a *_all op (RESV_OP_RESERVE for RESERVE_ALL, ...);
 * any other op itself. */
int32_t resv__op_single(int32_t op);
/* Checks an aggregate type's names and builds its collection name into
 * out (NUL-terminated), given the database name for the length rule. */
bool resv__validate_type(const char *context, size_t context_len,
                         const char *aggregate, size_t aggregate_len,
                         const char *database, char *out, size_t out_size,
                         resv_error_t *err);
/* True when s[0..len) is valid UTF-8 without NUL bytes. */
bool resv__utf8_valid(const char *s, size_t len);

/* ---- Counters (stats.c) ---------------------------------------------- */

#define RESV__DEFAULT_SLOW_MS 100

typedef struct resv__stats resv__stats_t;
/* The counters a backend adds to besides the calls' own. */
enum {
  RESV__STAT_DUPLICATE_RETRY = 0,
  RESV__STAT_SETUP_FAILURE = 1,
  RESV__STAT_KINDS = 2
};
resv__stats_t *resv__stats_new(int64_t slow_ms);
void resv__stats_free(resv__stats_t *stats);
/* The monotonic clock in ns, for latencies. */
int64_t resv__now_ns(void);
/* Counts one ended call of op: answered (ok, what = its status) or
 * failed (what = its code), that took ns. Never fails; NULL is ignored. */
void resv__stats_call(resv__stats_t *stats, int32_t op, bool ok, int32_t what,
                      int64_t ns);
/* Its two halves: the answer's counter, and one latency observation. */
void resv__stats_answer(resv__stats_t *stats, int32_t op, bool ok, int32_t what);
void resv__stats_latency(resv__stats_t *stats, int32_t op, int64_t ns);
/* The memory store's calls cost less than the two clock reads a latency
 * needs (49 ns each on this machine's VM against a 370 ns get), so its
 * histogram observes one call in RESV__SAMPLE_EVERY (256) per thread (a power
 * of two): true for the call to time. */
#define RESV__SAMPLE_EVERY 256
/* The tick of the calling thread (stats.c). Initial-exec TLS: a load from
 * the thread pointer, where the default model cost a call to
 * __tls_get_addr in the shared library; the few bytes come from the
 * static TLS space glibc keeps for libraries loaded by dlopen. */
extern _Thread_local unsigned resv__sample_tick __attribute__((tls_model("initial-exec")));
static inline bool resv__stats_sample(void) {
  return (++resv__sample_tick & (RESV__SAMPLE_EVERY - 1)) == 0;
}
void resv__stats_count(resv__stats_t *stats, int kind);
/* Adds the counters into out (zeroed by the caller). */
void resv__stats_sum(const resv__stats_t *stats, resv_stats_t *out);

/* ---- Backends -------------------------------------------------------- */

typedef struct resv__backend_ops {
  const char *name; /* "memory", "file", "mongodb" */
  /* True: execute runs on the caller's thread (no dispatcher). */
  bool runs_inline;
  /* True: a store with a dispatcher still runs a blocking call (resv_call)
   * on the caller's thread, which waits either way: execute needs nothing
   * of a dispatcher thread (the file store with sync = disk, whose commit
   * would only be waited for there, at the cost of two thread switches). */
  bool blocking_inline;
  /* True (with runs_inline): execute may have to wait (the file store's
   * writes wait for its write gate), so the store keeps a dispatcher, and
   * a call from a host that must not block runs inline with
   * RESV__DEADLINE_NO_WAIT: when it would wait it answers
   * RESV__EWOULDBLOCK and the store hands it to the dispatcher, which
   * waits until the call's deadline. */
  bool hands_off;
  /* True: execute runs the *_all ops (several keys of one request). */
  bool several_keys;
  /* Per-type state, made when the store first hands out the type (under
   * the store's type lock) and freed at close. May be NULL. */
  bool (*type_init)(void *backend, resv_type_t *type, resv_error_t *err);
  void (*type_free)(void *backend, resv_type_t *type);
  /* Runs one validated request. now is the store's clock (epoch ms, read
   * once for the call); deadline is on resv__monotonic_ms's clock, or one
   * of RESV__DEADLINE_MAY_WAIT and RESV__DEADLINE_NO_WAIT for a call on
   * the caller's thread. Fills answer and returns true, or fills err and
   * returns false. */
  bool (*execute)(void *backend, resv_type_t *type, const resv_request_t *req,
                  int64_t now, int64_t deadline, resv_answer_t *answer,
                  resv_error_t *err);
  /* The same call on the caller's thread, which waits for it anyway
   * (resv_call): a backend with a dispatcher whose calls need none of its
   * threads (MongoDB borrows a client for the call). deadline is the
   * call's own, on resv__monotonic_ms's clock. NULL: resv_call hands the
   * call to the dispatcher. */
  bool (*execute_blocking)(void *backend, resv_type_t *type,
                           const resv_request_t *req, int64_t now,
                           int64_t deadline, resv_answer_t *answer,
                           resv_error_t *err);
  /* Refuses new execute_blocking calls and wakes the ones waiting (they
   * answer RESV_ECLOSED); shutdown then waits for those still running
   * before it calls shutdown. May be NULL. */
  void (*refuse_blocking)(void *backend);
  /* One page of resv_type_scan (store.c has cleared scan and checked
   * limit), on a dispatcher thread when the store has them, else on the
   * caller's. May be NULL: no scan. */
  bool (*scan)(void *backend, resv_type_t *type, const resv_str_t *after,
               size_t limit, int64_t now, int64_t deadline, resv_scan_t *scan,
               resv_error_t *err);
  /* resv_store_types: adds each type's collection name with
   * resv__type_names_add, on a dispatcher thread when the store has them.
   * May be NULL: no list. */
  bool (*list_types)(void *backend, int64_t deadline, resv_type_names_t *names,
                     resv_error_t *err);
  /* resv_type_put of a validated entry, on a dispatcher thread when the
   * store has them. May be NULL: no put. */
  bool (*put)(void *backend, resv_type_t *type, const resv_scan_entry_t *entry,
              int64_t deadline, int32_t *outcome, resv_error_t *err);
  void (*describe)(void *backend, char *buf, size_t size);
  /* Adds the type's live entries (records) and the bytes they take to
   * *entries and *bytes. NULL for a store that keeps nothing locally. */
  void (*usage)(void *backend, resv_type_t *type, int64_t *entries,
                int64_t *bytes);
  bool (*is_sharded)(void *backend);
  /* The server's clock minus this host's, ms, within *error_ms; false
   * when not measured (yet). NULL for a store without a server. */
  bool (*clock_skew)(void *backend, int64_t *skew_ms, int64_t *error_ms);
  /* Lets go of the network (connections, driver threads) once no call
   * runs any more; describe and destroy still work after. May be NULL. */
  void (*shutdown)(void *backend);
  /* Frees the backend; every type was freed before. */
  void (*destroy)(void *backend);
} resv__backend_ops_t;

/* Opens the memory store. */
void *resv__memory_open(const resv_options_t *options,
                        const resv__backend_ops_t **ops, resv_error_t *err);
/* Opens the file store (file_store.c). options->path is set, uri is not. */
void *resv__file_open(const resv_options_t *options,
                      const resv__backend_ops_t **ops, resv_error_t *err);
/* Opens the MongoDB store (mongo_store.c). options->uri is set and every
 * number option has its default. database holds the database option, or
 * "" for the URI's (else "resv"), which is then written into it
 * (database_size bytes). */
void *resv__mongo_open(const resv_options_t *options, char *database,
                       size_t database_size, const resv__backend_ops_t **ops,
                       resv_error_t *err);

/* ---- Scans (scan.c) ------------------------------------------------ */

/* A copy of p[0..n) owned by scan (freed by resv_scan_clear), or NULL
 * when out of memory; resv__scan_copy_str makes *dst that copy (false when
 * out of memory); resv__scan_alloc gives n bytes of the scan's arena,
 * 8-aligned. */
char *resv__scan_copy(resv_scan_t *scan, const char *p, size_t n);
bool resv__scan_copy_str(resv_scan_t *scan, resv_str_t *dst, const char *p, size_t n);
void *resv__scan_alloc(resv_scan_t *scan, size_t n);
/* Appends a zeroed entry to scan, or returns NULL when out of memory. */
resv_scan_entry_t *resv__scan_push(resv_scan_t *scan);
/* A reservation as a backend decoded it (a file store's record, a
 * MongoDB document), its strings pointing into the backend's bytes. */
typedef struct resv__scan_doc {
  const resv_key_t *key;
  const resv_owner_t *owner;
  int32_t state; /* RESV_STATE_PENDING or RESV_STATE_CONFIRMED */
  int64_t expires_at, version;
  const resv_str_t *holds;
  size_t nholds;
} resv__scan_doc_t;
/* Fills e from d, its strings copied into scan, its status judged at now
 * (pending or expired, or confirmed). False when out of memory. */
bool resv__scan_fill(resv_scan_t *scan, resv_scan_entry_t *e, const resv__scan_doc_t *d,
                     int64_t now);
/* Sets scan->next to a copy of p[0..n); false when out of memory. */
bool resv__scan_set_next(resv_scan_t *scan, const char *p, size_t n);
/* Adds the collection name[0..len) to names when it names a type
 * (wow_reservation__<context>__<aggregate>); anything else is skipped.
 * False only when out of memory. */
bool resv__type_names_add(resv_type_names_t *names, const char *name, size_t len);

/* (mongo_scan.c) Fills a new entry of scan from a stored document (BSON bytes
 * doc[0..len), as in MongoDB and the file store): a reservation decoded
 * by mongo_decode.c, with get's status at now, or a RESV_NONE entry
 * naming its _id and what is wrong. Fails only for memory. */
bool resv__scan_add_document(resv_scan_t *scan, const uint8_t *doc, size_t len,
                             int64_t now, resv_error_t *err);
/* Sets scan->format from a format record's BSON (NULL: none). Fails only
 * for memory. */
bool resv__scan_set_format(resv_scan_t *scan, const uint8_t *doc, size_t len,
                           resv_error_t *err);

/* ---- Stores and types (store.c) -------------------------------------- */

struct resv_type {
  resv_store_t *store;
  struct resv_type *next; /* the chain of its bucket in the store's types */
  char *context;
  char *aggregate;
  size_t context_len;
  size_t aggregate_len;
  char collection[RESV__MAX_NAMESPACE + 1];
  void *backend_state; /* owned by the backend (type_init/type_free) */
};

/* The entries and bytes of every type of the store (the backend's usage
 * op); false, both -1, for a store without one (MongoDB). */
bool resv__store_usage(resv_store_t *store, int64_t *entries, int64_t *bytes);
/* Counts a backend's event (RESV__STAT_*) in the type's store. */
void resv__type_count(resv_type_t *type, int kind);
/* The same for a store (NULL is ignored). */
void resv__store_count(resv_store_t *store, int kind);
/* Turns the counting of resv_call's inline calls off and on, for the
 * baseline of bench/stats_cost.c (the same store, the same code path but
 * for one predictable branch). Counting is on from open. */
void resv__store_set_counting(resv_store_t *store, bool on);
/* Counts a finished job's call (job.c calls it once per submitted call,
 * before the job is marked done). */
void resv__store_count_job(resv_job_t *job);

/* Stores being torn down by resv_store_close's reaper threads (for
 * tests; the process waits for them at exit). */
int resv__store_reapers(void);

/* ---- Jobs (job.c) and the dispatcher (pool.c) ------------------------ */

/* Lock order: the pool's, a job's and an inbox's mutexes never nest. Each
 * is released before another is taken: a job is finished (its mutex, then
 * its inbox's) outside the pool's lock. The store's types lock is outermost:
 * under it a backend's type_init and usage may take the backend's own
 * locks, never the pool's, a job's or an inbox's. */

typedef void (*resv__work_fn)(resv_job_t *job);

struct resv_job {
  struct resv_job *next; /* intrusive link: pool queue or inbox list */
  struct resv_job *prev;
  resv__work_fn work;    /* runs on a worker thread */
  resv_type_t *type;
  resv_request_t request; /* keys and strings point into strings_ */
  int64_t deadline;       /* resv__monotonic_ms clock */
  resv_inbox_t *inbox;    /* NULL or referenced by the job */
  atomic_int refs;        /* the caller's and the dispatcher's */
  atomic_bool done;
  bool in_inbox;          /* guarded by inbox->mutex */
  bool detached;          /* destroyed by its caller; guarded likewise */
  unsigned generation;    /* the fork generation that made it */
  pthread_mutex_t mutex;  /* guards the wait for done */
  pthread_cond_t cond;
  resv_error_t error;
  resv_answer_t answer;
  void *user;             /* for tests' work functions */
  int64_t started_ns;     /* a submitted call: when; 0: not counted */
  /* The request's keys array (the *_all ops), then its strings. */
  _Alignas(resv_key_t) char strings_[];
};

/* Makes a job whose request is a deep copy of request (NULL: no request).
 * refs starts at 1 (the caller's). */
resv_job_t *resv__job_new(resv_type_t *type, const resv_request_t *request,
                          resv__work_fn work, resv_inbox_t *inbox,
                          int64_t deadline, resv_error_t *err);
/* Marks the job finished (error/answer already filled), appends it to its
 * inbox when it has one and wakes its waiters. Call once. */
void resv__job_finish(resv_job_t *job);
/* Finishes a job with an error. */
void resv__job_fail(resv_job_t *job, int32_t code, const char *message);
/* Drops one reference; the last one frees the job. */
void resv__job_unref(resv_job_t *job);

/* Inbox internals used by job.c. */
void resv__inbox_ref(resv_inbox_t *inbox);
void resv__inbox_unref(resv_inbox_t *inbox);
void resv__inbox_push(resv_inbox_t *inbox, resv_job_t *job);
void resv__inbox_remove(resv_inbox_t *inbox, resv_job_t *job);

typedef struct resv__pool resv__pool_t;

/* Starts threads worker threads with room for queue waiting jobs. */
resv__pool_t *resv__pool_new(int threads, int queue, resv_error_t *err);
/* Queues job (taking a reference). Fails with RESV_EBUSY when the queue
 * is full, RESV_ECLOSED after shutdown. A job dequeued past its deadline
 * finishes with RESV_ETIMEOUT without running. */
bool resv__pool_submit(resv__pool_t *pool, resv_job_t *job, resv_error_t *err);
/* Fails the queued jobs with RESV_ECLOSED, lets running ones end, joins
 * the threads. Idempotent. */
void resv__pool_shutdown(resv__pool_t *pool);
void resv__pool_free(resv__pool_t *pool);
/* Jobs queued and jobs running now. */
void resv__pool_load(resv__pool_t *pool, int64_t *waiting, int64_t *running);

#endif /* RESV_INTERNAL_H */
