/* resv.h: unique-key reservations in memory, in a file store (LMDB) or on
 * MongoDB.
 *
 * The one public header. It is written so that everything between the
 * RESV_CDEF markers can be pasted into LuaJIT's ffi.cdef: no macros in
 * signatures, <stdint.h> types, no varargs, no structs passed by value.
 *
 * Strings are always (pointer, length) pairs: they need not be
 * NUL-terminated, and an embedded NUL byte is caught by validation instead
 * of silently cutting the string short.
 *
 * Errors are values. A function that can fail returns bool (or NULL) and
 * fills the optional resv_error_t the caller passes (NULL is allowed). */
#ifndef RESV_H
#define RESV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; what this header declares
 * is its exported API. */
#pragma GCC visibility push(default)

/* RESV_CDEF_BEGIN */

/* Error codes (docs/design.md section 8). RESV_OK is 0. */
typedef enum resv_code {
  RESV_OK = 0,
  RESV_EINVALID = 1,     /* bad argument; nothing was written */
  RESV_EBUSY = 2,        /* the dispatcher's queue is full */
  RESV_ETIMEOUT = 3,     /* the call's deadline passed */
  RESV_EUNAVAILABLE = 4, /* no server could be reached or selected */
  RESV_EFORMAT = 5,      /* the collection holds another format */
  RESV_ESERVER = 6,      /* any other server error (server_code set) */
  RESV_ECLOSED = 7,      /* the store was closed, or used after fork() */
  RESV_ENOMEM = 8        /* out of memory */
} resv_code_t;

typedef struct resv_error {
  int32_t code;        /* resv_code_t */
  int32_t server_code; /* MongoDB's error code, 0 when none */
  char message[504];   /* NUL-terminated; never contains a password */
} resv_error_t;

/* Answers (docs/design.md section 9). */
typedef enum resv_status {
  RESV_NONE = 0,
  RESV_RESERVED = 1,  /* reserve: pending, ours */
  RESV_CONFIRMED = 2, /* reserve, confirm: confirmed by this owner; get: confirmed */
  RESV_CONFLICT = 3,  /* reserve, confirm: held by another owner */
  RESV_ABANDONED = 4, /* abandon: the reservation was deleted */
  RESV_KEPT = 5,      /* abandon: our hold is gone, the reservation stays */
  RESV_ABSENT = 6,    /* abandon, release, get: no such reservation */
  RESV_RELEASED = 7,  /* release: deleted */
  RESV_PENDING = 8,   /* get: pending and live */
  RESV_EXPIRED = 9,   /* get: pending past its expiry, free to take */
  RESV_SWEPT = 10     /* sweep: done; count says how many were deleted */
} resv_status_t;

/* The state of the reservation an answer describes. */
typedef enum resv_state {
  RESV_STATE_NONE = 0,
  RESV_STATE_PENDING = 1,
  RESV_STATE_CONFIRMED = 2
} resv_state_t;

typedef struct resv_str {
  const char *ptr;
  size_t len;
} resv_str_t;

/* The value to keep unique. tenant "" is the system tenant. */
typedef struct resv_key {
  resv_str_t tenant;
  resv_str_t ns;
  resv_str_t key;
} resv_key_t;

/* The aggregate that holds a key. */
typedef struct resv_owner {
  resv_str_t tenant;
  resv_str_t id;
} resv_owner_t;

/* An answer. The strings point into storage the answer owns: they stay
 * valid until the answer is reused or cleared. Zero-initialise an answer
 * before its first use; free its storage with resv_answer_clear. */
typedef struct resv_answer {
  int32_t status;       /* resv_status_t */
  int32_t state;        /* resv_state_t of the reservation described */
  int64_t expires_at;   /* pending: epoch ms; otherwise 0 */
  int64_t version;      /* confirmed: the owner's version; otherwise 0 */
  resv_str_t owner_tenant;
  resv_str_t owner_id;
  const resv_str_t *holds; /* pending: the attempts holding it */
  size_t nholds;
  int64_t count;        /* sweep: the reservations deleted; otherwise 0 */
  /* The *_all ops: keys[i] is the answer for request.keys[i], shaped as
   * the single-key op's (its own keys empty); otherwise NULL and 0. Owned
   * by this answer, like its strings. */
  const struct resv_answer *keys;
  size_t nkeys;
  char *storage_;        /* private */
  size_t storage_cap_;   /* private */
  struct resv_answer *keys_; /* private: the answers of keys */
  size_t keys_cap_;          /* private */
} resv_answer_t;

typedef enum resv_sharding {
  RESV_SHARDING_AUTO = 0,
  RESV_SHARDING_OFF = 1
} resv_sharding_t;

/* resv_options_t.write_concern: w "majority". */
typedef enum resv_write_concern { RESV_WRITE_MAJORITY = -1 } resv_write_concern_t;

/* The file store's durability (docs/design.md section 6). */
typedef enum resv_sync {
  RESV_SYNC_DISK = 0,   /* an answer waits until its commit is on disk */
  RESV_SYNC_PROCESS = 1 /* an answer survives the crash of any process;
                         * a store an OS crash may have damaged is refused */
} resv_sync_t;

/* resv_options_t.log_level: which of the MongoDB driver's log lines a
 * store shows on stderr. 0 is RESV_LOG_WARNING; RESV_LOG in the
 * environment ("error", "warning", "info", "debug") may ask for more. */
typedef enum resv_log_level {
  RESV_LOG_ERROR = 1,   /* errors only */
  RESV_LOG_WARNING = 2, /* warnings and errors, each kind once a minute */
  RESV_LOG_INFO = 3,    /* and the driver's informational lines, all */
  RESV_LOG_DEBUG = 4    /* every line, the monitor's heartbeats too */
} resv_log_level_t;

/* The file store with sync = process, at open after a crash of the OS
 * (its last commits came after its last checkpoint, in an earlier boot). */
typedef enum resv_os_crash {
  RESV_OS_CRASH_REFUSE = 0, /* RESV_EFORMAT, naming resv recover */
  RESV_OS_CRASH_RESET = 1   /* its files moved aside, the store starts empty */
} resv_os_crash_t;

/* Options of resv_store_open. A zero field takes its default. */
typedef struct resv_options {
  const char *uri;      /* NUL-terminated MongoDB URI; NULL or "": in memory */
  const char *database; /* NULL: the URI's database, else "resv" */
  int32_t sharding;     /* resv_sharding_t; default auto */
  int32_t threads;      /* dispatcher threads; default 8 */
  int32_t queue;        /* most jobs waiting; default 1024 */
  int32_t timeout_ms;   /* each call's deadline; default 5000 */
  int32_t max_string;   /* longest string in bytes; default 1024 */
  /* MongoDB: the write concern's w. 0 (default): the URI's w when it names
   * one, else "majority"; RESV_WRITE_MAJORITY: "majority" whatever the URI
   * says; n >= 1: w: n. Anything else, and a URI asking w=0, is
   * RESV_EINVALID: an unacknowledged write cannot tell reserved from
   * conflict. */
  int32_t write_concern;
  int32_t max_holds;    /* most attempts holding one pending reservation;
                         * default 100; a new attempt past it is
                         * RESV_EINVALID (an attempt already there is not) */
  /* The file store (docs/design.md section 6; not with uri): */
  const char *path;     /* NUL-terminated directory; NULL or "": not a file store */
  int64_t map_size;     /* largest size of its map in bytes; default 1 GiB */
  int32_t sync;         /* resv_sync_t; default disk */
  /* The memory store: 1 when one store per process is meant (nginx with
   * several workers); the Lua layer refuses it otherwise there. */
  int32_t per_process;
  /* How long an expired reservation stays before it is reclaimed, in
   * ms; default 60000. */
  int64_t sweep_grace_ms;
  /* MongoDB: nonzero: open waits until the server answers, authenticates
   * and learns its topology (RESV_EUNAVAILABLE, or the authentication
   * failure, otherwise); 0 (default): open never waits on the network,
   * and the first call does that. */
  int32_t check;
  /* A call that takes longer than this, in ms, counts as slow in
   * resv_stats_t.slow_calls; default 100 (1 to a day). */
  int64_t slow_ms;
  /* 1: the store creates nothing, for tools that only look (the resv
   * command). A file store's directory must exist and hold a store
   * (RESV_EINVALID naming it otherwise). A call or put on a type that
   * does not exist answers RESV_EINVALID naming it, and sets nothing up:
   * the file store opens the type's database without creating it;
   * MongoDB reads the format record and uses the collection as it is (no
   * create, no format record written, no sharding). Types that exist work
   * as usual, writes included. The memory store ignores it. */
  int32_t no_create;
  /* MongoDB: resv_log_level_t; default RESV_LOG_WARNING. */
  int32_t log_level;
  /* The file store: resv_os_crash_t; default refuse. */
  int32_t on_os_crash;
  /* Most keys of one reserve_all, confirm_all or abandon_all; default 16
   * (1 to 1024). */
  int32_t max_keys;
} resv_options_t;

typedef struct resv_store resv_store_t; /* a store: memory or MongoDB */
typedef struct resv_type resv_type_t;   /* an aggregate type of a store */
typedef struct resv_job resv_job_t;     /* a submitted call */
typedef struct resv_inbox resv_inbox_t; /* where finished jobs arrive */

/* ---- Stores ---------------------------------------------------------- */

/* Opens a store. Creates nothing on the server; a MongoDB store checks that
 * the server answers (unavailable otherwise). Returns NULL and fills err on
 * failure. The caller frees the store with resv_store_close. */
resv_store_t *resv_store_open(const resv_options_t *options, resv_error_t *err);

/* Stops the store: jobs still queued answer RESV_ECLOSED, running ones
 * finish, the threads are joined, and a MongoDB store's connections and
 * driver threads are closed before it returns (it waits for a call in
 * flight, at most that call's deadline). The handle stays valid (later
 * calls answer RESV_ECLOSED) until resv_store_close. Idempotent, also
 * from several threads at once; accepts NULL. */
void resv_store_shutdown(resv_store_t *store);

/* resv_store_shutdown without waiting, for a host that must not block:
 * new calls and the jobs still queued answer RESV_ECLOSED from here, and
 * a background thread waits for the calls in flight (each bounded by its
 * deadline) and lets go of the threads and connections. Returns at once.
 * The handle stays valid until resv_store_close, which may come at any
 * time after (the background thread frees the store if it is still
 * running then). Idempotent; accepts NULL. */
void resv_store_stop(resv_store_t *store);

/* Frees the store with its types, shutting it down first, and returns at
 * once: when a call may still be on a server, a detached thread finishes
 * the shutdown and frees it (the call's deadline bounds it; the process
 * waits for such threads when it exits). Safe for a garbage collector.
 * Accepts NULL. The handle and its types are gone on return; a job of
 * the store may still be waited on and destroyed (it answers whatever its
 * call ends with, or RESV_ECLOSED). */
void resv_store_close(resv_store_t *store);

/* The file store in the directory path, when an open refuses it as
 * damaged (by a crash of the OS, or a missing or empty data.mdb beside its
 * resv.state): moves its files into a new sibling directory
 * <path>.crashed-<UTC time>, whose name goes into kept (kept_size bytes),
 * so that the next open starts an empty store. Returns 1 when it moved
 * them, 0 when the store opens as it is (nothing moved), -1 with err
 * filled on failure. No process may have the store open. */
int resv_store_recover(const char *path, char *kept, size_t kept_size, resv_error_t *err);

/* Freezes the store's clock at ms (epoch milliseconds), for tests. */
void resv_store_set_time(resv_store_t *store, int64_t ms);
/* Returns the store's clock to the system's realtime clock. */
void resv_store_use_system_time(resv_store_t *store);
/* The store's clock now, in epoch milliseconds. */
int64_t resv_store_now(resv_store_t *store);

/* True when calls run on the caller's thread and never wait (the memory
 * store): then resv_call never blocks and needs no coroutine to yield.
 * False for the file store: with sync = process its calls run on the
 * caller's thread too, but a write may have to wait for another writer
 * (resv_try_call then says so, and resv_submit hands it to the
 * dispatcher). */
bool resv_store_runs_inline(const resv_store_t *store);

/* True when resv_try_call may answer on the caller's thread (the memory
 * store, the file store with sync = process); false when every call waits
 * for a dispatcher thread (MongoDB, sync = disk). */
bool resv_store_may_answer_inline(const resv_store_t *store);

/* True when the store is a MongoDB store connected to a mongos. */
bool resv_store_is_sharded(const resv_store_t *store);

/* Writes a description of the store (backend, host; never a password)
 * into buf, NUL-terminated and cut to size. */
void resv_store_describe(const resv_store_t *store, char *buf, size_t size);

/* Returns the aggregate type (context, aggregate) of the store, checking
 * the names against the collection-name rules. The handle is owned by the
 * store and lives until resv_store_close; asking twice gives the same
 * handle. Creates nothing: the collection is made on the type's first
 * call. Returns NULL and fills err (RESV_EINVALID) on bad names. */
resv_type_t *resv_store_type(resv_store_t *store, const char *context,
                             size_t context_len, const char *aggregate,
                             size_t aggregate_len, resv_error_t *err);

/* The collection name, NUL-terminated, owned by the type. */
const char *resv_type_collection(const resv_type_t *type);

/* ---- Calls ----------------------------------------------------------- */

typedef enum resv_op {
  RESV_OP_RESERVE = 1,
  RESV_OP_CONFIRM = 2,
  RESV_OP_ABANDON = 3,
  RESV_OP_RELEASE = 4,
  RESV_OP_GET = 5,
  RESV_OP_SWEEP = 6, /* the type's pending reservations expired past the grace */
  /* Several keys of one type at once (design.md section 5, "Several keys
   * at once"): request.keys[0 .. nkeys-1], answer.keys[i] for keys[i].
   * reserve_all: reserved when every key is now this owner's (each
   * reserved or confirmed); else conflict, after the abandon of each key
   * by this attempt (keys[i]: conflict with the holder, or what that
   * abandon answered). confirm_all: confirmed when every key is, else
   * conflict. abandon_all: abandoned (keys[i]: abandoned, kept or
   * absent). */
  RESV_OP_RESERVE_ALL = 7,
  RESV_OP_CONFIRM_ALL = 8,
  RESV_OP_ABANDON_ALL = 9
} resv_op_t;

/* One call. Which fields count depends on op:
 *   reserve: key, owner, attempt, ttl_ms     confirm: key, owner, version
 *   abandon: key, owner, attempt             release: key, owner
 *   get:     key                             sweep: none (a whole type)
 *   reserve_all, confirm_all, abandon_all: as reserve, confirm and abandon,
 *   with keys/nkeys instead of key: 1 to max_keys distinct keys. */
typedef struct resv_request {
  int32_t op; /* resv_op_t */
  resv_key_t key;
  resv_owner_t owner;
  resv_str_t attempt;
  int64_t ttl_ms;
  int64_t version;
  int64_t timeout_ms; /* > 0: this call's deadline; 0: the store's */
  const resv_key_t *keys; /* the *_all ops: the keys; read as key is */
  size_t nkeys;
} resv_request_t;

/* Runs a call and waits for its answer (or its deadline). Fills answer
 * and returns true; returns false and fills err on any error, answer then
 * being untouched but for its storage. */
bool resv_call(resv_type_t *type, const resv_request_t *request,
               resv_answer_t *answer, resv_error_t *err);

/* Submits a call without waiting. The request's strings are copied. When
 * the job finishes it is appended to inbox (if not NULL), whose descriptor
 * then becomes readable, unless the caller destroyed it first. A job that
 * could answer at once (bad input, a full queue, a memory store) is
 * finished on return: a caller that sees resv_job_done right away may take
 * the answer and destroy the job, which takes it out of the inbox.
 * Returns NULL only when out of memory (err filled). The caller frees the
 * job with resv_job_destroy. */
resv_job_t *resv_submit(resv_type_t *type, const resv_request_t *request,
                        resv_inbox_t *inbox, resv_error_t *err);

/* Runs the call on the caller's thread when it can answer without
 * waiting (the memory store always; the file store with sync = process
 * unless another writer holds its write gate): returns true with answer
 * filled, or false with err filled on an error. When it would have to
 * wait it does nothing and returns false with err->code RESV_OK: then
 * resv_submit it (or resv_call it, where blocking is allowed). For a host
 * that must not block, whose calls mostly answer at once: no job is made
 * for them. */
bool resv_try_call(resv_type_t *type, const resv_request_t *request,
                   resv_answer_t *answer, resv_error_t *err);

/* resv_call and resv_submit with the request's strings as arguments
 * (length, then pointer, for each of key tenant, namespace, key, owner
 * tenant, owner id and attempt; NULL with length 0 is ""). For bindings
 * whose strings are kept alive only as arguments of a call: LuaJIT's FFI
 * keeps a call's arguments alive for the call, never the pointers stored
 * in a struct's fields. resv_call_args and resv_try_call_args read them
 * only during the call; resv_submit_args copies them before it returns. */
bool resv_call_args(resv_type_t *type, int32_t op, int64_t ttl_ms,
                    int64_t version, int64_t timeout_ms,
                    size_t key_tenant_len, const char *key_tenant,
                    size_t ns_len, const char *ns,
                    size_t key_len, const char *key,
                    size_t owner_tenant_len, const char *owner_tenant,
                    size_t owner_id_len, const char *owner_id,
                    size_t attempt_len, const char *attempt,
                    resv_answer_t *answer, resv_error_t *err);
resv_job_t *resv_submit_args(resv_type_t *type, int32_t op, int64_t ttl_ms,
                             int64_t version, int64_t timeout_ms,
                             size_t key_tenant_len, const char *key_tenant,
                             size_t ns_len, const char *ns,
                             size_t key_len, const char *key,
                             size_t owner_tenant_len, const char *owner_tenant,
                             size_t owner_id_len, const char *owner_id,
                             size_t attempt_len, const char *attempt,
                             resv_inbox_t *inbox, resv_error_t *err);
bool resv_try_call_args(resv_type_t *type, int32_t op, int64_t ttl_ms, int64_t version,
                        int64_t timeout_ms, size_t key_tenant_len, const char *key_tenant,
                        size_t ns_len, const char *ns, size_t key_len, const char *key,
                        size_t owner_tenant_len, const char *owner_tenant,
                        size_t owner_id_len, const char *owner_id,
                        size_t attempt_len, const char *attempt,
                        resv_answer_t *answer, resv_error_t *err);

/* True once the job has its answer or error. Never blocks. */
bool resv_job_done(const resv_job_t *job);

/* Waits up to timeout_ms (negative: without limit) for the job. Returns
 * resv_job_done(job). */
bool resv_job_wait(resv_job_t *job, int64_t timeout_ms);

/* When a waiter may give up on the job, on resv_clock_ms's clock: the
 * call's deadline plus the grace its worker has to answer it itself. A
 * job not done then is past its deadline (answer RESV_ETIMEOUT, destroy
 * it: the worker frees it when it ends). */
int64_t resv_job_deadline(const resv_job_t *job);

/* Adds a reference to job, for a thread that waits on it while its owner
 * may destroy it meanwhile; resv_job_unref drops it (the last reference
 * frees the job). resv_job_destroy drops the owner's. Returns job. */
resv_job_t *resv_job_ref(resv_job_t *job);
void resv_job_unref(resv_job_t *job);

/* A finished job's error (code RESV_OK when it has an answer), or NULL when
 * it is not finished. Owned by the job. */
const resv_error_t *resv_job_error(const resv_job_t *job);

/* A finished job's answer, or NULL when it is not finished or failed.
 * Owned by the job. */
const resv_answer_t *resv_job_answer(const resv_job_t *job);

/* Frees a job. A job still running is freed by its worker when it ends;
 * a finished job still in its inbox is taken out of it. A job made before
 * a fork() is left alone in the child (it belongs to the parent's
 * threads). Accepts NULL. */
void resv_job_destroy(resv_job_t *job);

/* ---- Scans: a type's reservations, page by page (for tools) --------- */

/* One document of a type found by a scan. Its strings are owned by the
 * scan (resv_scan_clear frees them). */
typedef struct resv_scan_entry {
  /* RESV_PENDING, RESV_EXPIRED or RESV_CONFIRMED, as get would answer;
   * RESV_NONE for a document that is not a format-1 reservation. */
  int32_t status;
  int32_t state;        /* resv_state_t; RESV_STATE_NONE with RESV_NONE */
  int64_t expires_at;   /* pending: epoch ms; otherwise 0 */
  int64_t version;      /* confirmed: the owner's version; otherwise 0 */
  resv_str_t tenant;    /* the key; empty when a RESV_NONE document's _id */
  resv_str_t ns;        /* is not {t, n, k} of strings */
  resv_str_t key;
  resv_str_t owner_tenant;
  resv_str_t owner_id;
  const resv_str_t *holds; /* pending: the attempts holding it */
  size_t nholds;
  resv_str_t id;        /* RESV_NONE: the _id as relaxed extended JSON */
  resv_str_t problem;   /* RESV_NONE: why it is not a reservation */
} resv_scan_entry_t;

/* A page of a scan. Zero-initialise it before its first use; a scan
 * reuses it (clearing what it held); free it with resv_scan_clear. */
typedef struct resv_scan {
  resv_scan_entry_t *entries; /* count of them, in the store's order */
  size_t count;
  /* The cursor to pass as after for the next page (bytes owned by the
   * scan, meaningful to this backend only); len 0: this was the last. */
  resv_str_t next;
  /* On the first page (no after): the type's format record. 1: format 1;
   * 0: there is none (the type was never used); -1: a record of another
   * format or of another shape (format_problem says which). */
  int32_t format;
  resv_str_t format_problem;
  void *storage_;       /* private */
} resv_scan_t;

/* Reads up to limit (1 to 10000) documents of the type after the cursor
 * after[0..after_len) (after_len 0: from the start) into scan, in the
 * store's order: by _id on MongoDB, by record key in the file store, by
 * key in the memory store. Documents that are not format-1 reservations
 * are entries too (RESV_NONE), never errors and never changed. Writes
 * nothing: a type never used stays so (format 0, no entry). Blocks the
 * caller for one round trip (which a dispatcher thread makes, when the
 * store has them), within the store's timeout_ms (a tool's
 * call, not a request path's; the memory store sorts its type's keys on
 * each page). A reservation written or deleted between two pages may be
 * seen or missed; every one present throughout is seen once. Returns
 * false and fills err (RESV_EINVALID for a bad limit or cursor, the
 * backend's errors otherwise); scan is then empty. */
bool resv_type_scan(resv_type_t *type, size_t after_len, const char *after,
                    size_t limit, resv_scan_t *scan, resv_error_t *err);

/* Frees a scan's storage and zeroes it. Accepts NULL. */
void resv_scan_clear(resv_scan_t *scan);

/* The types a store holds: its collections (MongoDB) or named databases
 * (the file store) named wow_reservation__<context>__<aggregate>, sorted
 * by that name. The strings are owned by the list (resv_type_names_clear
 * frees them). */
typedef struct resv_type_name {
  resv_str_t context;
  resv_str_t aggregate;
  resv_str_t collection;
} resv_type_name_t;

typedef struct resv_type_names {
  resv_type_name_t *names;
  size_t count;
  void *storage_;       /* private */
} resv_type_names_t;

/* Lists the store's types into names (zero-initialised before its first
 * use; cleared first). One round trip, within timeout_ms; writes nothing.
 * File store and MongoDB; the memory store answers RESV_EINVALID. */
bool resv_store_types(resv_store_t *store, resv_type_names_t *names,
                      resv_error_t *err);

/* Frees a list's storage and zeroes it. Accepts NULL. */
void resv_type_names_clear(resv_type_names_t *names);

/* What resv_type_put did. */
typedef enum resv_put_outcome {
  RESV_PUT_ADDED = 1,    /* the key was free: the reservation is there as given */
  RESV_PUT_SAME = 2,     /* the same reservation was there: nothing written */
  RESV_PUT_DIFFERENT = 3 /* something else holds the key: nothing written */
} resv_put_outcome_t;

/* Writes the reservation entry describes (e.g. a scan's entry of another
 * store: its key, owner, state, expiry and holds, or version, exactly as
 * they are) into the type when its key is free, and says in *outcome what
 * it did. Never overwrites: a reservation already there, expired or not,
 * or a document that is not one, stays as it is (RESV_PUT_SAME when it is
 * the same reservation, RESV_PUT_DIFFERENT otherwise). For copying one
 * store into another (the resv command's copy): running it again writes
 * nothing new. The type is set up (collection, format record) as by a
 * call. entry->status must be RESV_PENDING, RESV_EXPIRED or
 * RESV_CONFIRMED and its strings pass a call's checks (RESV_EINVALID
 * otherwise). File store and MongoDB; blocks for one round trip. */
bool resv_type_put(resv_type_t *type, const resv_scan_entry_t *entry,
                   int32_t *outcome, resv_error_t *err);

/* ---- Inboxes: completion queues ------------------------------------- */

/* A completion queue with an eventfd. Any number of stores' jobs may
 * finish into one inbox. Freed with resv_inbox_destroy once every job
 * submitted to it is destroyed (jobs hold a reference, so an early
 * destroy only drops the caller's). An inbox belongs to the process that
 * made it: in a child forked after, destroy leaves it alone, and the
 * child makes its own. */
resv_inbox_t *resv_inbox_new(resv_error_t *err);
void resv_inbox_destroy(resv_inbox_t *inbox);

/* A descriptor that is readable while finished jobs wait in the inbox. */
int resv_inbox_fd(const resv_inbox_t *inbox);

/* Moves up to max finished jobs into jobs[] (oldest first) and returns
 * how many. Never blocks. The caller still frees each job. */
size_t resv_inbox_drain(resv_inbox_t *inbox, resv_job_t **jobs, size_t max);

/* Waits up to timeout_ms (negative: without limit) for a finished job.
 * Returns true when one waits in the inbox. */
bool resv_inbox_wait(resv_inbox_t *inbox, int64_t timeout_ms);

/* ---- Answers and errors --------------------------------------------- */

/* ---- Counters (docs/design.md section 13) ------------------------------------- */

/* The sizes of resv_stats_t's tables: indexed by resv_op_t (0 unused),
 * resv_status_t, resv_code_t, and the latency buckets, whose upper
 * bounds resv_stats_bound gives (the last is +Inf). */
enum {
  RESV_STATS_OPS = 10,
  RESV_STATS_STATUSES = 11,
  RESV_STATS_CODES = 9,
  RESV_STATS_BUCKETS = 23
};

/* Counters of a store since it was opened. Every call is counted once,
 * when it ends: answered in calls[op][status], failed in errors[op][code]
 * (a bad request, a full queue, a deadline included), and in the latency
 * histogram of its op (from the call to its answer, the wait for a thread
 * included). */
typedef struct resv_stats {
  uint64_t calls[10][11];  /* [RESV_STATS_OPS][RESV_STATS_STATUSES] */
  uint64_t errors[10][9];  /* [RESV_STATS_OPS][RESV_STATS_CODES] */
  /* Cumulative, Prometheus-style: latency[op][i] counts the calls that
   * took at most resv_stats_bound(i) seconds; the last bucket (+Inf)
   * counts them all. */
  uint64_t latency[10][23]; /* [RESV_STATS_OPS][RESV_STATS_BUCKETS] */
  double latency_sum[10];   /* seconds, over the calls of each op */
  uint64_t duplicate_key_retries; /* MongoDB: upserts run again after 11000 */
  uint64_t setup_failures; /* a type's set-up (collection, format record) that failed */
  uint64_t slow_calls;     /* calls that took longer than slow_ms */
  int64_t slow_ms;         /* the store's threshold */
  int64_t jobs_waiting;    /* now: jobs queued for a dispatcher thread */
  int64_t jobs_running;    /* now: jobs a dispatcher thread is running */
  int64_t entries;         /* memory and file stores: live records; else -1 */
  int64_t bytes;           /* memory: bytes of entries and tables; file:
                            * bytes of the types' pages; else -1 */
  /* MongoDB: the server's clock minus this host's at the driver's last
   * hello of any server, ms (positive: the server's is ahead), known to
   * within clock_skew_error_ms (half the hello's round trip); -1 there
   * (and 0 here) before the first hello and for the embedded stores. */
  int64_t clock_skew_ms;
  int64_t clock_skew_error_ms;
} resv_stats_t;

/* Fills out with the store's counters. Cheap for the calls it counts:
 * each thread adds to its own slot; this sums the slots (and, for the
 * embedded stores, takes each stripe's lock once to count entries).
 * Fails only with RESV_ECLOSED (a store used after fork()). */
bool resv_store_stats(resv_store_t *store, resv_stats_t *out, resv_error_t *err);

/* The upper bound of latency bucket i in seconds (+Inf for the last);
 * 0 for an i out of range. */
double resv_stats_bound(int32_t i);

/* Frees an answer's storage and zeroes it. Accepts NULL. */
void resv_answer_clear(resv_answer_t *answer);

/* Stable names: "reserved", "conflict", ...; "invalid", "busy", ... */
const char *resv_status_name(int32_t status);
const char *resv_state_name(int32_t state);
const char *resv_code_name(int32_t code);

/* The monotonic clock deadlines are measured on, in milliseconds. */
int64_t resv_clock_ms(void);

/* How many fork()s made this process since the library first counted
 * (stores, jobs and inboxes start the count). A binding compares it to
 * tell the objects it made in this process from ones inherited over a
 * fork(), which belong to the parent. */
uint32_t resv_process_generation(void);

/* The library's version, e.g. "0.1.0". */
const char *resv_version(void);

/* RESV_CDEF_END */

/* Convenience wrappers over resv_call, for C callers. */
bool resv_reserve(resv_type_t *type, const resv_key_t *key,
                  const resv_owner_t *owner, resv_str_t attempt,
                  int64_t ttl_ms, resv_answer_t *answer, resv_error_t *err);
bool resv_confirm(resv_type_t *type, const resv_key_t *key,
                  const resv_owner_t *owner, int64_t version,
                  resv_answer_t *answer, resv_error_t *err);
bool resv_abandon(resv_type_t *type, const resv_key_t *key,
                  const resv_owner_t *owner, resv_str_t attempt,
                  resv_answer_t *answer, resv_error_t *err);
bool resv_release(resv_type_t *type, const resv_key_t *key,
                  const resv_owner_t *owner, resv_answer_t *answer,
                  resv_error_t *err);
bool resv_get(resv_type_t *type, const resv_key_t *key,
              resv_answer_t *answer, resv_error_t *err);
/* Deletes the type's pending reservations whose expiry is at least
 * sweep_grace_ms in the past (docs/design.md section 5), never a confirmed one, a
 * live one or a record that is not a format-1 reservation. Answers
 * RESV_SWEPT with answer->count the number deleted. On the memory store
 * it visits every entry of the type (each stripe under its lock in turn);
 * on MongoDB it is one delete command. */
bool resv_sweep(resv_type_t *type, resv_answer_t *answer, resv_error_t *err);

/* A resv_str_t of a NUL-terminated C string. */
resv_str_t resv_cstr(const char *s);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* RESV_H */
