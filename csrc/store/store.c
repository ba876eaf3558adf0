/* store.c: a store's life: open, shutdown, close and stop, its clock, and
 * what it says of itself (describe, stats).
 *
 * A store pairs a backend (the memory store, the file store or the MongoDB
 * store) with, for a backend that does not answer inline, the dispatcher
 * (csrc/dispatch/). Everything the backends need is done once in
 * csrc/store/: option defaults here, and the calls (call.c), the types
 * (types.c), the tools' calls (tools.c) and the closing without waiting
 * (reaper.c). The backend gets the store's counters at open and never
 * sees the store. */
#include "internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool option_in_range(const char *name, int32_t value, int32_t max,
                            resv_error_t *err) {
  if (value < 0 || value > max)
    return resv__fail(err, RESV_EINVALID,
                      "%s: must be from 1 to %d (0: the default), got %d", name, (int)max,
                      (int)value);
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
  store->generation = resv__generation_start();
  store->pid = getpid();
  store->timeout_ms = o->timeout_ms;
  store->limits.max_string = (size_t)o->max_string;
  store->limits.max_keys = (size_t)o->max_keys;
  store->threads = o->threads;
  store->queue = o->queue;
  atomic_init(&store->clock_ms, RESV__SYSTEM_CLOCK);
  pthread_mutex_init(&store->types_mutex, NULL);
  pthread_mutex_init(&store->shutdown_mutex, NULL);
  pthread_mutex_init(&store->pool_mutex, NULL);
}

/* Checks the options and fills in the defaults of those not set. */
static bool check_options(resv_options_t *o, resv_error_t *err) {
  if (!option_in_range("threads", o->threads, 1024, err) ||
      !option_in_range("queue", o->queue, 1 << 24, err) ||
      !option_in_range("timeout_ms", o->timeout_ms, RESV__MAX_TIMEOUT_MS, err) ||
      !option_in_range("max_string", o->max_string, 1 << 20, err) ||
      !option_in_range("max_holds", o->max_holds, 1 << 20, err) ||
      !option_in_range("max_keys", o->max_keys, RESV__MAX_KEYS, err))
    return false;
  if (o->sharding != RESV_SHARDING_AUTO && o->sharding != RESV_SHARDING_OFF)
    return resv__fail(err, RESV_EINVALID, "sharding: must be auto or off");
  if (o->log_level < 0 || o->log_level > RESV_LOG_DEBUG)
    return resv__fail(err, RESV_EINVALID,
                      "log_level: must be from 1 to %d (0: the default), got %d", RESV_LOG_DEBUG,
                      (int)o->log_level);
  if (o->sweep_grace_ms < 0 || o->sweep_grace_ms > RESV__MAX_GRACE_MS)
    return resv__fail(err, RESV_EINVALID,
                      "sweep_grace_ms: must be from 1 to 2^53 (0: the default), got %lld",
                      (long long)o->sweep_grace_ms);
  if (!o->sweep_grace_ms) o->sweep_grace_ms = RESV__DEFAULT_GRACE_MS;
  if (o->slow_ms < 0 || o->slow_ms > RESV__MAX_TIMEOUT_MS)
    return resv__fail(err, RESV_EINVALID,
                      "slow_ms: must be from 1 to %d (0: the default), got %lld",
                      RESV__MAX_TIMEOUT_MS, (long long)o->slow_ms);
  if (!o->slow_ms) o->slow_ms = RESV__DEFAULT_SLOW_MS;
  if (!o->threads) o->threads = RESV__DEFAULT_THREADS;
  if (!o->queue) o->queue = RESV__DEFAULT_QUEUE;
  if (!o->timeout_ms) o->timeout_ms = RESV__DEFAULT_TIMEOUT_MS;
  if (!o->max_string) o->max_string = RESV__DEFAULT_MAX_STRING;
  if (!o->max_holds) o->max_holds = RESV__DEFAULT_MAX_HOLDS;
  if (!o->max_keys) o->max_keys = RESV__DEFAULT_MAX_KEYS;
  return true;
}

/* Opens the backend the options name (a path: the file store; a URI:
 * MongoDB; neither: memory) into store->backend and store->ops. */
static bool open_backend(resv_store_t *store, const resv_options_t *o, resv_error_t *err) {
  if (o->path && o->path[0] && o->uri && o->uri[0])
    return resv__fail(err, RESV_EINVALID, "path and uri: give one of them, not both");
  if (o->path && o->path[0]) {
    if (!store->database[0]) strcpy(store->database, "resv");
    store->backend = resv__file_open(o, store->stats, &store->ops, err);
  } else if (o->uri && o->uri[0]) {
    store->backend = resv__mongo_open(o, store->stats, store->database,
                                      sizeof store->database, &store->ops, err);
  } else {
    if (!store->database[0]) strcpy(store->database, "resv");
    store->backend = resv__memory_open(o, &store->ops, err);
  }
  return store->backend != NULL;
}

resv_store_t *resv_store_open(const resv_options_t *options, resv_error_t *err) {
  resv_options_t o = {0};
  if (options) o = *options;
  if (!check_options(&o, err)) return NULL;
  resv_store_t *store = calloc(1, sizeof *store);
  if (!store) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a store");
    return NULL;
  }
  if (!(store->stats = resv__stats_new(o.slow_ms))) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a store");
    goto fail;
  }
  if (!check_database(&o, store->database, sizeof store->database, err) ||
      !open_backend(store, &o, err))
    goto fail;
  if (!store->ops->runs_inline &&
      !(store->pool = resv__pool_new(o.threads, o.queue, err)))
    goto fail;
  init_rest(store, &o);
  return store;
fail:
  if (store->backend) store->ops->destroy(store->backend);
  resv__stats_free(store->stats);
  free(store);
  return NULL;
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
  if (resv__store_forked(store)) return; /* the threads live in the parent only */
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

void resv__store_teardown(resv_store_t *store) {
  resv_store_shutdown(store);
  resv__pool_free(store->pool);
  resv__store_free_types(store);
  store->ops->destroy(store->backend);
  pthread_mutex_destroy(&store->shutdown_mutex);
  pthread_mutex_destroy(&store->types_mutex);
  pthread_mutex_destroy(&store->pool_mutex);
  resv__stats_free(store->stats);
  free(store);
}

/* A reaper's work for resv_store_close: the teardown. */
static void reap_close(void *arg) { resv__store_teardown(arg); }

/* A reaper's work for resv_store_stop: shuts down, then lets go of its
 * reference; the last one tears the store down. */
static void reap_stop(void *arg) {
  resv_store_t *store = arg;
  resv_store_shutdown(store);
  if (atomic_fetch_sub(&store->refs, 1) == 0) resv__store_teardown(store);
}

void resv_store_close(resv_store_t *store) {
  if (!store) return;
  if (resv__store_forked(store)) {
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
  if (shut || !resv__reaper_start(reap_close, store))
    resv__store_teardown(store); /* without a thread to be had, here, waiting */
}

void resv_store_stop(resv_store_t *store) {
  if (!store) return;
  atomic_store(&store->closed, true); /* new calls answer closed from here */
  if (resv__store_forked(store) || !store->pool || atomic_exchange(&store->stopping, true)) return;
  atomic_fetch_add(&store->refs, 1);
  if (!resv__reaper_start(reap_stop, store)) {
    resv_store_shutdown(store); /* without a thread to be had, here, waiting */
    atomic_fetch_sub(&store->refs, 1);
  }
}

void resv_store_set_time(resv_store_t *store, int64_t ms) {
  atomic_store(&store->clock_ms, ms == RESV__SYSTEM_CLOCK ? RESV__SYSTEM_CLOCK + 1 : ms);
}

void resv_store_use_system_time(resv_store_t *store) {
  atomic_store(&store->clock_ms, RESV__SYSTEM_CLOCK);
}

int64_t resv_store_now(resv_store_t *store) {
  int64_t ms = atomic_load(&store->clock_ms);
  return ms == RESV__SYSTEM_CLOCK ? resv__realtime_ms() : ms;
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

bool resv__store_check_open(resv_store_t *store, resv_error_t *err) {
  if (resv__store_forked(store))
    return resv__fail(err, RESV_ECLOSED,
                      "the store was opened in process %d, before a fork(): "
                      "open a new store in this process", (int)store->pid);
  if (atomic_load(&store->closed)) return resv__fail(err, RESV_ECLOSED, "the store is closed");
  return true;
}

void resv__store_set_counting(resv_store_t *store, bool on) {
  atomic_store(&store->uncounted, !on);
}

bool resv_store_stats(resv_store_t *store, resv_stats_t *out, resv_error_t *err) {
  memset(out, 0, sizeof *out);
  if (resv__store_forked(store))
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
