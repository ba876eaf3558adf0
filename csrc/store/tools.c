/* tools.c: the calls of the tools (resv_store_types, resv_type_put,
 * resv_type_scan), run to their end whatever the deadline. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

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
    if (resv__store_check_open(store, &job->error)) work(job);
    atomic_fetch_sub(&store->active, 1);
  } else if (resv__store_check_open(store, &job->error) &&
             resv__pool_submit(store->pool, job, &job->error)) {
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

/* ---- scans (docs/design.md section 13; base/scan.c fills the pages) -- */

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
