/* test_stats.c: resv_store_stats (docs/design.md section 13).
 *
 * Each call is counted once, by op and status or by op and error code,
 * with its latency in a cumulative histogram whose +Inf bucket counts
 * every call; the embedded stores count their live entries and bytes;
 * MongoDB counts duplicate-key retries, failed set-ups, slow calls and
 * the jobs waiting and running (through the emulator's fail points). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"

static resv_stats_t stats_of(resv_store_t *s) {
  resv_stats_t st;
  resv_error_t err;
  ck_assert_msg(resv_store_stats(s, &st, &err), "stats: %s", err.message);
  return st;
}

static uint64_t total_of(const resv_stats_t *st, int op) {
  uint64_t n = 0;
  for (int k = 0; k < RESV_STATS_STATUSES; k++) n += st->calls[op][k];
  for (int k = 0; k < RESV_STATS_CODES; k++) n += st->errors[op][k];
  return n;
}

/* The histogram of every op is cumulative and its +Inf bucket is the
 * op's number of calls; on a sampled store the calls it timed,
 * one in RESV__SAMPLE_EVERY of each thread's calls (of any op). */
static void check_histograms(const resv_stats_t *st, bool sampled) {
  for (int op = 0; op < RESV_STATS_OPS; op++) {
    for (int b = 1; b < RESV_STATS_BUCKETS; b++)
      ck_assert_uint_ge(st->latency[op][b], st->latency[op][b - 1]);
    uint64_t observed = st->latency[op][RESV_STATS_BUCKETS - 1];
    if (sampled) /* a thread's count runs across ops and stores */
      ck_assert_uint_le(observed, total_of(st, op));
    else
      ck_assert_uint_eq(observed, total_of(st, op));
  }
}

START_TEST(test_bounds_rise_to_infinity) {
  for (int i = 1; i < RESV_STATS_BUCKETS; i++)
    ck_assert(resv_stats_bound(i) > resv_stats_bound(i - 1));
  ck_assert(resv_stats_bound(0) > 0);
  ck_assert(isinf(resv_stats_bound(RESV_STATS_BUCKETS - 1)));
  ck_assert(resv_stats_bound(RESV_STATS_BUCKETS) == 0);
  ck_assert(resv_stats_bound(-1) == 0);
}
END_TEST

START_TEST(test_memory_store_counts_each_call_once_by_status_and_code) {
  resv_store_t *s = test_open(NULL);
  resv_type_t *t = test_fresh_type(s, "stats");
  resv_answer_t a = {0};
  resv_error_t err;
  resv_stats_t st = stats_of(s);
  ck_assert_int_eq(st.entries, 0);
  ck_assert_int_eq(st.slow_ms, 100);
  test_reserve(t, "ann", "o", "a", 60000, &a);
  test_reserve(t, "ann", "o", "b", 60000, &a);
  test_reserve(t, "ann", "p", "c", 60000, &a); /* conflict */
  test_confirm(t, "bob", "o", 1, &a);
  test_get(t, "nobody", &a);
  test_get(t, "ann", &a);
  resv_request_t bad = {.op = RESV_OP_RESERVE, .key = test_key("", "k"),
                        .owner = test_owner("", "o"), .attempt = resv_cstr("a"),
                        .ttl_ms = 10};
  ck_assert(!resv_call(t, &bad, &a, &err)); /* invalid: empty namespace */
  ck_assert(!resv_call(t, &bad, &a, NULL)); /* counted without an err too */
  resv_request_t sweep = {.op = RESV_OP_SWEEP};
  resv_job_t *job = resv_submit(t, &sweep, NULL, NULL); /* inline: done at once */
  ck_assert(resv_job_done(job));
  resv_job_destroy(job);
  st = stats_of(s);
  ck_assert_uint_eq(st.calls[RESV_OP_RESERVE][RESV_RESERVED], 2);
  ck_assert_uint_eq(st.calls[RESV_OP_RESERVE][RESV_CONFLICT], 1);
  ck_assert_uint_eq(st.calls[RESV_OP_CONFIRM][RESV_CONFIRMED], 1);
  ck_assert_uint_eq(st.calls[RESV_OP_GET][RESV_ABSENT], 1);
  ck_assert_uint_eq(st.calls[RESV_OP_GET][RESV_PENDING], 1);
  ck_assert_uint_eq(st.calls[RESV_OP_SWEEP][RESV_SWEPT], 1);
  ck_assert_uint_eq(st.errors[RESV_OP_RESERVE][RESV_EINVALID], 2);
  ck_assert_uint_eq(total_of(&st, RESV_OP_RESERVE), 5);
  ck_assert_uint_eq(total_of(&st, RESV_OP_ABANDON), 0);
  check_histograms(&st, true);
  ck_assert(st.latency_sum[RESV_OP_RESERVE] >= 0);
  ck_assert_int_eq(st.entries, 2);
  ck_assert_int_gt(st.bytes, 0);
  ck_assert_int_eq(st.jobs_waiting, 0);
  ck_assert_int_eq(st.jobs_running, 0);
  ck_assert_uint_eq(st.duplicate_key_retries, 0);
  /* A release takes its entry and its bytes away. */
  int64_t bytes = st.bytes;
  test_release(t, "bob", "o", &a);
  st = stats_of(s);
  ck_assert_int_eq(st.entries, 1);
  ck_assert_int_lt(st.bytes, bytes);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

enum { THREADS = 24, CALLS = 2000 }; /* more threads than the store's slots */

/* CALLS gets of a key nobody holds. */
static void *get_many(void *p) {
  resv_type_t *t = p;
  resv_answer_t a = {0};
  for (int i = 0; i < CALLS; i++) test_get(t, "nobody", &a);
  resv_answer_clear(&a);
  return NULL;
}

START_TEST(test_calls_on_many_threads_all_count) {
  resv_store_t *s = test_open(NULL);
  resv_type_t *t = test_fresh_type(s, "threads");
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    ck_assert_int_eq(pthread_create(&th[i], NULL, get_many, t), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  resv_stats_t st = stats_of(s);
  ck_assert_uint_eq(st.calls[RESV_OP_GET][RESV_ABSENT], (uint64_t)THREADS * CALLS);
  check_histograms(&st, true);
  /* Each thread timed one call in RESV__SAMPLE_EVERY of its own. */
  ck_assert_uint_eq(st.latency[RESV_OP_GET][RESV_STATS_BUCKETS - 1],
                    (uint64_t)THREADS * (CALLS / RESV__SAMPLE_EVERY));
  resv_store_close(s);
}
END_TEST

START_TEST(test_file_store_counts_entries_and_bytes) {
  char dir[256];
  test_temp_dir(dir, sizeof dir);
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_type_t *t = test_fresh_type(s, "fstats");
  resv_answer_t a = {0};
  char key[16];
  for (int i = 0; i < 50; i++) {
    snprintf(key, sizeof key, "k%d", i);
    test_reserve(t, key, "o", "a", 60000, &a);
  }
  resv_stats_t st = stats_of(s);
  ck_assert_int_eq(st.entries, 50);
  ck_assert_int_gt(st.bytes, 0);
  ck_assert_uint_eq(st.calls[RESV_OP_RESERVE][RESV_RESERVED], 50);
  check_histograms(&st, false);
  resv_answer_clear(&a);
  resv_store_close(s);
  test_remove_dir(dir);
}
END_TEST

/* A call of the file store (sync = "process") that may not wait (the
 * host's: resv_try_call) costs about two clock reads' worth, so one in
 * RESV__SAMPLE_EVERY is timed; one that may wait for the write gate
 * (resv_call) is timed every time. Both are counted every time. */
START_TEST(test_file_store_times_one_try_call_in_256_and_every_waiting_call) {
  char dir[256];
  test_temp_dir(dir, sizeof dir);
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_type_t *t = test_fresh_type(s, "fsampled");
  resv_answer_t a = {0};
  resv_error_t err;
  resv_request_t get = {.op = RESV_OP_GET, .key = test_key("email", "nobody")};
  enum { TRIES = 4 * RESV__SAMPLE_EVERY, WAITING = 10 };
  for (int i = 0; i < WAITING; i++) /* the first sets the type up */
    ck_assert_msg(resv_call(t, &get, &a, &err), "%s", err.message);
  resv_stats_t st = stats_of(s);
  ck_assert_uint_eq(st.calls[RESV_OP_GET][RESV_ABSENT], WAITING);
  ck_assert_uint_eq(st.latency[RESV_OP_GET][RESV_STATS_BUCKETS - 1], WAITING);
  for (int i = 0; i < TRIES; i++)
    ck_assert_msg(resv_try_call(t, &get, &a, &err), "%s", err.message);
  st = stats_of(s);
  ck_assert_uint_eq(st.calls[RESV_OP_GET][RESV_ABSENT], WAITING + TRIES);
  /* Any TRIES ticks in a row of the thread's counter pick exactly 4. */
  ck_assert_uint_eq(st.latency[RESV_OP_GET][RESV_STATS_BUCKETS - 1], WAITING + 4);
  check_histograms(&st, true);
  resv_answer_clear(&a);
  resv_store_close(s);
  test_remove_dir(dir);
}
END_TEST

/* ---- MongoDB ------------------------------------------------------------ */

static void app_name(char *buf, size_t size, const char *what) {
  static int n;
  snprintf(buf, size, "resv-stats-%s-%d-%d", what, (int)getpid(), n++);
}

START_TEST(test_mongo_counts_duplicate_retries_and_has_no_entries) {
  resv_store_t *s = emu_open(test_mongo_uri(), (resv_options_t){.threads = 2});
  resv_type_t *t = test_fresh_type(s, "mstats");
  resv_answer_t a = {0};
  test_reserve(t, "ann", "o", "a", 60000, &a);
  /* Another owner's upsert meets the live one on the _id index: one
   * duplicate key, read, conflict. */
  test_reserve(t, "ann", "p", "b", 60000, &a);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  resv_stats_t st = stats_of(s);
  ck_assert_uint_eq(st.duplicate_key_retries, 1);
  ck_assert_uint_eq(st.calls[RESV_OP_RESERVE][RESV_RESERVED], 1);
  ck_assert_uint_eq(st.calls[RESV_OP_RESERVE][RESV_CONFLICT], 1);
  ck_assert_int_eq(st.entries, -1);
  ck_assert_int_eq(st.bytes, -1);
  check_histograms(&st, false);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

START_TEST(test_mongo_counts_a_failed_set_up) {
  resv_store_t *s = emu_open(test_mongo_uri(), (resv_options_t){.threads = 2});
  resv_type_t *t = test_fresh_type(s, "msetup");
  emu_raw_t raw;
  emu_raw_open(&raw, test_mongo_uri(), resv_type_collection(t));
  emu_raw_insert(&raw, "{\"_id\": \"format\", \"format\": 2}");
  emu_raw_close(&raw);
  resv_answer_t a = {0};
  resv_request_t r = {.op = RESV_OP_GET, .key = test_key("email", "x")};
  resv_error_t err;
  ck_assert(!resv_call(t, &r, &a, &err));
  ck_assert_int_eq(err.code, RESV_EFORMAT);
  resv_stats_t st = stats_of(s);
  ck_assert_uint_ge(st.setup_failures, 1);
  ck_assert_uint_eq(st.errors[RESV_OP_GET][RESV_EFORMAT], 1);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

START_TEST(test_mongo_counts_slow_calls_and_jobs_waiting_and_running) {
  char app[64], uri[512];
  app_name(app, sizeof app, "slow");
  emu_uri_with_app(test_mongo_uri(), app, uri, sizeof uri);
  resv_store_t *s = emu_open(uri, (resv_options_t){.threads = 1, .timeout_ms = 5000,
                                                   .slow_ms = 100});
  resv_type_t *t = test_fresh_type(s, "mslow");
  resv_answer_t a = {0};
  test_reserve(t, "warm", "o", "a", 60000, &a); /* set up, fast */
  emu_block_app(test_mongo_uri(), "findAndModify", app, 2, 400);
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", "k1"),
                      .owner = test_owner("", "o"), .attempt = resv_cstr("a"),
                      .ttl_ms = 60000};
  resv_job_t *j1 = resv_submit(t, &r, NULL, NULL);
  r.key = test_key("email", "k2");
  resv_job_t *j2 = resv_submit(t, &r, NULL, NULL);
  usleep(150 * 1000); /* the first is on the server, the second queued */
  resv_stats_t st = stats_of(s);
  ck_assert_int_eq(st.jobs_running, 1);
  ck_assert_int_eq(st.jobs_waiting, 1);
  ck_assert(resv_job_wait(j1, 5000) && resv_job_wait(j2, 5000));
  ck_assert_int_eq(resv_job_error(j1)->code, RESV_OK);
  ck_assert_int_eq(resv_job_error(j2)->code, RESV_OK);
  resv_job_destroy(j1);
  resv_job_destroy(j2);
  emu_failpoint(test_mongo_uri(), "\"off\"", NULL);
  st = stats_of(s);
  ck_assert_uint_eq(st.slow_calls, 2);
  ck_assert_int_eq(st.jobs_running, 0);
  ck_assert_int_eq(st.jobs_waiting, 0);
  ck_assert_uint_eq(st.calls[RESV_OP_RESERVE][RESV_RESERVED], 3);
  /* Both slow ones took 0.4 s or more: past the 0.25 s bucket. */
  int b250 = 0;
  while (resv_stats_bound(b250) < 0.25) b250++;
  ck_assert_uint_le(st.latency[RESV_OP_RESERVE][b250], 1);
  ck_assert(st.latency_sum[RESV_OP_RESERVE] >= 0.8);
  check_histograms(&st, false);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

START_TEST(test_slow_ms_out_of_range_is_invalid) {
  resv_options_t o = {.slow_ms = -1};
  resv_error_t err;
  ck_assert_ptr_null(resv_store_open(&o, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "slow_ms"));
}
END_TEST

Suite *stats_suite(void) {
  const TTest *tests[] = {
      test_bounds_rise_to_infinity, test_memory_store_counts_each_call_once_by_status_and_code,
      test_calls_on_many_threads_all_count, test_file_store_counts_entries_and_bytes,
      test_file_store_times_one_try_call_in_256_and_every_waiting_call,
      test_mongo_counts_duplicate_retries_and_has_no_entries,
      test_mongo_counts_a_failed_set_up,
      test_mongo_counts_slow_calls_and_jobs_waiting_and_running,
      test_slow_ms_out_of_range_is_invalid, NULL};
  return test_suite("stats", "stats", 60, NULL, NULL, tests);
}
