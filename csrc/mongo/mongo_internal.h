/* mongo_internal.h: what the files of the MongoDB backend share.
 *
 * mongo_store.c opens the connection pool and owns the backend; it hands
 * each call to mongo_schema.c (the type's one-time set-up) and then to
 * mongo_ops.c (the operation: reserve and confirm in mongo_upsert.c, the
 * reads of a key in mongo_read.c, the documents written by mongo_build.c
 * with doc_bson.h's small BSON writer). The format-1 document is csrc/doc/'s (doc.h);
 * mongo_error.c turns a driver error into a resv_error_t. The store sees
 * only resv__mongo_open (mongo.h). Only csrc/mongo/ includes this header:
 * it is the one that brings in the driver's. */
#ifndef RESV_MONGO_INTERNAL_H
#define RESV_MONGO_INTERNAL_H

#include "backend.h"
#include "doc.h"
#include "mongo.h"

#include <mongoc/mongoc.h>

typedef struct resv__mongo_log resv__mongo_log_t; /* mongo_log.c */
typedef struct resv__mongo_callers resv__mongo_callers_t; /* mongo_caller.c */
typedef struct resv__mongo_templates resv__mongo_templates_t; /* mongo_template.c */

/* The backend: one per MongoDB store. Immutable after open, so the
 * dispatcher's threads read it without a lock (the pool is thread-safe). */
typedef struct resv__mongo {
  mongoc_client_pool_t *pool;
  mongoc_uri_t *uri;
  mongoc_read_prefs_t *primary; /* reads go to the primary */
  char *database;
  /* hello said msg: "isdbgrid"; learnt at open with check, else on the
   * first call (topology_known), so both are atomic. */
  atomic_bool is_mongos;
  atomic_bool topology_known;
  bool shard_auto; /* sharding option is auto */
  bool no_create;  /* the option: a type is used as it is, never set up */
  char *secret;    /* the URI's password (decoded), scrubbed from errors */
  char *secret_raw; /* the same as written in the URI (percent-encoded) */
  char hosts[256]; /* "host:port,host:port" for describe */
  bson_t *conforms; /* resv__doc_conforms_new, in every write's filter */
  int32_t max_holds; /* the store's option: most holds of a reservation */
  /* The upsert's documents recorded for the two above (NULL for a
   * backend made by hand: they are built per call). */
  resv__mongo_templates_t *templates;
  int64_t grace_ms;  /* sweep_grace_ms: what sweep leaves of the expired */
  /* Where duplicate-key retries and set-up failures are counted; NULL
   * for a backend made by hand (tests, bench/cpu.c). */
  resv__stats_t *stats;
  /* Each dispatcher thread's client and last collection handle
   * (mongo_store.c), kept between jobs; the key's destructor gives the
   * client back to the pool when the thread ends. */
  pthread_key_t worker_key;
  bool has_worker_key;
  /* The clients of blocking calls on their callers' threads
   * (mongo_caller.c): at most `threads` at once, beside the dispatcher's. */
  resv__mongo_callers_t *callers;
  resv__mongo_log_t *log; /* the store in the log handler's registry */
  int32_t selection_ms;   /* the URI's serverSelectionTimeoutMS */
  atomic_bool pool_reached; /* a call answered through the pool's clients */
  /* The last call to end answered, or failed on something else than the
   * server's reach (RESV_EUNAVAILABLE, RESV_ETIMEOUT). */
  atomic_bool last_reached;
  /* The servers' clocks (mongo_skew.c): the last skew measured (server
   * minus host, ms), within skew_error_ms (-1: none measured yet); the
   * last plain hello's round trip (-1: none); the shortest reserve ttl
   * (0: none yet). */
  _Atomic int64_t skew_ms;
  _Atomic int64_t skew_error_ms;
  _Atomic int64_t skew_rtt_ms;
  _Atomic int64_t shortest_ttl_ms;
} resv__mongo_t;

/* A client and the collection of the type it ran last (types live until
 * the store closes, after every call on them ended): a dispatcher
 * thread's, or one lent to blocking calls. */
typedef struct resv__mongo_conn {
  mongoc_client_t *client;
  const resv_type_t *type;
  mongoc_collection_t *coll;
  /* The upsert's findAndModify options, kept from call to call (each
   * sets its update and maxTimeMS); NULL until the first. */
  mongoc_find_and_modify_opts_t *upsert;
} resv__mongo_conn_t;

/* The backend's call on conn (mongo_conn.c): the topology learnt, the
 * type set up, the operation run (mongo_ops.c). */
bool resv__mongo_execute_on(resv__mongo_t *m, resv__mongo_conn_t *conn,
                            resv_type_t *type, const resv_request_t *req,
                            int64_t now, int64_t deadline,
                            resv_answer_t *answer, resv_error_t *err);

/* Whether one of the servers the client's topology knows takes writes
 * now (mongo_conn.c). */
bool resv__mongo_writable_known(mongoc_client_t *client);

/* Learns from client's writable server whether it is a mongos
 * (mongo_conn.c); RESV_EUNAVAILABLE when nothing answers. */
bool resv__mongo_learn_topology(resv__mongo_t *m, mongoc_client_t *client, int64_t deadline,
                                resv_error_t *err);

/* Forgets conn's collection handle and kept options (its client stays). */
void resv__mongo_conn_forget(resv__mongo_conn_t *conn);

/* ---- Streams bounded by a call's deadline (mongo_stream.c) ----------- */

/* What a client's deadline streams read: the client (for the default
 * initiator) and the deadline of the call using it (resv__monotonic_ms
 * clock; INT64_MAX: none), set by that call's thread before it runs. */
typedef struct resv__mongo_deadline {
  mongoc_client_t *client;
  int64_t deadline;
} resv__mongo_deadline_t;

/* A mongoc_stream_initiator_t (user_data: a resv__mongo_deadline_t that
 * outlives the client): the default stream, connected within the URI's
 * connectTimeoutMS or by the deadline plus RESV__DEADLINE_GRACE_MS,
 * whichever is sooner, and whose reads and writes wait no longer than
 * that either. */
mongoc_stream_t *resv__mongo_deadline_stream(const mongoc_uri_t *uri,
                                             const mongoc_host_list_t *host,
                                             void *user_data,
                                             bson_error_t *error);

/* ---- Blocking calls on the caller's thread (mongo_caller.c) ---------- */

/* The callers' clients of m, at most limit lent at once. NULL without
 * memory. */
resv__mongo_callers_t *resv__mongo_callers_new(int limit);
/* The backend's execute_blocking op: borrows a client (waiting until the
 * deadline for one when limit are lent: RESV_ETIMEOUT), whose socket
 * reads and writes end by the deadline plus RESV__DEADLINE_GRACE_MS, and
 * runs the call with it. A call that would wait for a server selection
 * longer than its deadline allows (no server known to take writes, and
 * less time left than serverSelectionTimeoutMS) answers
 * RESV__EWOULDBLOCK instead: the store hands it to the dispatcher, whose
 * waiter gives up at the deadline. */
bool resv__mongo_execute_blocking(void *backend, resv_type_t *type,
                                  const resv_request_t *req, int64_t now,
                                  int64_t deadline, resv_answer_t *answer,
                                  resv_error_t *err);
/* The backend's refuse_blocking op. */
void resv__mongo_refuse_blocking(void *backend);
/* Gives every client back to m->pool (no call runs any more). */
void resv__mongo_callers_release(resv__mongo_t *m);
/* Frees the callers (after m->pool, whose clients' streams point into
 * them, is destroyed). NULL is ignored. */
void resv__mongo_callers_free(resv__mongo_callers_t *c);

/* Removes the name of mongoc's shared-memory counters of this process
 * (mongo_counters.c); its mapping stays. */
void resv__mongo_counters_forget(void);

/* ---- The driver's log (mongo_log.c) ----------------------------------- */

/* Puts m (its hosts and database set) into the log handler's registry,
 * showing lines up to level (resv_log_level_t; 0: warning), installing
 * the handler on the first call. */
resv__mongo_log_t *resv__mongo_log_add(const resv__mongo_t *m, int32_t level);

/* Takes the store out of the registry and frees its entry (NULL: none). */
void resv__mongo_log_remove(resv__mongo_log_t *e);

/* The first warning or error the driver logs on this thread between
 * resv__mongo_log_capture and resv__mongo_log_release is kept in text
 * ("" when none), not shown. */
typedef struct resv__mongo_log_capture {
  char text[512];
} resv__mongo_log_capture_t;
void resv__mongo_log_capture(resv__mongo_log_capture_t *c);
void resv__mongo_log_release(void);

/* Logs text as a warning of domain, naming e's store. */
void resv__mongo_log_say(resv__mongo_log_t *e, const char *domain, const char *text);

/* The resv_log_level_t called name ("error" ... "debug"); 0 when none. */
int32_t resv__mongo_log_level_named(const char *name);

/* ---- The servers' clocks (mongo_skew.c) ------------------------------ */

/* Measures each server's clock at the monitor's hellos (the pool's APM
 * heartbeat callback; call before the pool's first client is popped). */
void resv__mongo_skew_watch(resv__mongo_t *m);

/* Notes the ttl of a reserve: the warning compares the skew with the
 * shortest. */
void resv__mongo_skew_ttl(resv__mongo_t *m, int64_t ttl_ms);

/* The backend's clock_skew op: the last skew and its error; false (0, -1)
 * before the first measure. */
bool resv__mongo_skew(void *backend, int64_t *skew_ms, int64_t *error_ms);

/* ---- Errors (mongo_error.c) ------------------------------------------ */

/* True when error is a duplicate key (E11000) under error API 2. */
bool resv__mongo_is_duplicate(const bson_error_t *error);

/* Turns a driver error into err and returns false: server errors keep
 * MongoDB's code (RESV_ESERVER), unreachable servers are RESV_EUNAVAILABLE,
 * or RESV_ETIMEOUT once deadline (resv__monotonic_ms clock; 0 = none) has
 * passed. what names the step ("reserve", "create collection"); the
 * URI's password never reaches the message. */
bool resv__mongo_fail(const resv__mongo_t *m, resv_error_t *err,
                      const bson_error_t *error, int64_t deadline,
                      const char *what);

/* The same, with the failed command's reply (NULL: none) whose
 * errorLabels may say RetryableWriteError (RESV_EUNAVAILABLE). */
bool resv__mongo_fail_reply(const resv__mongo_t *m, resv_error_t *err,
                            const bson_error_t *error, const bson_t *reply,
                            int64_t deadline, const char *what);

/* Replaces every occurrence of the URI's password in s (NUL-terminated,
 * edited in place) with "***". */
void resv__mongo_scrub(const resv__mongo_t *m, char *s);

/* ---- Types (mongo_schema.c) ------------------------------------------ */

bool resv__mongo_type_init(void *backend, resv_type_t *type,
                           resv_error_t *err);
void resv__mongo_type_free(void *backend, resv_type_t *type);

/* Makes sure the type's collection exists, is sharded as docs/design.md section 4
 * says, and holds format 1, once per process: after the first success it
 * costs one atomic load. Fails with RESV_EFORMAT on another format or
 * shard key (nothing written), or with the server's error. */
bool resv__mongo_schema_ready(resv__mongo_t *m, resv_type_t *type,
                              mongoc_client_t *client, int64_t deadline,
                              resv_error_t *err);

/* Reads collection's entry in listCollections and fails with RESV_EFORMAT,
 * naming the option, when it is not a plain collection or has a default
 * collation, a validator that could refuse documents, or is capped or a
 * time series (mongo_options.c). A collection not listed passes. */
bool resv__mongo_check_options(const resv__mongo_t *m, mongoc_database_t *db,
                               const char *collection, int64_t deadline,
                               resv_error_t *err);

/* Forgets that the type is set up: its next call sets it up again. */
void resv__mongo_schema_reset(resv_type_t *type);

/* ---- Reads of one key (mongo_read.c) --------------------------------- */

/* Reads the one document of coll matching filter from the primary into
 * out (initialised either way: the caller destroys it), with the
 * maxTimeMS left before deadline, and read concern local when asked
 * (else the URI's); *found says whether there was one. One round trip. */
bool resv__mongo_find_one(const resv__mongo_t *m, mongoc_collection_t *coll,
                          const bson_t *filter, bool local, int64_t deadline,
                          bson_t *out, bool *found, bson_error_t *error);

/* How resv__mongo_read_key reads. */
typedef enum resv__read_mode {
  /* get: by _id (docs/design.md section 5), so that whatever occupies the _id is
   * seen, a document whose tenant_id or key disagree with its _id
   * included, and one that is not a reservation answers RESV_EFORMAT
   * instead of absent; on a mongos by F(key), which goes to the key's one
   * shard. The URI's read concern applies. */
  RESV__READ_GET,
  /* After an abandon or release that matched nothing: as RESV__READ_GET, but
   * with read concern local from the primary whatever the URI says. */
  RESV__READ_NO_MATCH,
  /* After a duplicate key (docs/design.md section 12): read concern local from the
   * primary whatever the URI says (majority could miss the in-flight
   * holder, and the retry loop would spin on it), by _id; on a mongos by
   * the whole shard key, so the read goes to the one shard whose _id
   * index refused the write, and by _id alone only when that finds
   * nothing (what refused it may be a document whose tenant_id or key
   * disagree with its _id, which must answer RESV_EFORMAT). */
  RESV__READ_DUPLICATE
} resv__read_mode_t;

/* Reads the reservation of key k into *doc (see resv__read_mode_t);
 * *found false when there is none. A document that is not a reservation
 * of this layout fails with RESV_EFORMAT. raw is initialised either way
 * (the caller destroys it), and *doc, when found, is freed with
 * resv__doc_free. When gone is not NULL and the read is by _id
 * alone, the format record is read with the key and *gone says it was
 * missing (the collection was dropped). */
bool resv__mongo_read_key(const resv__mongo_t *m, mongoc_collection_t *coll,
                          const resv_key_t *k, resv__read_mode_t mode,
                          int64_t deadline, bson_t *raw,
                          resv__doc_t *doc, bool *found, bool *gone,
                          resv_error_t *err);

/* ---- Operations (mongo_ops.c) ---------------------------------------- */

/* The maxTimeMS of a command sent now for a call due at deadline
 * (resv__monotonic_ms clock): what is left; 0 for no limit
 * (a deadline beyond INT32_MAX ms), -1 when nothing is left. */
int64_t resv__mongo_max_time_ms(int64_t deadline);

/* resv_type_put of a validated entry into coll (mongo_put.c). */
bool resv__mongo_put(const resv__mongo_t *m, mongoc_collection_t *coll,
                     const resv_scan_entry_t *e, int64_t deadline, int32_t *outcome,
                     resv_error_t *err);
/* One page of resv_type_scan over coll (mongo_scan.c). */
bool resv__mongo_scan(const resv__mongo_t *m, mongoc_collection_t *coll,
                      const resv_str_t *after, size_t limit, int64_t now,
                      int64_t deadline, resv_scan_t *scan, resv_error_t *err);

/* reserve or confirm (r->op) on coll: the upsert, then the duplicate-key
 * path (mongo_upsert.c). With kept, the findAndModify options are *kept
 * (made when NULL, and left there for the next call), else the call's own. */
bool resv__mongo_upsert(const resv__mongo_t *m, mongoc_collection_t *coll,
                        mongoc_find_and_modify_opts_t **kept, const resv_request_t *r,
                        int64_t now, int64_t deadline, resv_answer_t *answer,
                        resv_error_t *err);

/* Runs one validated request on coll (the type's collection). When a
 * read on the way found the collection without its format record (it was
 * dropped), *gone (may be NULL) is set: the type must be set up again. */
bool resv__mongo_run(resv__mongo_t *m, mongoc_collection_t *coll,
                     const resv_request_t *req, int64_t now,
                     int64_t deadline, resv_answer_t *answer,
                     bool *gone, resv_error_t *err);
/* The same on conn's collection, with conn's kept options. */
bool resv__mongo_run_on(resv__mongo_t *m, resv__mongo_conn_t *conn,
                        const resv_request_t *req, int64_t now, int64_t deadline,
                        resv_answer_t *answer, bool *gone, resv_error_t *err);

/* ---- Several keys at once (mongo_all.c) ------------------------------ */

/* Runs a validated reserve_all, confirm_all or abandon_all on coll: the
 * keys' single-document writes sent together in one batch, then one read
 * of every key; *gone as resv__mongo_run says. */
bool resv__mongo_run_all(resv__mongo_t *m, mongoc_collection_t *coll,
                         const resv_request_t *req, int64_t now,
                         int64_t deadline, resv_answer_t *answer,
                         bool *gone, resv_error_t *err);

/* ---- Documents the operations send (mongo_build.c) ------------------- */

/* What the operations write for one key, the single-key ones and
 * mongo_all.c's batches alike: a string under key (NULL, 0 is empty); the
 * _id {t, n, k} under key; F(key) (_id, tenant_id, key); the conformance
 * predicate as $expr; the filter and
 * the update pipeline of the single-key reserve or confirm r (r->op),
 * with exact a confirm's filter matching only what becomes the owner's
 * confirmed reservation of r->version;
 * the owner's filters (abandon's pull, release): F(key), owner and the
 * conformance predicate, and with emptied also expires_at not null and no
 * holds (abandon's delete). */
struct resv__bw;
void resv__mongo_put_str(struct resv__bw *w, const char *key, size_t key_len,
                         const resv_str_t *s);
void resv__mongo_put_id(struct resv__bw *w, const char *key, size_t key_len,
                        const resv_key_t *k);
void resv__mongo_put_f_key(struct resv__bw *w, const resv_key_t *k);
void resv__mongo_put_conforms(struct resv__bw *w, const resv__mongo_t *m);
void resv__mongo_build_upsert_filter(struct resv__bw *w, const resv__mongo_t *m,
                                     const resv_request_t *r, int64_t now, bool exact);
void resv__mongo_build_upsert_pipeline(struct resv__bw *w, const resv_request_t *r,
                                       int64_t now, int64_t expires);
void resv__mongo_owner_filter(struct resv__bw *w, const resv__mongo_t *m,
                              const resv_request_t *r, bool emptied);

/* ---- The same from templates (mongo_template.c) ---------------------- */

/* The upsert filters and pipelines of mongo_build.c recorded once for m
 * (its max_holds and conformance predicate), written per call with the
 * request's values: the same bytes as resv__mongo_build_upsert_filter
 * and resv__mongo_build_upsert_pipeline. Cannot fail (out of memory
 * aborts). */
resv__mongo_templates_t *resv__mongo_templates_new(const resv__mongo_t *m);
void resv__mongo_templates_free(resv__mongo_templates_t *t);

/* resv__mongo_build_upsert_filter and resv__mongo_build_upsert_pipeline,
 * from m->templates (built by them when m has none). */
void resv__mongo_upsert_filter(struct resv__bw *w, const resv__mongo_t *m,
                               const resv_request_t *r, int64_t now, bool exact);
void resv__mongo_upsert_pipeline(struct resv__bw *w, const resv__mongo_t *m,
                                 const resv_request_t *r, int64_t now, int64_t expires);

#endif /* RESV_MONGO_INTERNAL_H */
