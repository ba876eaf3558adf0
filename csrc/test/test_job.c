/* test_job.c: waiting for a job (job.c) and for an inbox (inbox.c), at the
 * edges of the timeout's range. A job here has no store: a helper thread
 * finishes it after a short sleep, so a wait that returns before that
 * without an answer is caught by the answer being missing. */
#include <stdint.h>
#include <unistd.h>

#include "tests.h"

static void *finish_later(void *arg) {
  resv_job_t *job = arg;
  usleep(100 * 1000);
  resv__answer_status(&job->answer, RESV_RESERVED, &job->error);
  resv__job_finish(job);
  resv__job_unref(job);
  return NULL;
}

/* A job (in inbox, which may be NULL) that a thread finishes in 100 ms. */
static resv_job_t *job_finished_later(resv_inbox_t *inbox, pthread_t *thread) {
  resv_job_t *job = resv__job_new(NULL, NULL, NULL, inbox, INT64_MAX, NULL);
  ck_assert_ptr_nonnull(job);
  atomic_fetch_add(&job->refs, 1); /* the finishing thread's */
  ck_assert_int_eq(pthread_create(thread, NULL, finish_later, job), 0);
  return job;
}

static const int64_t huge_timeouts[] = {INT64_MAX, INT64_MAX - 1, INT64_MIN, -1};

START_TEST(a_timeout_past_int64_waits_for_the_answer) {
  /* monotonic now + INT64_MAX overflowed: the wait returned false at once. */
  pthread_t thread;
  resv_job_t *job = job_finished_later(NULL, &thread);
  ck_assert_msg(resv_job_wait(job, huge_timeouts[_i]),
                "resv_job_wait(%lld) gave up before the answer",
                (long long)huge_timeouts[_i]);
  ck_assert_ptr_nonnull(resv_job_answer(job));
  ck_assert_int_eq(resv_job_answer(job)->status, RESV_RESERVED);
  pthread_join(thread, NULL);
  resv_job_destroy(job);
}
END_TEST

START_TEST(an_inbox_timeout_past_int64_waits_for_the_answer) {
  pthread_t thread;
  resv_inbox_t *inbox = resv_inbox_new(NULL);
  ck_assert_ptr_nonnull(inbox);
  resv_job_t *job = job_finished_later(inbox, &thread);
  ck_assert_msg(resv_inbox_wait(inbox, huge_timeouts[_i]),
                "resv_inbox_wait(%lld) gave up before the answer",
                (long long)huge_timeouts[_i]);
  ck_assert(resv_job_done(job));
  pthread_join(thread, NULL);
  resv_job_destroy(job);
  resv_inbox_destroy(inbox);
}
END_TEST

START_TEST(a_zero_timeout_does_not_wait) {
  resv_job_t *job = resv__job_new(NULL, NULL, NULL, NULL, INT64_MAX, NULL);
  ck_assert(!resv_job_wait(job, 0));
  resv__job_finish(job);
  ck_assert(resv_job_wait(job, 0));
  resv_job_destroy(job);
}
END_TEST

Suite *job_suite(void) {
  Suite *s = suite_create("job");
  TCase *tc = tcase_create("wait");
  tcase_set_timeout(tc, 30);
  int n = (int)(sizeof huge_timeouts / sizeof huge_timeouts[0]);
  tcase_add_loop_test(tc, a_timeout_past_int64_waits_for_the_answer, 0, n);
  tcase_add_loop_test(tc, an_inbox_timeout_past_int64_waits_for_the_answer, 0, n);
  tcase_add_test(tc, a_zero_timeout_does_not_wait);
  suite_add_tcase(s, tc);
  return s;
}
