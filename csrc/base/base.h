/* base.h: what every part of resv shares: the defaults and limits, errors,
 * clocks, fork generations and threads, answers, validation, counters and
 * the pages of a scan. The leaf of csrc/: it includes resv.h and nothing
 * else of resv, so the dispatcher, the document, every backend (memory,
 * file and MongoDB) and the store build on it and it on none of them. */
#ifndef RESV_BASE_H
#define RESV_BASE_H

#include "resv.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

/* True when two strings hold the same bytes. */
static inline bool resv__str_eq(resv_str_t a, resv_str_t b) {
  return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

/* True when two keys are the same key (tenant, namespace and key). */
static inline bool resv__key_eq(const resv_key_t *a, const resv_key_t *b) {
  return resv__str_eq(a->key, b->key) && resv__str_eq(a->ns, b->ns) &&
         resv__str_eq(a->tenant, b->tenant);
}

#define RESV__DEFAULT_THREADS 8
#define RESV__DEFAULT_QUEUE 1024
#define RESV__DEFAULT_TIMEOUT_MS 5000
#define RESV__DEFAULT_MAX_STRING 1024
/* Every call on a reservation costs O(its holds) (the answer lists them),
 * so their number is bounded. */
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
/* The words for a type's format record that is not format 1's, the same
 * from every store and every scan: why into buf (numeric false: the
 * record has no numeric format). */
void resv__format_problem(char *buf, size_t size, bool numeric, double format);
/* RESV_EFORMAT for the type stored in collection whose format record is
 * refused: why (resv__format_problem's, or damage the store found), then
 * that nothing was written. Returns false. */
bool resv__fail_format(resv_error_t *err, const char *collection, const char *why);
/* resv__fail_format with resv__format_problem's words. */
bool resv__fail_format_number(resv_error_t *err, const char *collection, bool numeric,
                              double format);

/* ---- Clocks (clock.c) ------------------------------------------------ */

int64_t resv__realtime_ms(void);
int64_t resv__monotonic_ms(void);
/* resv__monotonic_ms's clock at the kernel's tick (a few ms behind at
 * most), for a few ns instead of tens: enough to do something at most
 * once a second, or to mark when something last happened. */
int64_t resv__coarse_ms(void);
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

/* Every thread resv starts takes no signal sent to the process: such a
 * signal is the host's, for a thread of the host's to take (one that
 * blocks it to read it from a signalfd or sigwait among them), never a
 * thread of resv's, where its default action could end the process. A
 * thread starts with every signal blocked but the faults its own code may
 * raise (SIGSEGV, SIGBUS, ...), which stay the host's handlers'; returns
 * pthread_create's code. */
int resv__thread_start(pthread_t *thread, void *(*fn)(void *), void *arg);
/* Blocks those signals in this thread, the mask before into *old, for a
 * call that may start a library's threads (mongoc's monitors), which
 * inherit the mask; resv__signals_restore(old) puts it back. */
void resv__signals_block(sigset_t *old);
void resv__signals_restore(const sigset_t *old);

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
/* *distinct: no two of the n strings are equal. False only without
 * memory (many strings are compared in a sorted copy). */
bool resv__strs_distinct(const resv_str_t *s, size_t n, bool *distinct, resv_error_t *err);

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
/* The memory store's calls, and the file store's with sync = "process",
 * cost little more than the two clock reads a latency needs, so their
 * histograms observe one call in RESV__SAMPLE_EVERY per thread (a power
 * of two): true for the call to time. */
#define RESV__SAMPLE_EVERY 256
/* The tick of the calling thread (stats.c). Initial-exec TLS: a load from
 * the thread pointer, not a call to __tls_get_addr as the default model
 * in a shared library; the few bytes come from the static TLS space glibc
 * keeps for libraries loaded by dlopen. */
extern _Thread_local unsigned resv__sample_tick __attribute__((tls_model("initial-exec")));
static inline bool resv__stats_sample(void) {
  return (++resv__sample_tick & (RESV__SAMPLE_EVERY - 1)) == 0;
}
void resv__stats_count(resv__stats_t *stats, int kind);
/* Adds the counters into out (zeroed by the caller). */
void resv__stats_sum(const resv__stats_t *stats, resv_stats_t *out);

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

#endif /* RESV_BASE_H */
