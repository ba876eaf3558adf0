/* pool.c: the dispatcher, a fixed pool of threads over a bounded queue.
 *
 * The shape is libuv's threadpool: one mutex, one condition variable, an
 * intrusive FIFO of jobs. The work runs outside the lock, so a job blocked
 * on the network holds up nobody but its own thread. The queue is bounded:
 * a submit that finds it full fails at once with RESV_EBUSY, so a host under
 * overload sheds calls instead of growing without limit. A job that waited
 * in the queue past its deadline is answered RESV_ETIMEOUT without running:
 * nobody is waiting for it any more, and running it could reserve a key its
 * caller was already told it did not get.
 *
 * Shutdown answers the queued jobs RESV_ECLOSED, lets the running ones end
 * (the MongoDB calls are bounded by their socket timeouts) and joins. */
#include "dispatch.h"

#include <stdlib.h>
#include <string.h>

struct resv__pool {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  resv_job_t *head;
  resv_job_t *tail;
  int queued;
  int running;
  int capacity;
  bool stopping;
  bool joined;
  int nthreads;
  pthread_t threads[];
};

static resv_job_t *pop_locked(resv__pool_t *pool) {
  resv_job_t *job = pool->head;
  if (job) {
    pool->head = job->next;
    if (!pool->head) pool->tail = NULL;
    job->next = NULL;
    pool->queued--;
  }
  return job;
}

static void run_job(resv_job_t *job) {
  if (resv__monotonic_ms() >= job->deadline) {
    resv__fail(&job->error, RESV_ETIMEOUT,
               "the call's deadline passed while it waited for a thread");
  } else {
    job->work(job);
  }
  resv__job_finish(job);
  resv__job_unref(job);
}

static void *worker_main(void *arg) {
  resv__pool_t *pool = arg;
  pthread_mutex_lock(&pool->mutex);
  for (;;) {
    while (!pool->head && !pool->stopping) pthread_cond_wait(&pool->cond, &pool->mutex);
    resv_job_t *job = pop_locked(pool);
    if (!job) break; /* stopping, and nothing left */
    pool->running++;
    pthread_mutex_unlock(&pool->mutex);
    run_job(job);
    pthread_mutex_lock(&pool->mutex);
    pool->running--;
  }
  pthread_mutex_unlock(&pool->mutex);
  return NULL;
}

resv__pool_t *resv__pool_new(int threads, int queue, resv_error_t *err) {
  resv__pool_t *pool = calloc(1, sizeof *pool + (size_t)threads * sizeof(pthread_t));
  if (!pool) {
    resv__fail(err, RESV_ENOMEM, "out of memory for the dispatcher");
    return NULL;
  }
  pthread_mutex_init(&pool->mutex, NULL);
  pthread_cond_init(&pool->cond, NULL);
  pool->capacity = queue;
  for (int i = 0; i < threads; i++) {
    int rc = resv__thread_start(&pool->threads[i], worker_main, pool);
    if (rc != 0) {
      resv__fail(err, RESV_ENOMEM, "cannot start dispatcher thread %d: %s", i, strerror(rc));
      resv__pool_shutdown(pool);
      resv__pool_free(pool);
      return NULL;
    }
    pool->nthreads = i + 1;
  }
  return pool;
}

bool resv__pool_submit(resv__pool_t *pool, resv_job_t *job, resv_error_t *err) {
  pthread_mutex_lock(&pool->mutex);
  if (pool->stopping) {
    pthread_mutex_unlock(&pool->mutex);
    return resv__fail(err, RESV_ECLOSED, "the store is closed");
  }
  if (pool->queued >= pool->capacity) {
    int capacity = pool->capacity;
    pthread_mutex_unlock(&pool->mutex);
    return resv__fail(err, RESV_EBUSY, "the dispatcher's queue is full (%d jobs)", capacity);
  }
  atomic_fetch_add_explicit(&job->refs, 1, memory_order_relaxed);
  job->next = NULL;
  if (pool->tail) pool->tail->next = job; else pool->head = job;
  pool->tail = job;
  pool->queued++;
  pthread_mutex_unlock(&pool->mutex);
  /* Signalled after the unlock, so the woken worker does not run straight
   * into the mutex we hold and sleep again on it. */
  pthread_cond_signal(&pool->cond);
  return true;
}

void resv__pool_shutdown(resv__pool_t *pool) {
  if (!pool) return;
  pthread_mutex_lock(&pool->mutex);
  if (pool->joined) {
    pthread_mutex_unlock(&pool->mutex);
    return;
  }
  pool->stopping = true;
  resv_job_t *queued = pool->head;
  pool->head = pool->tail = NULL;
  pool->queued = 0;
  pthread_cond_broadcast(&pool->cond);
  pthread_mutex_unlock(&pool->mutex);

  while (queued) {
    resv_job_t *next = queued->next;
    queued->next = NULL;
    resv__job_fail(queued, RESV_ECLOSED, "the store was closed before the call ran");
    resv__job_unref(queued);
    queued = next;
  }
  for (int i = 0; i < pool->nthreads; i++) pthread_join(pool->threads[i], NULL);
  pthread_mutex_lock(&pool->mutex);
  pool->joined = true;
  pthread_mutex_unlock(&pool->mutex);
}

void resv__pool_free(resv__pool_t *pool) {
  if (!pool) return;
  resv__pool_shutdown(pool);
  pthread_cond_destroy(&pool->cond);
  pthread_mutex_destroy(&pool->mutex);
  free(pool);
}

void resv__pool_load(resv__pool_t *pool, int64_t *waiting, int64_t *running) {
  *waiting = *running = 0;
  if (!pool) return;
  pthread_mutex_lock(&pool->mutex);
  *waiting = pool->queued;
  *running = pool->running;
  pthread_mutex_unlock(&pool->mutex);
}
