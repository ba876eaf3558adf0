/* test_pool.c: the dispatcher and the inbox, with jobs that sleep or wait
 * on a latch instead of talking to MongoDB, so overlap, a full queue, a
 * passed deadline and a close with jobs in flight are each forced on
 * purpose. */
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "tests.h"

static atomic_int running, most_running, ran;

typedef struct latch {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  bool open;
} latch_t;

static latch_t gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};

static void latch_wait(latch_t *l) {
  pthread_mutex_lock(&l->mutex);
  while (!l->open) pthread_cond_wait(&l->cond, &l->mutex);
  pthread_mutex_unlock(&l->mutex);
}

static void latch_open(latch_t *l) {
  pthread_mutex_lock(&l->mutex);
  l->open = true;
  pthread_cond_broadcast(&l->cond);
  pthread_mutex_unlock(&l->mutex);
}

static void reset(void) {
  atomic_store(&running, 0);
  atomic_store(&most_running, 0);
  atomic_store(&ran, 0);
  gate.open = false;
}

/* Counts how many jobs run at once, sleeping 50 ms so they overlap. */
static void sleepy_work(resv_job_t *job) {
  int now = atomic_fetch_add(&running, 1) + 1;
  int most = atomic_load(&most_running);
  while (now > most && !atomic_compare_exchange_weak(&most_running, &most, now)) {}
  usleep(50 * 1000);
  atomic_fetch_sub(&running, 1);
  atomic_fetch_add(&ran, 1);
  resv__answer_status(&job->answer, RESV_RESERVED, &job->error);
}

static void gated_work(resv_job_t *job) {
  atomic_fetch_add(&ran, 1);
  latch_wait(&gate);
  resv__answer_status(&job->answer, RESV_RESERVED, &job->error);
}

static resv_job_t *new_job(resv__work_fn work, resv_inbox_t *inbox, int64_t timeout) {
  resv_job_t *job = resv__job_new(NULL, NULL, work, inbox, resv__monotonic_ms() + timeout, NULL);
  ck_assert_ptr_nonnull(job);
  return job;
}

START_TEST(waiting_jobs_overlap_up_to_the_thread_count) {
  reset();
  resv__pool_t *pool = resv__pool_new(4, 64, NULL);
  resv_job_t *jobs[12];
  for (int i = 0; i < 12; i++) {
    jobs[i] = new_job(sleepy_work, NULL, 10000);
    ck_assert(resv__pool_submit(pool, jobs[i], NULL));
  }
  for (int i = 0; i < 12; i++) {
    ck_assert(resv_job_wait(jobs[i], -1));
    ck_assert_int_eq(resv_job_answer(jobs[i])->status, RESV_RESERVED);
    resv_job_destroy(jobs[i]);
  }
  ck_assert_int_eq(atomic_load(&ran), 12);
  ck_assert_int_eq(atomic_load(&most_running), 4);
  resv__pool_free(pool);
}
END_TEST

START_TEST(a_full_queue_answers_busy_at_once) {
  reset();
  resv__pool_t *pool = resv__pool_new(1, 2, NULL);
  resv_job_t *first = new_job(gated_work, NULL, 10000);
  ck_assert(resv__pool_submit(pool, first, NULL));
  while (atomic_load(&ran) == 0) usleep(1000); /* the thread holds it */
  resv_job_t *queued[2] = {new_job(gated_work, NULL, 10000), new_job(gated_work, NULL, 10000)};
  ck_assert(resv__pool_submit(pool, queued[0], NULL));
  ck_assert(resv__pool_submit(pool, queued[1], NULL));
  resv_job_t *extra = new_job(gated_work, NULL, 10000);
  resv_error_t err;
  ck_assert(!resv__pool_submit(pool, extra, &err));
  ck_assert_int_eq(err.code, RESV_EBUSY);
  resv_job_destroy(extra);
  latch_open(&gate);
  resv_job_t *all[] = {first, queued[0], queued[1]};
  for (int i = 0; i < 3; i++) {
    ck_assert(resv_job_wait(all[i], -1));
    ck_assert_int_eq(resv_job_error(all[i])->code, RESV_OK);
    resv_job_destroy(all[i]);
  }
  resv__pool_free(pool);
}
END_TEST

START_TEST(a_job_past_its_deadline_times_out_without_running) {
  reset();
  resv__pool_t *pool = resv__pool_new(1, 8, NULL);
  resv_job_t *blocker = new_job(gated_work, NULL, 10000);
  ck_assert(resv__pool_submit(pool, blocker, NULL));
  resv_job_t *late = new_job(gated_work, NULL, 20);
  ck_assert(resv__pool_submit(pool, late, NULL));
  usleep(50 * 1000); /* its deadline passes while it waits in the queue */
  latch_open(&gate);
  ck_assert(resv_job_wait(late, -1));
  ck_assert_int_eq(resv_job_error(late)->code, RESV_ETIMEOUT);
  ck_assert_ptr_null(resv_job_answer(late));
  ck_assert(resv_job_wait(blocker, -1));
  ck_assert_int_eq(atomic_load(&ran), 1); /* only the blocker ran */
  resv_job_destroy(late);
  resv_job_destroy(blocker);
  resv__pool_free(pool);
}
END_TEST

static void *open_gate_soon(void *arg) {
  usleep(50 * 1000);
  latch_open(&gate);
  return arg;
}

START_TEST(shutdown_answers_every_job_and_joins) {
  reset();
  resv__pool_t *pool = resv__pool_new(1, 8, NULL);
  resv_job_t *running_job = new_job(gated_work, NULL, 10000);
  ck_assert(resv__pool_submit(pool, running_job, NULL));
  while (atomic_load(&ran) == 0) usleep(1000);
  resv_job_t *queued[3];
  for (int i = 0; i < 3; i++) {
    queued[i] = new_job(gated_work, NULL, 10000);
    ck_assert(resv__pool_submit(pool, queued[i], NULL));
  }
  pthread_t opener;
  pthread_create(&opener, NULL, open_gate_soon, NULL);
  resv__pool_shutdown(pool); /* returns once the running job has ended */
  pthread_join(opener, NULL);
  ck_assert(resv_job_done(running_job));
  ck_assert_int_eq(resv_job_error(running_job)->code, RESV_OK);
  for (int i = 0; i < 3; i++) {
    ck_assert(resv_job_done(queued[i]));
    ck_assert_int_eq(resv_job_error(queued[i])->code, RESV_ECLOSED);
    resv_job_destroy(queued[i]);
  }
  resv_job_t *after = new_job(gated_work, NULL, 10000);
  resv_error_t err;
  ck_assert(!resv__pool_submit(pool, after, &err));
  ck_assert_int_eq(err.code, RESV_ECLOSED);
  resv_job_destroy(after);
  resv_job_destroy(running_job);
  resv__pool_free(pool);
}
END_TEST

static bool readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, 0) == 1;
}

START_TEST(finished_jobs_arrive_in_the_inbox_and_wake_its_fd) {
  reset();
  resv_inbox_t *inbox = resv_inbox_new(NULL);
  resv__pool_t *pool = resv__pool_new(2, 16, NULL);
  ck_assert(!readable(resv_inbox_fd(inbox)));
  resv_job_t *jobs[6];
  for (int i = 0; i < 6; i++) {
    jobs[i] = new_job(sleepy_work, inbox, 10000);
    ck_assert(resv__pool_submit(pool, jobs[i], NULL));
  }
  size_t got = 0;
  resv_job_t *drained[4];
  while (got < 6) {
    ck_assert(resv_inbox_wait(inbox, 10000));
    ck_assert(readable(resv_inbox_fd(inbox)));
    size_t n = resv_inbox_drain(inbox, drained, 4);
    ck_assert_uint_ge(n, 1);
    for (size_t i = 0; i < n; i++) {
      ck_assert(resv_job_done(drained[i]));
      resv_job_destroy(drained[i]);
    }
    got += n;
  }
  ck_assert(!readable(resv_inbox_fd(inbox)));
  ck_assert_uint_eq(resv_inbox_drain(inbox, drained, 4), 0);
  ck_assert(!resv_inbox_wait(inbox, 0));
  resv__pool_free(pool);
  resv_inbox_destroy(inbox);
}
END_TEST

START_TEST(a_job_destroyed_while_running_never_reaches_the_inbox) {
  reset();
  resv_inbox_t *inbox = resv_inbox_new(NULL);
  resv__pool_t *pool = resv__pool_new(1, 4, NULL);
  resv_job_t *job = new_job(gated_work, inbox, 10000);
  ck_assert(resv__pool_submit(pool, job, NULL));
  while (atomic_load(&ran) == 0) usleep(1000);
  resv_job_destroy(job); /* the worker still holds it */
  latch_open(&gate);
  resv__pool_free(pool); /* joins: the worker finished and freed it */
  resv_job_t *drained[1];
  ck_assert(!readable(resv_inbox_fd(inbox)));
  ck_assert_uint_eq(resv_inbox_drain(inbox, drained, 1), 0);
  resv_inbox_destroy(inbox);
}
END_TEST

START_TEST(an_inbox_destroyed_before_its_jobs_lives_until_they_end) {
  reset();
  resv_inbox_t *inbox = resv_inbox_new(NULL);
  resv__pool_t *pool = resv__pool_new(1, 4, NULL);
  resv_job_t *job = new_job(gated_work, inbox, 10000);
  ck_assert(resv__pool_submit(pool, job, NULL));
  while (atomic_load(&ran) == 0) usleep(1000);
  resv_inbox_destroy(inbox); /* the job still holds the inbox */
  latch_open(&gate);
  ck_assert(resv_job_wait(job, -1));
  ck_assert_int_eq(resv_job_answer(job)->status, RESV_RESERVED);
  resv_job_destroy(job); /* takes it out of the inbox, frees the inbox */
  resv__pool_free(pool);
}
END_TEST

START_TEST(a_finished_job_destroyed_undrained_leaves_the_inbox) {
  reset();
  resv_inbox_t *inbox = resv_inbox_new(NULL);
  resv__pool_t *pool = resv__pool_new(1, 4, NULL);
  resv_job_t *job = new_job(sleepy_work, inbox, 10000);
  ck_assert(resv__pool_submit(pool, job, NULL));
  ck_assert(resv_inbox_wait(inbox, 10000));
  resv_job_destroy(job);
  ck_assert(!readable(resv_inbox_fd(inbox)));
  resv_job_t *drained[1];
  ck_assert_uint_eq(resv_inbox_drain(inbox, drained, 1), 0);
  resv__pool_free(pool);
  resv_inbox_destroy(inbox);
}
END_TEST

Suite *pool_suite(void) {
  const TTest *tests[] = {
      waiting_jobs_overlap_up_to_the_thread_count, a_full_queue_answers_busy_at_once,
      a_job_past_its_deadline_times_out_without_running, shutdown_answers_every_job_and_joins,
      finished_jobs_arrive_in_the_inbox_and_wake_its_fd,
      a_job_destroyed_while_running_never_reaches_the_inbox,
      an_inbox_destroyed_before_its_jobs_lives_until_they_end,
      a_finished_job_destroyed_undrained_leaves_the_inbox, NULL};
  return test_suite("pool", "pool", 30, NULL, NULL, tests);
}
