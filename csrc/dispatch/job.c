/* job.c: a submitted call, from submit to destroy.
 *
 * A job is one allocation: the struct, then a copy of the request's keys
 * array (the *_all ops) and a NUL-terminated copy of each of the request's
 * strings (the caller's buffers may be gone by the time a worker runs
 * it). It is
 * reference counted because two parties hold it: the caller, until
 * resv_job_destroy, and the dispatcher, until the worker has finished it.
 * Either may let go first; the last one frees it.
 *
 * Finishing publishes the answer with a release store of `done` (so a
 * caller that sees done == true sees the answer), wakes threads blocked in
 * resv_job_wait, and appends the job to its inbox unless the caller already
 * destroyed it. */
#include "dispatch.h"

#include <stdlib.h>
#include <string.h>

/* The copies are NUL-terminated (validation rules out NUL bytes inside),
 * so a backend may hand them to APIs that want C strings. */
static size_t key_strings_size(const resv_key_t *k) {
  return k->tenant.len + k->ns.len + k->key.len + 3;
}

/* A request's keys array and strings; a request of several keys is
 * validated before it is copied (its keys are there and few). */
static size_t request_copy_size(const resv_request_t *r) {
  size_t n = key_strings_size(&r->key) + r->owner.tenant.len + r->owner.id.len +
             r->attempt.len + 3;
  if (!resv__op_is_all(r->op) || !r->keys) return n;
  n += r->nkeys * sizeof(resv_key_t);
  for (size_t i = 0; i < r->nkeys; i++) n += key_strings_size(&r->keys[i]);
  return n;
}

static void copy_str(char **cursor, resv_str_t *dst, const resv_str_t *src) {
  dst->ptr = *cursor;
  dst->len = src->len;
  if (src->len) memcpy(*cursor, src->ptr, src->len);
  (*cursor)[src->len] = '\0';
  *cursor += src->len + 1;
}

static void copy_key(char **cursor, resv_key_t *dst, const resv_key_t *src) {
  copy_str(cursor, &dst->tenant, &src->tenant);
  copy_str(cursor, &dst->ns, &src->ns);
  copy_str(cursor, &dst->key, &src->key);
}

static void copy_request(resv_job_t *job, const resv_request_t *request) {
  char *cursor = job->strings_;
  job->request = *request;
  if (resv__op_is_all(request->op) && request->keys) {
    resv_key_t *keys = (resv_key_t *)(void *)cursor;
    cursor += request->nkeys * sizeof *keys;
    for (size_t i = 0; i < request->nkeys; i++) copy_key(&cursor, &keys[i], &request->keys[i]);
    job->request.keys = keys;
  } else {
    job->request.keys = NULL;
    job->request.nkeys = 0;
  }
  copy_key(&cursor, &job->request.key, &request->key);
  copy_str(&cursor, &job->request.owner.tenant, &request->owner.tenant);
  copy_str(&cursor, &job->request.owner.id, &request->owner.id);
  copy_str(&cursor, &job->request.attempt, &request->attempt);
}

resv_job_t *resv__job_new(resv_type_t *type, const resv_request_t *request,
                          resv__work_fn work, resv_inbox_t *inbox,
                          int64_t deadline, resv_error_t *err) {
  size_t extra = request ? request_copy_size(request) : 0;
  resv_job_t *job = calloc(1, sizeof *job + extra);
  if (!job) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a job");
    return NULL;
  }
  if (request) copy_request(job, request);
  job->type = type;
  job->work = work;
  job->deadline = deadline;
  job->inbox = inbox;
  if (inbox) resv__inbox_ref(inbox);
  job->generation = resv__generation_start();
  atomic_init(&job->refs, 1);
  atomic_init(&job->done, false);
  pthread_mutex_init(&job->mutex, NULL);
  resv__cond_init(&job->cond);
  return job;
}

void resv__job_finish(resv_job_t *job) {
  /* Counted before it is done: the counters may go once a waiter sees it. */
  if (job->stats) {
    bool ok = job->error.code == RESV_OK;
    resv__stats_call(job->stats, job->request.op, ok,
                     ok ? job->answer.status : job->error.code,
                     resv__now_ns() - job->started_ns);
  }
  pthread_mutex_lock(&job->mutex);
  atomic_store_explicit(&job->done, true, memory_order_release);
  pthread_mutex_unlock(&job->mutex);
  /* Broadcast after the unlock, so a woken waiter does not run straight
   * into the mutex we hold and sleep again on it. The job stays alive:
   * whoever finishes it holds a reference. */
  pthread_cond_broadcast(&job->cond);
  if (job->inbox) resv__inbox_push(job->inbox, job);
}

void resv__job_fail(resv_job_t *job, int32_t code, const char *message) {
  resv__fail(&job->error, code, "%s", message);
  resv__job_finish(job);
}

void resv__job_unref(resv_job_t *job) {
  if (atomic_fetch_sub_explicit(&job->refs, 1, memory_order_acq_rel) != 1) return;
  if (job->inbox) resv__inbox_unref(job->inbox);
  resv_answer_clear(&job->answer);
  pthread_cond_destroy(&job->cond);
  pthread_mutex_destroy(&job->mutex);
  free(job);
}

bool resv_job_done(const resv_job_t *job) {
  return atomic_load_explicit(&job->done, memory_order_acquire);
}

bool resv_job_wait(resv_job_t *job, int64_t timeout_ms) {
  if (resv_job_done(job)) return true;
  /* A negative timeout waits without limit, and so does one whose
   * deadline would be past int64 (INT64_MAX: some 292 million years). */
  struct timespec until;
  int64_t deadline;
  bool limited = timeout_ms >= 0 &&
                 resv__add_ms_checked(resv__monotonic_ms(), timeout_ms, &deadline);
  if (limited) resv__deadline_timespec(deadline, &until);
  pthread_mutex_lock(&job->mutex);
  while (!atomic_load_explicit(&job->done, memory_order_acquire)) {
    if (!limited) {
      pthread_cond_wait(&job->cond, &job->mutex);
    } else if (pthread_cond_timedwait(&job->cond, &job->mutex, &until) != 0) {
      break;
    }
  }
  pthread_mutex_unlock(&job->mutex);
  return resv_job_done(job);
}

const resv_error_t *resv_job_error(const resv_job_t *job) {
  return resv_job_done(job) ? &job->error : NULL;
}

const resv_answer_t *resv_job_answer(const resv_job_t *job) {
  if (!resv_job_done(job) || job->error.code != RESV_OK) return NULL;
  return &job->answer;
}

int64_t resv_job_deadline(const resv_job_t *job) {
  return resv__add_ms_sat(job->deadline, RESV__DEADLINE_GRACE_MS);
}

resv_job_t *resv_job_ref(resv_job_t *job) {
  atomic_fetch_add_explicit(&job->refs, 1, memory_order_relaxed);
  return job;
}

void resv_job_unref(resv_job_t *job) {
  if (job) resv__job_unref(job);
}

void resv_job_destroy(resv_job_t *job) {
  /* In a child forked after the job was made, its inbox's mutex may be
   * held by a thread that no longer exists: the parent's job is left as
   * it is. */
  if (!job || job->generation != resv__generation()) return;
  if (job->inbox) resv__inbox_remove(job->inbox, job);
  resv__job_unref(job);
}
