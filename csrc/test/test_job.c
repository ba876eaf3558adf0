/* test_job.c: waiting for a job (job.c) and for an inbox (inbox.c), at the
 * edges of the timeout's range. A job here has no store: a helper thread
 * finishes it after a short sleep, so a wait that returns before that
 * without an answer is caught by the answer being missing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

/* A job of several keys owns copies of the keys and their strings: the
 * caller's array and buffers may be gone when a worker runs it. */
START_TEST(a_job_copies_the_keys_of_a_request) {
  char *buf[3];
  resv_key_t *keys = calloc(3, sizeof *keys);
  for (int i = 0; i < 3; i++) {
    buf[i] = strdup("key-0");
    buf[i][4] = (char)('0' + i);
    keys[i] = (resv_key_t){resv_cstr("t"), resv_cstr("email"), resv_cstr(buf[i])};
  }
  resv_request_t r = {.op = RESV_OP_RESERVE_ALL, .owner = {resv_cstr(""), resv_cstr("o")},
                      .attempt = resv_cstr("a"), .ttl_ms = 10, .keys = keys, .nkeys = 3};
  resv_job_t *job = resv__job_new(NULL, &r, NULL, NULL, INT64_MAX, NULL);
  for (int i = 0; i < 3; i++) memset(buf[i], 'x', 5), free(buf[i]);
  memset(keys, 0, 3 * sizeof *keys);
  free(keys);
  ck_assert_uint_eq(job->request.nkeys, 3);
  for (int i = 0; i < 3; i++) {
    char want[] = "key-0";
    want[4] = (char)('0' + i);
    ck_assert_str_eq(job->request.keys[i].key.ptr, want);
    ck_assert_str_eq(job->request.keys[i].ns.ptr, "email");
    ck_assert_str_eq(job->request.keys[i].tenant.ptr, "t");
  }
  ck_assert_str_eq(job->request.owner.id.ptr, "o");
  ck_assert_str_eq(job->request.attempt.ptr, "a");
  resv__job_finish(job);
  resv_job_destroy(job);
}
END_TEST

/* A single-key request's stray keys pointer is never copied nor kept. */
START_TEST(a_single_key_job_keeps_no_keys) {
  resv_key_t k = {resv_cstr(""), resv_cstr("n"), resv_cstr("k")};
  resv_request_t r = {.op = RESV_OP_GET, .key = k, .keys = &k, .nkeys = 1};
  resv_job_t *job = resv__job_new(NULL, &r, NULL, NULL, INT64_MAX, NULL);
  ck_assert_ptr_null(job->request.keys);
  ck_assert_uint_eq(job->request.nkeys, 0);
  ck_assert_str_eq(job->request.key.key.ptr, "k");
  resv__job_finish(job);
  resv_job_destroy(job);
}
END_TEST

/* An answer of several keys owns one answer per key; reused for a single
 * key it lists none; cleared it frees them all (ASan and valgrind see). */
START_TEST(an_answer_of_several_keys_owns_each_answer) {
  resv_answer_t a = {0};
  resv_error_t err;
  resv_str_t owner = resv_cstr("o2"), hold = resv_cstr("a1");
  ck_assert(resv__answer_keys(&a, RESV_CONFLICT, 2, &err));
  ck_assert(resv__answer_set(resv__answer_key(&a, 0), RESV_RESERVED, RESV_STATE_PENDING, 5, 0,
                             NULL, &owner, &hold, 1, &err));
  ck_assert(resv__answer_set(resv__answer_key(&a, 1), RESV_CONFLICT, RESV_STATE_CONFIRMED, 0, 3,
                             NULL, &owner, NULL, 0, &err));
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_uint_eq(a.nkeys, 2);
  ck_assert_int_eq(a.keys[0].status, RESV_RESERVED);
  ck_assert_str_eq(a.keys[0].holds[0].ptr, "a1");
  ck_assert_int_eq(a.keys[1].version, 3);
  ck_assert_str_eq(a.keys[1].owner_id.ptr, "o2");
  ck_assert(resv__answer_keys(&a, RESV_RESERVED, 1, &err));
  ck_assert_uint_eq(a.nkeys, 1);
  ck_assert_int_eq(a.keys[0].status, 0);
  ck_assert_uint_eq(a.keys[0].nholds, 0);
  ck_assert(resv__answer_status(&a, RESV_ABSENT, &err));
  ck_assert_ptr_null(a.keys);
  ck_assert_uint_eq(a.nkeys, 0);
  resv_answer_clear(&a);
}
END_TEST

Suite *job_suite(void) {
  int n = (int)(sizeof huge_timeouts / sizeof huge_timeouts[0]);
  const test_entry_t tests[] = {
      {a_timeout_past_int64_waits_for_the_answer, 0, n},
      {an_inbox_timeout_past_int64_waits_for_the_answer, 0, n},
      {a_zero_timeout_does_not_wait, 0, 0},
      {a_job_copies_the_keys_of_a_request, 0, 0},
      {a_single_key_job_keeps_no_keys, 0, 0},
      {an_answer_of_several_keys_owns_each_answer, 0, 0},
      {NULL, 0, 0}};
  return test_suite_loops("job", "wait", 30, NULL, NULL, tests);
}
