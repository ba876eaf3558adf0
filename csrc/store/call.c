/* call.c: the calls: resv_call waits for the answer, resv_submit returns a
 * job, resv_try_call answers only when it can without waiting; then the
 * same with their strings as arguments (for the bindings), and one-line
 * wrappers over resv_call for C callers, who would rather pass arguments
 * than fill a resv_request_t.
 *
 * Every request is validated on the caller's thread, the clock is read
 * once per call and each call has its deadline. For an inline store
 * (the memory store, the file store) a call runs on the caller's thread;
 * so does resv_call on a backend with an execute_blocking op (MongoDB),
 * under the call's deadline; the rest go to the dispatcher. Inline calls are counted in store->active
 * so that closing a store waits for the ones in progress on other threads
 * before it frees the backend. */
#include "internal.h"
#include "stats.h"

#include <string.h>

/* The backend's call of a validated request, at the store's clock. */
static bool execute(resv_store_t *store, resv_type_t *type, const resv_request_t *req,
                    int64_t deadline, resv_answer_t *answer, resv_error_t *err) {
  if (resv__op_is_all(req->op) && !store->ops->several_keys)
    return resv__fail(err, RESV_EINVALID, "keys: the %s store takes one key a call",
                      store->ops->name);
  return store->ops->execute(store->backend, type, req, resv_store_now(store), deadline,
                             answer, err);
}

/* How an inline call is counted: not at all (a job counts it when it
 * finishes), or as a call: with its latency, or on a sampled store its
 * answer alone but for the calls resv__stats_sample picks to time. */
typedef enum { COUNT_NONE, COUNT_CALL } count_t;

/* Whether a counted call is timed: one in RESV__SAMPLE_EVERY on a sampled
 * store (the memory store, the file store with sync = "process"), but
 * every call that may wait (a file store's call that would wait for the
 * write gate rather than hand the call off), whose time is what a
 * latency is for. */
static bool timed_call(const resv_store_t *store, int64_t deadline) {
  if (!store->ops->sampled || (store->ops->hands_off && deadline != RESV__DEADLINE_NO_WAIT))
    return true;
  return resv__stats_sample();
}

/* Runs a call on the caller's thread; deadline is RESV__DEADLINE_MAY_WAIT
 * or RESV__DEADLINE_NO_WAIT (an inline backend waits on nothing else).
 * With COUNT_CALL the call is counted before it lets go of the store (a
 * close waiting for it frees the counters next), unless it would block
 * (RESV__EWOULDBLOCK: it is the dispatcher's then). */
static bool run_inline(resv_type_t *type, const resv_request_t *req, int64_t deadline,
                       resv_answer_t *answer, resv_error_t *err, count_t count) {
  resv_store_t *store = type->store;
  if (count == COUNT_CALL && atomic_load_explicit(&store->uncounted, memory_order_relaxed))
    count = COUNT_NONE;
  bool timed = count == COUNT_CALL && timed_call(store, deadline);
  int64_t started = timed ? resv__now_ns() : 0;
  atomic_fetch_add(&store->active, 1);
  bool ok = resv__store_check_open(store, err) &&
            execute(store, type, req, deadline, answer, err);
  if (count == COUNT_CALL && (ok || err->code != RESV__EWOULDBLOCK)) {
    int32_t code = ok ? answer->status : err->code;
    if (timed)
      resv__stats_call(store->stats, req->op, ok, code, resv__now_ns() - started);
    else if (ok)
      resv__stats_answered(store->stats, req->op, code);
    else
      resv__stats_answer(store->stats, req->op, false, code);
  }
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
  job->stats = store->stats;
  job->started_ns = resv__now_ns();
  if (!valid) job->error = invalid;
  if (!valid || !resv__store_check_open(store, &job->error)) {
    resv__job_finish(job);
    return job;
  }
  if (store->ops->runs_inline) {
    /* With a dispatcher to hand it to, the call must not wait here. */
    int64_t deadline = store->ops->hands_off ? RESV__DEADLINE_NO_WAIT : RESV__DEADLINE_MAY_WAIT;
    if (run_inline(type, &job->request, deadline, &job->answer, &job->error, COUNT_NONE) ||
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
  if (!resv__validate_request(req, &store->limits, err)) {
    resv__stats_call(store->stats, req ? req->op : 0, false, err->code, 0);
    return false;
  }
  bool ok = run_inline(type, req, store->ops->hands_off ? RESV__DEADLINE_NO_WAIT
                                                        : RESV__DEADLINE_MAY_WAIT,
                       answer, err, COUNT_CALL);
  if (!ok && err->code == RESV__EWOULDBLOCK) resv__error_clear(err);
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
  bool ok = resv__store_check_open(store, err) &&
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
  if (store->ops->execute_blocking &&
      (store->ops->several_keys || !resv__op_is_all(req->op))) {
    if (call_blocking(type, req, answer, err)) return true;
    if (err->code != RESV__EWOULDBLOCK) return false;
    resv__error_clear(err); /* the dispatcher's, below */
  } else if (store->ops->runs_inline || store->ops->blocking_inline) {
    return run_inline(type, req, RESV__DEADLINE_MAY_WAIT, answer, err, COUNT_CALL);
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

resv_str_t resv_cstr(const char *s) {
  resv_str_t out = {s ? s : "", s ? strlen(s) : 0};
  return out;
}

bool resv_reserve(resv_type_t *type, const resv_key_t *key,
                  const resv_owner_t *owner, resv_str_t attempt,
                  int64_t ttl_ms, resv_answer_t *answer, resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = *key, .owner = *owner,
                      .attempt = attempt, .ttl_ms = ttl_ms};
  return resv_call(type, &r, answer, err);
}

bool resv_confirm(resv_type_t *type, const resv_key_t *key,
                  const resv_owner_t *owner, int64_t version,
                  resv_answer_t *answer, resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_CONFIRM, .key = *key, .owner = *owner,
                      .version = version};
  return resv_call(type, &r, answer, err);
}

bool resv_abandon(resv_type_t *type, const resv_key_t *key,
                  const resv_owner_t *owner, resv_str_t attempt,
                  resv_answer_t *answer, resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_ABANDON, .key = *key, .owner = *owner,
                      .attempt = attempt};
  return resv_call(type, &r, answer, err);
}

bool resv_release(resv_type_t *type, const resv_key_t *key,
                  const resv_owner_t *owner, resv_answer_t *answer,
                  resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_RELEASE, .key = *key, .owner = *owner};
  return resv_call(type, &r, answer, err);
}

bool resv_get(resv_type_t *type, const resv_key_t *key, resv_answer_t *answer,
              resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_GET, .key = *key};
  return resv_call(type, &r, answer, err);
}

bool resv_sweep(resv_type_t *type, resv_answer_t *answer, resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_SWEEP};
  return resv_call(type, &r, answer, err);
}
