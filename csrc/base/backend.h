/* backend.h: the interface between the store (csrc/store/) and its
 * backends: the memory store (csrc/memory/), the file store (csrc/file/)
 * and the MongoDB store (csrc/mongo/). A backend is a table of functions
 * over an opaque pointer, so the store, the jobs and the validation are
 * written once for all three. A backend sees a type (struct resv_type)
 * and the counters it was given at open, never its store. */
#ifndef RESV_BACKEND_H
#define RESV_BACKEND_H

#include "base.h"

struct resv_type {
  resv_store_t *store;    /* the store's own: a backend never reads it */
  struct resv_type *next; /* the chain of its bucket in the store's types */
  char *context;
  char *aggregate;
  size_t context_len;
  size_t aggregate_len;
  char collection[RESV__MAX_NAMESPACE + 1];
  void *backend_state; /* owned by the backend (type_init/type_free) */
};

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
  /* True: a call on the caller's thread costs about as much as the two
   * clock reads of its latency, so the latency histogram observes one
   * call in RESV__SAMPLE_EVERY per thread (call.c). */
  bool sampled;
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
   * call's own, on resv__monotonic_ms's clock. RESV__EWOULDBLOCK: the call
   * is the dispatcher's after all. NULL: resv_call hands every call to the
   * dispatcher. */
  bool (*execute_blocking)(void *backend, resv_type_t *type,
                           const resv_request_t *req, int64_t now,
                           int64_t deadline, resv_answer_t *answer,
                           resv_error_t *err);
  /* Refuses new execute_blocking calls and wakes the ones waiting (they
   * answer RESV_ECLOSED); shutdown then waits for those still running
   * before it calls shutdown. May be NULL. */
  void (*refuse_blocking)(void *backend);
  /* One page of resv_type_scan (the store has cleared scan and checked
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

#endif /* RESV_BACKEND_H */
