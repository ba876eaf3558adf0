/* store.c: the store handle, its types, its clock and the two ways to call.
 *
 * A store pairs a backend (memory.c or mongo_*.c) with, for a backend that
 * does not answer inline, the dispatcher (pool.c). Everything both backends
 * need is done here once: option defaults, validation of every request on
 * the caller's thread, the clock read once per call, the per-call deadline,
 * the refusal to run in a process forked after open.
 *
 * resv_call waits for the answer; resv_submit returns a job. For the memory
 * store both run the call on the caller's thread (it is a hash lookup under
 * a striped lock, cheaper than any thread hop); a backend with a
 * dispatcher and an execute_blocking op (MongoDB) runs resv_call there too,
 * under the call's deadline, and only resv_submit on the dispatcher.
 * Inline calls are counted
 * so that closing a store waits for the ones in progress on other threads
 * before it frees the backend. */
#include "internal.h"
#include "stats.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A clock value meaning "read the system clock". */
#define SYSTEM_CLOCK INT64_MIN

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
  resv__stats_t *stats; /* the counters of resv_store_stats (stats.c) */
  atomic_bool uncounted; /* bench/stats_cost.c's baseline: no counting */
  bool sampled;          /* the memory store: time one call in 256 */
  pthread_mutex_t types_mutex;
  /* The types by collection name: a chained hash table (linked through
   * type->next) that doubles when it holds as many types as buckets, so
   * resv_store_type is O(1) however many types there are (a list took
   * 36.5 s to hand out 40,000). */
  resv_type_t **type_buckets;
  size_t type_nbuckets; /* a power of two; 0 before the first type */
  size_t ntypes;
  char database[64]; /* MongoDB's limit: 63 bytes */
};

/* A store used in a child forked after it was opened (process.c). */
static bool forked(const resv_store_t *store) {
  return store->generation != resv__generation();
}

static bool option_in_range(const char *name, int32_t value, int32_t max,
                            resv_error_t *err) {
  if (value < 0 || value > max)
    return resv__fail(err, RESV_EINVALID, "%s: must be from 1 to %d, got %d",
                      name, (int)max, (int)value);
  return true;
}

/* The database option, checked, into out; "" when it is not set (a
 * MongoDB store then takes the URI's, a memory store "resv"). */
static bool check_database(const resv_options_t *o, char *out, size_t size,
                           resv_error_t *err) {
  out[0] = '\0';
  if (!o->database || !o->database[0]) return true;
  size_t n = strlen(o->database);
  if (n >= size)
    return resv__fail(err, RESV_EINVALID, "database: longer than %zu bytes", size - 1);
  if (strpbrk(o->database, "/\\. \"$") || !resv__utf8_valid(o->database, n))
    return resv__fail(err, RESV_EINVALID,
                      "database: must not contain / \\ . space \" or $");
  memcpy(out, o->database, n + 1);
  return true;
}

/* The fields of a store whose backend is open, from its options. */
static void init_rest(resv_store_t *store, const resv_options_t *o) {
  store->sampled = strcmp(store->ops->name, "memory") == 0;
  store->generation = resv__generation_start();
  store->pid = getpid();
  store->timeout_ms = o->timeout_ms;
  store->limits.max_string = (size_t)o->max_string;
  store->limits.max_keys = (size_t)o->max_keys;
  store->threads = o->threads;
  store->queue = o->queue;
  atomic_init(&store->clock_ms, SYSTEM_CLOCK);
  pthread_mutex_init(&store->types_mutex, NULL);
  pthread_mutex_init(&store->shutdown_mutex, NULL);
  pthread_mutex_init(&store->pool_mutex, NULL);
}

resv_store_t *resv_store_open(const resv_options_t *options, resv_error_t *err) {
  resv_options_t o = {0};
  if (options) o = *options;
  if (!option_in_range("threads", o.threads, 1024, err) ||
      !option_in_range("queue", o.queue, 1 << 24, err) ||
      !option_in_range("timeout_ms", o.timeout_ms, RESV__MAX_TIMEOUT_MS, err) ||
      !option_in_range("max_string", o.max_string, 1 << 20, err) ||
      !option_in_range("max_holds", o.max_holds, 1 << 20, err) ||
      !option_in_range("max_keys", o.max_keys, RESV__MAX_KEYS, err))
    return NULL;
  if (o.sharding != RESV_SHARDING_AUTO && o.sharding != RESV_SHARDING_OFF) {
    resv__fail(err, RESV_EINVALID, "sharding: must be auto or off");
    return NULL;
  }
  if (o.log_level < 0 || o.log_level > RESV_LOG_DEBUG) {
    resv__fail(err, RESV_EINVALID, "log_level: must be from 1 to %d, got %d",
               RESV_LOG_DEBUG, (int)o.log_level);
    return NULL;
  }
  if (o.sweep_grace_ms < 0 || o.sweep_grace_ms > RESV__MAX_GRACE_MS) {
    resv__fail(err, RESV_EINVALID, "sweep_grace_ms: must be from 0 to 2^53, got %lld",
               (long long)o.sweep_grace_ms);
    return NULL;
  }
  if (!o.sweep_grace_ms) o.sweep_grace_ms = RESV__DEFAULT_GRACE_MS;
  if (o.slow_ms < 0 || o.slow_ms > RESV__MAX_TIMEOUT_MS) {
    resv__fail(err, RESV_EINVALID, "slow_ms: must be from 1 to %d, got %lld",
               RESV__MAX_TIMEOUT_MS, (long long)o.slow_ms);
    return NULL;
  }
  if (!o.slow_ms) o.slow_ms = RESV__DEFAULT_SLOW_MS;
  if (!o.threads) o.threads = RESV__DEFAULT_THREADS;
  if (!o.queue) o.queue = RESV__DEFAULT_QUEUE;
  if (!o.timeout_ms) o.timeout_ms = RESV__DEFAULT_TIMEOUT_MS;
  if (!o.max_string) o.max_string = RESV__DEFAULT_MAX_STRING;
  if (!o.max_holds) o.max_holds = RESV__DEFAULT_MAX_HOLDS;
  if (!o.max_keys) o.max_keys = RESV__DEFAULT_MAX_KEYS;

  resv_store_t *store = calloc(1, sizeof *store);
  if (!store) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a store");
    return NULL;
  }
  if (!(store->stats = resv__stats_new(o.slow_ms))) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a store");
    free(store);
    return NULL;
  }
  if (!check_database(&o, store->database, sizeof store->database, err)) {
    resv__stats_free(store->stats);
    free(store);
    return NULL;
  }
  if (o.path && o.path[0] && o.uri && o.uri[0]) {
    resv__fail(err, RESV_EINVALID, "path and uri: give one of them, not both");
    resv__stats_free(store->stats);
    free(store);
    return NULL;
  }
  if (o.path && o.path[0]) {
    if (!store->database[0]) strcpy(store->database, "resv");
    store->backend = resv__file_open(&o, &store->ops, err);
  } else if (o.uri && o.uri[0]) {
    store->backend = resv__mongo_open(&o, store->database, sizeof store->database,
                                      &store->ops, err);
  } else {
    if (!store->database[0]) strcpy(store->database, "resv");
    store->backend = resv__memory_open(&o, &store->ops, err);
  }
  if (!store->backend) {
    resv__stats_free(store->stats);
    free(store);
    return NULL;
  }
  if (!store->ops->runs_inline) {
    store->pool = resv__pool_new(o.threads, o.queue, err);
    if (!store->pool) {
      store->ops->destroy(store->backend);
      resv__stats_free(store->stats);
      free(store);
      return NULL;
    }
  }
  init_rest(store, &o);
  return store;
}


/* Waits for the calls running on their callers' threads to end: a
 * MongoDB call may wait on the server until its deadline, so past a few
 * yields the wait sleeps a millisecond at a time. */
static void wait_for_inline_calls(resv_store_t *store) {
  for (int spins = 0; atomic_load(&store->active) > 0; spins++) {
    if (spins < 100) {
      sched_yield();
    } else {
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, NULL);
    }
  }
}

void resv_store_shutdown(resv_store_t *store) {
  if (!store) return;
  atomic_store(&store->closed, true); /* new calls answer closed from here */
  if (forked(store)) return; /* the threads live in the parent only */
  /* One caller does the work; a concurrent one waits for it, so that
   * every caller returns with the connections gone. */
  pthread_mutex_lock(&store->shutdown_mutex);
  if (!store->shut) {
    pthread_mutex_lock(&store->pool_mutex);
    store->pool_closed = true;
    pthread_mutex_unlock(&store->pool_mutex);
    if (store->ops->refuse_blocking) store->ops->refuse_blocking(store->backend);
    resv__pool_shutdown(store->pool);
    wait_for_inline_calls(store);
    if (store->ops->shutdown) store->ops->shutdown(store->backend);
    store->shut = true;
  }
  pthread_mutex_unlock(&store->shutdown_mutex);
}

/* Shuts the store down (waiting, when a call is on the server, for it to
 * end) and frees it with its types. */
static void teardown(resv_store_t *store) {
  resv_store_shutdown(store);
  resv__pool_free(store->pool);
  for (size_t b = 0; b < store->type_nbuckets; b++) {
    resv_type_t *type = store->type_buckets[b];
    while (type) {
      resv_type_t *next = type->next;
      if (store->ops->type_free) store->ops->type_free(store->backend, type);
      free(type->context);
      free(type);
      type = next;
    }
  }
  free(store->type_buckets);
  store->ops->destroy(store->backend);
  pthread_mutex_destroy(&store->shutdown_mutex);
  pthread_mutex_destroy(&store->types_mutex);
  pthread_mutex_destroy(&store->pool_mutex);
  resv__stats_free(store->stats);
  free(store);
}

/* ---- reapers: closing without waiting -------------------------------- */

/* resv_store_close is what a garbage collector calls (Lua's ffi.gc), and
 * a collector must never wait on the network: a call blocked on the
 * server held it for as long as the call (1.5 s seen). So a store that
 * may still talk to a server is torn down by a detached reaper thread,
 * bounded by the in-flight call's deadline and the driver's timeouts.
 * The process waits for its reapers when it exits (and when libresv is
 * unloaded: atexit in a shared object runs at dlclose), so none is cut
 * off mid-teardown or outlives the code it runs. */
static pthread_mutex_t reapers_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reapers_cond = PTHREAD_COND_INITIALIZER;
static pthread_once_t reapers_once = PTHREAD_ONCE_INIT;

/* A reaper's thread is joined, never detached: a thread is gone only once
 * its exit (the thread-local destructors of the TLS library the driver
 * uses, among others) has run, and exit() or the unloading of libresv
 * must not pull the code or the libraries' state from under it (LuaJIT
 * scripts that exited with a MongoDB store open crashed about once in a
 * dozen runs). Finished reapers are joined at the next close and at exit.
 * Guarded by reapers_mutex. */
typedef struct reaper {
  pthread_t thread;
  resv_store_t *store;
  bool stop_only; /* resv_store_stop's: shuts down, frees only when last */
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
 * none (the parent's records are left, never freed, in the child). */
static void reapers_lock(void) { pthread_mutex_lock(&reapers_mutex); }
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

/* Drops a reference to the store; the last one tears it down. */
static void store_unref(resv_store_t *store) {
  if (atomic_fetch_sub(&store->refs, 1) == 0) teardown(store);
}

static void *reap(void *arg) {
  reaper_t *r = arg;
  if (r->stop_only) {
    resv_store_shutdown(r->store);
    store_unref(r->store);
  } else {
    teardown(r->store);
  }
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

/* Starts a reaper thread on store (stop_only: resv_store_stop's). False
 * when there is no memory or thread for one. */
static bool start_reaper(resv_store_t *store, bool stop_only) {
  pthread_once(&reapers_once, install_reapers);
  reaper_t *r = calloc(1, sizeof *r);
  if (!r) return false;
  r->store = store;
  r->stop_only = stop_only;
  pthread_mutex_lock(&reapers_mutex);
  join_done_reapers_locked();
  if (pthread_create(&r->thread, NULL, reap, r) != 0) {
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

void resv_store_close(resv_store_t *store) {
  if (!store) return;
  if (forked(store)) {
    /* The pool's threads and the MongoDB client belong to the parent:
     * touching them here could corrupt the parent's connections. Only the
     * handle itself is freed. */
    resv__stats_free(store->stats);
    free(store);
    return;
  }
  atomic_store(&store->closed, true);
  /* A stopper still running frees the store when it is done. */
  if (atomic_fetch_sub(&store->refs, 1) != 0) return;
  /* Nothing left that could wait on a server: an inline store (its calls
   * never wait), or one already shut down. Else a reaper does it. */
  bool shut = !store->pool;
  if (!shut && store->ops->hands_off) {
    /* Its dispatcher runs only the calls that had to wait: when none is
     * there, the teardown waits on nothing. */
    int64_t waiting, running;
    resv__pool_load(store->pool, &waiting, &running);
    shut = waiting == 0 && running == 0;
  }
  if (!shut && pthread_mutex_trylock(&store->shutdown_mutex) == 0) {
    shut = store->shut;
    pthread_mutex_unlock(&store->shutdown_mutex);
  }
  if (shut || !start_reaper(store, false))
    teardown(store); /* without a thread to be had, here, waiting */
}

void resv_store_stop(resv_store_t *store) {
  if (!store) return;
  atomic_store(&store->closed, true); /* new calls answer closed from here */
  if (forked(store) || !store->pool || atomic_exchange(&store->stopping, true)) return;
  atomic_fetch_add(&store->refs, 1);
  if (!start_reaper(store, true)) {
    resv_store_shutdown(store); /* without a thread to be had, here, waiting */
    atomic_fetch_sub(&store->refs, 1);
  }
}

void resv_store_set_time(resv_store_t *store, int64_t ms) {
  atomic_store(&store->clock_ms, ms == SYSTEM_CLOCK ? SYSTEM_CLOCK + 1 : ms);
}

void resv_store_use_system_time(resv_store_t *store) {
  atomic_store(&store->clock_ms, SYSTEM_CLOCK);
}

int64_t resv_store_now(resv_store_t *store) {
  int64_t ms = atomic_load(&store->clock_ms);
  return ms == SYSTEM_CLOCK ? resv__realtime_ms() : ms;
}

bool resv_store_is_sharded(const resv_store_t *store) {
  return store->ops->is_sharded && store->ops->is_sharded(store->backend);
}

bool resv_store_runs_inline(const resv_store_t *store) {
  return store->ops->runs_inline && !store->ops->hands_off;
}

bool resv_store_may_answer_inline(const resv_store_t *store) {
  return store->ops->runs_inline;
}

void resv_store_describe(const resv_store_t *store, char *buf, size_t size) {
  if (!size) return;
  store->ops->describe(store->backend, buf, size);
}

/* FNV-1a of a collection name. */
static size_t name_hash(const char *name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    h ^= *p;
    h *= 0x100000001b3ULL;
  }
  return (size_t)(h ^ (h >> 32));
}

/* The slot where the type of collection is, or would be linked. Call
 * with types_mutex held and type_nbuckets > 0. */
static resv_type_t **type_slot(resv_store_t *store, const char *collection) {
  resv_type_t **slot =
      &store->type_buckets[name_hash(collection) & (store->type_nbuckets - 1)];
  while (*slot && strcmp((*slot)->collection, collection) != 0) slot = &(*slot)->next;
  return slot;
}

/* Makes room for one more type (types_mutex held): the first buckets, or
 * twice as many once there are as many types as buckets. Fails only
 * without memory for the first ones; a table that cannot grow stays as
 * it is, slower but correct. */
static bool types_make_room(resv_store_t *store, resv_error_t *err) {
  if (store->type_nbuckets && store->ntypes < store->type_nbuckets) return true;
  size_t n = store->type_nbuckets ? store->type_nbuckets * 2 : 16;
  resv_type_t **buckets = calloc(n, sizeof *buckets);
  if (!buckets)
    return store->type_nbuckets ||
           resv__fail(err, RESV_ENOMEM, "out of memory for a type");
  for (size_t b = 0; b < store->type_nbuckets; b++) {
    resv_type_t *type = store->type_buckets[b];
    while (type) {
      resv_type_t *next = type->next;
      resv_type_t **head = &buckets[name_hash(type->collection) & (n - 1)];
      type->next = *head;
      *head = type;
      type = next;
    }
  }
  free(store->type_buckets);
  store->type_buckets = buckets;
  store->type_nbuckets = n;
  return true;
}

resv_type_t *resv_store_type(resv_store_t *store, const char *context,
                             size_t context_len, const char *aggregate,
                             size_t aggregate_len, resv_error_t *err) {
  char collection[RESV__MAX_NAMESPACE + 1];
  if (!resv__validate_type(context, context_len, aggregate, aggregate_len,
                           store->database, collection, sizeof collection, err))
    return NULL;
  if (atomic_load(&store->closed) || forked(store)) {
    resv__fail(err, RESV_ECLOSED, "the store is closed");
    return NULL;
  }
  pthread_mutex_lock(&store->types_mutex);
  resv_type_t *type = NULL;
  if (store->type_nbuckets) type = *type_slot(store, collection);
  if (!type && types_make_room(store, err)) {
    type = calloc(1, sizeof *type);
    char *names = type ? malloc(context_len + aggregate_len + 2) : NULL;
    if (!names) {
      free(type);
      type = NULL;
      resv__fail(err, RESV_ENOMEM, "out of memory for a type");
    } else {
      type->store = store;
      type->context = names;
      type->context_len = context_len;
      memcpy(names, context, context_len);
      names[context_len] = '\0';
      type->aggregate = names + context_len + 1;
      type->aggregate_len = aggregate_len;
      memcpy(type->aggregate, aggregate, aggregate_len);
      type->aggregate[aggregate_len] = '\0';
      strcpy(type->collection, collection);
      if (store->ops->type_init && !store->ops->type_init(store->backend, type, err)) {
        free(names);
        free(type);
        type = NULL;
      } else {
        *type_slot(store, collection) = type;
        store->ntypes++;
      }
    }
  }
  pthread_mutex_unlock(&store->types_mutex);
  return type;
}

const char *resv_type_collection(const resv_type_t *type) { return type->collection; }

bool resv__store_usage(resv_store_t *store, int64_t *entries, int64_t *bytes) {
  *entries = *bytes = -1;
  if (!store->ops->usage) return false;
  *entries = *bytes = 0;
  pthread_mutex_lock(&store->types_mutex);
  for (size_t b = 0; b < store->type_nbuckets; b++)
    for (resv_type_t *type = store->type_buckets[b]; type; type = type->next)
      store->ops->usage(store->backend, type, entries, bytes);
  pthread_mutex_unlock(&store->types_mutex);
  return true;
}

/* ---- calls ---------------------------------------------------------- */

static bool check_open(resv_store_t *store, resv_error_t *err) {
  if (forked(store))
    return resv__fail(err, RESV_ECLOSED,
                      "the store was opened in process %d, before a fork(): "
                      "open a new store in this process", (int)store->pid);
  if (atomic_load(&store->closed)) return resv__fail(err, RESV_ECLOSED, "the store is closed");
  return true;
}

/* Runs a tool's call (a list of types, a scan, a put) to its end: on the
 * caller's thread for an inline store, else on a dispatcher thread with
 * that thread's connection (a MongoDB client of its own could wait for
 * ever on a pool whose clients the workers hold), waiting whatever the
 * deadline (the work writes into the caller's call; its reads carry
 * maxTimeMS, and a job still queued at the deadline ends without running).
 * work sets *ok and fills job->error. Returns *ok; on failure err says
 * why. */
static bool run_to_the_end(resv_store_t *store, resv_type_t *type, resv__work_fn work,
                           void *call, const bool *ok, int64_t deadline, const char *what,
                           resv_error_t *err) {
  resv_job_t *job = resv__job_new(type, NULL, work, NULL, deadline, err);
  if (!job) return false;
  job->user = call;
  if (store->ops->runs_inline) {
    atomic_fetch_add(&store->active, 1);
    if (check_open(store, &job->error)) work(job);
    atomic_fetch_sub(&store->active, 1);
  } else if (check_open(store, &job->error) && resv__pool_submit(store->pool, job, &job->error)) {
    resv_job_wait(job, -1);
  }
  if (!*ok) {
    if (err) *err = job->error;
    if (job->error.code == RESV_OK) resv__fail(err, RESV_ECLOSED, "the %s did not run", what);
  }
  resv__job_unref(job);
  return *ok;
}

/* A list of types' arguments and result, for a dispatcher thread. */
typedef struct types_call {
  resv_store_t *store;
  resv_type_names_t *names;
  bool ok;
} types_call_t;

static void types_job(resv_job_t *job) {
  types_call_t *c = job->user;
  c->ok = c->store->ops->list_types(c->store->backend, job->deadline, c->names,
                                    &job->error);
}

static int type_name_cmp(const void *a, const void *b) {
  const resv_str_t *x = &((const resv_type_name_t *)a)->collection;
  const resv_str_t *y = &((const resv_type_name_t *)b)->collection;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->ptr, y->ptr, n);
  return c ? c : (x->len > y->len) - (x->len < y->len);
}

bool resv_store_types(resv_store_t *store, resv_type_names_t *names, resv_error_t *err) {
  resv_type_names_clear(names);
  if (!store->ops->list_types)
    return resv__fail(err, RESV_EINVALID, "the %s store has no list of types",
                      store->ops->name);
  int64_t deadline = resv__add_ms_sat(resv__monotonic_ms(), store->timeout_ms);
  types_call_t c = {store, names, false};
  run_to_the_end(store, NULL, types_job, &c, &c.ok, deadline, "list", err);
  if (!c.ok) {
    resv_type_names_clear(names);
    return false;
  }
  if (names->count > 1) qsort(names->names, names->count, sizeof *names->names, type_name_cmp);
  return true;
}

/* A put's arguments and result, for a dispatcher thread. */
typedef struct put_call {
  const resv_scan_entry_t *entry;
  int32_t *outcome;
  bool ok;
} put_call_t;

static void put_job(resv_job_t *job) {
  resv_store_t *store = job->type->store;
  put_call_t *c = job->user;
  c->ok = store->ops->put(store->backend, job->type, c->entry, job->deadline, c->outcome,
                          &job->error);
}

/* The checks of a call, for an entry to put. */
static bool validate_entry(const resv_store_t *store, const resv_scan_entry_t *e,
                           resv_error_t *err) {
  bool pending = e->status == RESV_PENDING || e->status == RESV_EXPIRED;
  if (!pending && e->status != RESV_CONFIRMED)
    return resv__fail(err, RESV_EINVALID, "entry: status must be pending, expired or confirmed");
  if ((pending ? RESV_STATE_PENDING : RESV_STATE_CONFIRMED) != e->state)
    return resv__fail(err, RESV_EINVALID, "entry: state does not match its status");
  resv_request_t r = {.op = RESV_OP_RELEASE, .key = {e->tenant, e->ns, e->key},
                      .owner = {e->owner_tenant, e->owner_id}};
  if (!resv__validate_request(&r, &store->limits, err)) return false;
  if (!pending) {
    if (e->version < 0) return resv__fail(err, RESV_EINVALID, "entry: negative version");
    return true;
  }
  if (e->nholds && !e->holds) return resv__fail(err, RESV_EINVALID, "entry: holds NULL");
  for (size_t i = 0; i < e->nholds; i++) {
    resv_request_t h = {.op = RESV_OP_ABANDON, .key = r.key, .owner = r.owner,
                        .attempt = e->holds[i]};
    if (!resv__validate_request(&h, &store->limits, err)) return false;
    for (size_t j = 0; j < i; j++)
      if (e->holds[j].len == e->holds[i].len &&
          memcmp(e->holds[j].ptr, e->holds[i].ptr, e->holds[i].len) == 0)
        return resv__fail(err, RESV_EINVALID, "entry: a hold is there twice");
  }
  return true;
}

bool resv_type_put(resv_type_t *type, const resv_scan_entry_t *entry, int32_t *outcome,
                   resv_error_t *err) {
  resv_store_t *store = type->store;
  if (!store->ops->put)
    return resv__fail(err, RESV_EINVALID, "the %s store has no put", store->ops->name);
  if (!validate_entry(store, entry, err)) return false;
  int64_t deadline = resv__add_ms_sat(resv__monotonic_ms(), store->timeout_ms);
  put_call_t c = {entry, outcome, false};
  return run_to_the_end(store, type, put_job, &c, &c.ok, deadline, "put", err);
}

/* ---- scans (docs/design.md section 13; the pages are filled by scan.c) ------- */

/* The largest page of resv_type_scan. */
#define SCAN_MAX_LIMIT 10000

/* A scan's arguments and result, for a dispatcher thread. */
typedef struct scan_call {
  const resv_str_t *after;
  size_t limit;
  int64_t now;
  resv_scan_t *scan;
  bool ok;
} scan_call_t;

/* The backend's scan (on a dispatcher thread, or inline). */
static void scan_job(resv_job_t *job) {
  resv_store_t *store = job->type->store;
  scan_call_t *c = job->user;
  c->ok = store->ops->scan(store->backend, job->type, c->after, c->limit, c->now,
                           job->deadline, c->scan, &job->error);
}

bool resv_type_scan(resv_type_t *type, size_t after_len, const char *after,
                    size_t limit, resv_scan_t *scan, resv_error_t *err) {
  resv_store_t *store = type->store;
  resv_scan_clear(scan);
  if (limit < 1 || limit > SCAN_MAX_LIMIT)
    return resv__fail(err, RESV_EINVALID, "limit: must be from 1 to %d, got %zu",
                      SCAN_MAX_LIMIT, limit);
  if (after_len && !after) return resv__fail(err, RESV_EINVALID, "after: NULL");
  if (!store->ops->scan)
    return resv__fail(err, RESV_EINVALID, "the %s store has no scan", store->ops->name);
  resv_str_t from = {after_len ? after : "", after_len};
  int64_t deadline = resv__add_ms_sat(resv__monotonic_ms(), store->timeout_ms);
  scan_call_t c = {&from, limit, resv_store_now(store), scan, false};
  run_to_the_end(store, type, scan_job, &c, &c.ok, deadline, "scan", err);
  if (!c.ok) resv_scan_clear(scan);
  return c.ok;
}

/* Runs a call on the caller's thread; deadline is RESV__DEADLINE_MAY_WAIT
 * or RESV__DEADLINE_NO_WAIT (an inline backend waits on nothing else). */
/* The backend's call of a validated request, at the store's clock. */
static bool execute(resv_store_t *store, resv_type_t *type, const resv_request_t *req,
                    int64_t deadline, resv_answer_t *answer, resv_error_t *err) {
  if (resv__op_is_all(req->op) && !store->ops->several_keys)
    return resv__fail(err, RESV_EINVALID, "keys: the %s store takes one key a call",
                      store->ops->name);
  return store->ops->execute(store->backend, type, req, resv_store_now(store), deadline,
                             answer, err);
}

static bool run_inline(resv_type_t *type, const resv_request_t *req, int64_t deadline,
                       resv_answer_t *answer, resv_error_t *err) {
  resv_store_t *store = type->store;
  atomic_fetch_add(&store->active, 1);
  bool ok = check_open(store, err) && execute(store, type, req, deadline, answer, err);
  atomic_fetch_sub(&store->active, 1);
  return ok;
}

/* A worker's part of a job. */
static void execute_job(resv_job_t *job) {
  execute(job->type->store, job->type, &job->request, job->deadline, &job->answer,
          &job->error);
}

/* The dispatcher of a store that hands calls off, made on first use; NULL
 * (err filled) once the store is shut down or without memory for it. */
static resv__pool_t *hand_off_pool(resv_store_t *store, resv_error_t *err) {
  resv__pool_t *pool = store->pool;
  if (pool) return pool;
  pthread_mutex_lock(&store->pool_mutex);
  if (!store->pool && !store->pool_closed)
    store->pool = resv__pool_new(store->threads, store->queue, err);
  else if (!store->pool)
    resv__fail(err, RESV_ECLOSED, "the store is closed");
  pool = store->pool;
  pthread_mutex_unlock(&store->pool_mutex);
  return pool;
}

/* Makes and queues the job of a request (validated unless `validated`
 * says it already was); a job that cannot be queued is finished with its
 * error. An inline store runs it on the caller's thread first. */
static resv_job_t *submit(resv_type_t *type, const resv_request_t *req,
                          resv_inbox_t *inbox, bool validated, resv_error_t *err) {
  resv_store_t *store = type->store;
  /* A bad timeout_ms fails validation below; the deadline it gives meanwhile
   * is never used. */
  int64_t timeout_ms = req->timeout_ms > 0 && req->timeout_ms <= RESV__MAX_TIMEOUT_MS
                           ? req->timeout_ms : store->timeout_ms;
  /* Validated before it is copied: a bad request's keys are not read. */
  resv_error_t invalid = {0};
  bool valid = validated || resv__validate_request(req, &store->limits, &invalid);
  resv_request_t copy = *req;
  if (!valid) copy.keys = NULL, copy.nkeys = 0;
  resv_job_t *job = resv__job_new(type, &copy, execute_job, inbox,
                                  resv__add_ms_sat(resv__monotonic_ms(), timeout_ms), err);
  if (!job) return NULL;
  job->started_ns = resv__now_ns();
  if (!valid) job->error = invalid;
  if (!valid || !check_open(store, &job->error)) {
    resv__job_finish(job);
    return job;
  }
  if (store->ops->runs_inline) {
    /* With a dispatcher to hand it to, the call must not wait here. */
    int64_t deadline = store->ops->hands_off ? RESV__DEADLINE_NO_WAIT : RESV__DEADLINE_MAY_WAIT;
    if (run_inline(type, &job->request, deadline, &job->answer, &job->error) ||
        job->error.code != RESV__EWOULDBLOCK) {
      resv__job_finish(job);
      return job;
    }
    resv__error_clear(&job->error);
    resv_answer_clear(&job->answer);
  }
  resv__pool_t *pool = store->ops->runs_inline ? hand_off_pool(store, &job->error) : store->pool;
  if (!pool || !resv__pool_submit(pool, job, &job->error)) resv__job_finish(job);
  return job;
}

resv_job_t *resv_submit(resv_type_t *type, const resv_request_t *req,
                        resv_inbox_t *inbox, resv_error_t *err) {
  return submit(type, req, inbox, false, err);
}

bool resv_try_call(resv_type_t *type, const resv_request_t *req, resv_answer_t *answer,
                   resv_error_t *err) {
  resv_store_t *store = type->store;
  resv_error_t local;
  if (!err) err = &local;
  if (!store->ops->runs_inline) {
    resv__error_clear(err); /* every call waits for a dispatcher thread */
    return false;
  }
  int64_t started = resv__now_ns();
  bool ok = resv__validate_request(req, &store->limits, err) &&
            run_inline(type, req, store->ops->hands_off ? RESV__DEADLINE_NO_WAIT
                                                        : RESV__DEADLINE_MAY_WAIT, answer, err);
  if (!ok && err->code == RESV__EWOULDBLOCK) {
    resv__error_clear(err);
    return false;
  }
  resv__stats_call(store->stats, req ? req->op : 0, ok, ok ? answer->status : err->code,
                   resv__now_ns() - started);
  return ok;
}

/* resv_call on a store whose backend runs a blocking call on the caller's
 * thread (execute_blocking) under the call's own deadline, counted as a
 * job of the dispatcher would be. False with err RESV__EWOULDBLOCK (not
 * counted): the call is the dispatcher's. */
static bool call_blocking(resv_type_t *type, const resv_request_t *req,
                          resv_answer_t *answer, resv_error_t *err) {
  resv_store_t *store = type->store;
  int64_t started = resv__now_ns(); /* resv__monotonic_ms's clock, in ns */
  int64_t timeout_ms = req->timeout_ms > 0 ? req->timeout_ms : store->timeout_ms;
  int64_t deadline = resv__add_ms_sat(started / 1000000, timeout_ms);
  atomic_fetch_add(&store->active, 1);
  bool ok = check_open(store, err) &&
            store->ops->execute_blocking(store->backend, type, req, resv_store_now(store),
                                         deadline, answer, err);
  /* Counted before the call lets go of the store: a close waiting for it
   * frees the counters next. */
  if ((ok || err->code != RESV__EWOULDBLOCK) &&
      !atomic_load_explicit(&store->uncounted, memory_order_relaxed))
    resv__stats_call(store->stats, req->op, ok, ok ? answer->status : err->code,
                     resv__now_ns() - started);
  atomic_fetch_sub(&store->active, 1);
  return ok;
}

bool resv_call(resv_type_t *type, const resv_request_t *req,
               resv_answer_t *answer, resv_error_t *err) {
  resv_store_t *store = type->store;
  resv_error_t local;
  if (!err) err = &local; /* the counters want the code */
  if (!resv__validate_request(req, &store->limits, err)) {
    resv__stats_call(store->stats, req ? req->op : 0, false, err->code, 0);
    return false;
  }
  if (store->ops->execute_blocking) {
    if (call_blocking(type, req, answer, err)) return true;
    if (err->code != RESV__EWOULDBLOCK) return false;
    resv__error_clear(err); /* the dispatcher's, below */
  } else if (store->ops->runs_inline || store->ops->blocking_inline) {
    if (atomic_load_explicit(&store->uncounted, memory_order_relaxed))
      return run_inline(type, req, RESV__DEADLINE_MAY_WAIT, answer, err);
    if (store->sampled && !resv__stats_sample()) {
      bool ok = run_inline(type, req, RESV__DEADLINE_MAY_WAIT, answer, err);
      if (ok)
        resv__stats_answered(store->stats, req->op, answer->status);
      else
        resv__stats_answer(store->stats, req->op, false, err->code);
      return ok;
    }
    int64_t started = resv__now_ns();
    bool ok = run_inline(type, req, RESV__DEADLINE_MAY_WAIT, answer, err);
    resv__stats_call(store->stats, req->op, ok, ok ? answer->status : err->code,
                     resv__now_ns() - started);
    return ok;
  }

  resv_job_t *job = submit(type, req, NULL, true, err);
  if (!job) return false;
  bool ok = false;
  if (!resv_job_wait(job, resv_job_deadline(job) - resv__monotonic_ms())) {
    resv__fail(err, RESV_ETIMEOUT, "no answer within %lld ms",
               (long long)(req->timeout_ms > 0 ? req->timeout_ms : store->timeout_ms));
  } else if (job->error.code != RESV_OK) {
    if (err) *err = job->error;
  } else {
    resv__answer_move(answer, &job->answer);
    ok = true;
  }
  resv_job_destroy(job);
  return ok;
}

void resv__store_count_job(resv_job_t *job) {
  if (!job->type) return;
  bool ok = job->error.code == RESV_OK;
  resv__stats_call(job->type->store->stats, job->request.op, ok,
                   ok ? job->answer.status : job->error.code,
                   resv__now_ns() - job->started_ns);
}

void resv__type_count(resv_type_t *type, int kind) {
  resv__stats_count(type->store->stats, kind);
}

void resv__store_set_counting(resv_store_t *store, bool on) {
  atomic_store(&store->uncounted, !on);
}

void resv__store_count(resv_store_t *store, int kind) {
  if (store) resv__stats_count(store->stats, kind);
}

bool resv_store_stats(resv_store_t *store, resv_stats_t *out, resv_error_t *err) {
  memset(out, 0, sizeof *out);
  if (forked(store))
    return resv__fail(err, RESV_ECLOSED,
                      "the store was opened in process %d, before a fork()",
                      (int)store->pid);
  resv__stats_sum(store->stats, out);
  resv__pool_load(store->pool, &out->jobs_waiting, &out->jobs_running);
  resv__store_usage(store, &out->entries, &out->bytes);
  out->clock_skew_error_ms = -1;
  if (store->ops->clock_skew)
    store->ops->clock_skew(store->backend, &out->clock_skew_ms, &out->clock_skew_error_ms);
  return true;
}

/* ---- calls with their strings as arguments (bindings) ---------------- */

static resv_str_t arg_str(size_t len, const char *ptr) {
  return (resv_str_t){ptr ? ptr : "", ptr ? len : 0};
}

#define REQUEST_OF_ARGS                                                      \
  {                                                                          \
    .op = op,                                                                \
    .key = {arg_str(key_tenant_len, key_tenant), arg_str(ns_len, ns),        \
            arg_str(key_len, key)},                                          \
    .owner = {arg_str(owner_tenant_len, owner_tenant),                       \
              arg_str(owner_id_len, owner_id)},                              \
    .attempt = arg_str(attempt_len, attempt), .ttl_ms = ttl_ms,              \
    .version = version, .timeout_ms = timeout_ms,                            \
  }

bool resv_call_args(resv_type_t *type, int32_t op, int64_t ttl_ms,
                    int64_t version, int64_t timeout_ms,
                    size_t key_tenant_len, const char *key_tenant,
                    size_t ns_len, const char *ns,
                    size_t key_len, const char *key,
                    size_t owner_tenant_len, const char *owner_tenant,
                    size_t owner_id_len, const char *owner_id,
                    size_t attempt_len, const char *attempt,
                    resv_answer_t *answer, resv_error_t *err) {
  resv_request_t req = REQUEST_OF_ARGS;
  return resv_call(type, &req, answer, err);
}

resv_job_t *resv_submit_args(resv_type_t *type, int32_t op, int64_t ttl_ms,
                             int64_t version, int64_t timeout_ms,
                             size_t key_tenant_len, const char *key_tenant,
                             size_t ns_len, const char *ns,
                             size_t key_len, const char *key,
                             size_t owner_tenant_len, const char *owner_tenant,
                             size_t owner_id_len, const char *owner_id,
                             size_t attempt_len, const char *attempt,
                             resv_inbox_t *inbox, resv_error_t *err) {
  resv_request_t req = REQUEST_OF_ARGS;
  return resv_submit(type, &req, inbox, err);
}

bool resv_try_call_args(resv_type_t *type, int32_t op, int64_t ttl_ms, int64_t version,
                        int64_t timeout_ms, size_t key_tenant_len, const char *key_tenant,
                        size_t ns_len, const char *ns, size_t key_len, const char *key,
                        size_t owner_tenant_len, const char *owner_tenant,
                        size_t owner_id_len, const char *owner_id,
                        size_t attempt_len, const char *attempt,
                        resv_answer_t *answer, resv_error_t *err) {
  resv_request_t req = REQUEST_OF_ARGS;
  return resv_try_call(type, &req, answer, err);
}
