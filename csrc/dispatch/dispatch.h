/* dispatch.h: the dispatcher (pool.c), the jobs it runs (job.c) and the
 * inboxes finished jobs land in (inbox.c). It runs a job's work function
 * and counts a submitted call into the counters the job carries; it knows
 * no store and no backend. */
#ifndef RESV_DISPATCH_H
#define RESV_DISPATCH_H

#include "base.h"

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
  /* A submitted call: where it is counted when it finishes (NULL: not
   * counted), and when it started. */
  resv__stats_t *stats;
  int64_t started_ns;
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

#endif /* RESV_DISPATCH_H */
