/* test_store.c: the store handle (store.c): its types, and what closing
 * it leaves behind. Costs are asserted as counts or as the ratio of two
 * measurements in one run, never against a wall-clock limit. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "emu.h"
#include "tests.h"

static double thread_cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Adds types "agg<from>" .. "agg<to - 1>" to store. */
static void add_types(resv_store_t *store, int from, int to) {
  for (int i = from; i < to; i++) {
    char name[32];
    resv_error_t err;
    int n = snprintf(name, sizeof name, "agg%d", i);
    ck_assert_msg(resv_store_type(store, "ctx", 3, name, (size_t)n, &err) != NULL,
                  "type %s: %s", name, err.message);
  }
}

/* The least CPU time (of several rounds) of `lookups` lookups of the
 * first type the store was given, "agg0". */
static double lookup_seconds(resv_store_t *store, int lookups) {
  double best = 1e9;
  resv_type_t *first = resv_store_type(store, "ctx", 3, "agg0", 4, NULL);
  for (int round = 0; round < 5; round++) {
    double t0 = thread_cpu_seconds();
    for (int i = 0; i < lookups; i++)
      ck_assert_ptr_eq(resv_store_type(store, "ctx", 3, "agg0", 4, NULL), first);
    double t = thread_cpu_seconds() - t0;
    if (t < best) best = t;
  }
  return best;
}

START_TEST(finding_a_type_costs_the_same_among_200_or_20000) {
  /* The types were a list searched from the newest: finding the first
   * of 20,000 compared 20,000 names (40,000 types took 36.5 s to make). */
  resv_store_t *few = test_open(NULL), *many = test_open(NULL);
  add_types(few, 0, 200);
  add_types(many, 0, 20000);
  double t_few = lookup_seconds(few, 5000), t_many = lookup_seconds(many, 5000);
  ck_assert_msg(t_many < 10 * t_few,
                "5,000 lookups among 200 types: %.6f s, among 20,000: %.6f s "
                "(ratio %.1f, want under 10)", t_few, t_many, t_many / t_few);
  /* Asking again gives the same handle, and every type is still there. */
  resv_type_t *t = resv_store_type(many, "ctx", 3, "agg19999", 8, NULL);
  ck_assert_ptr_nonnull(t);
  ck_assert_str_eq(resv_type_collection(t), "wow_reservation__ctx__agg19999");
  ck_assert_ptr_eq(resv_store_type(many, "ctx", 3, "agg19999", 8, NULL), t);
  resv_store_close(few);
  resv_store_close(many);
}
END_TEST

/* Entries of a /proc/self directory: the process's threads (task) or
 * open descriptors (fd; the one reading it counts in every reading). */
static int proc_entries(const char *dir) {
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* Waits (at most 30 s: a liveness bound, not a speed limit) for the
 * reapers of closed stores to finish. */
static void wait_for_reapers(void) {
  for (int i = 0; i < 3000 && resv__store_reapers() > 0; i++) usleep(10 * 1000);
  ck_assert_int_eq(resv__store_reapers(), 0);
}

static void *nothing(void *arg) { return arg; }

/* The threads of this process, once a first thread has come and gone:
 * ThreadSanitizer starts a thread of its own with a process's first.
 * A joined thread may still be listed for a moment (pthread_join returns
 * when the kernel clears its id, before the task is released; a baseline
 * of 2 threads for 1 was seen), so the count is read until two readings
 * 20 ms apart agree (at most 5 s: a liveness bound). */
static int threads_now(void) {
  static bool warm;
  if (!warm) {
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, nothing, NULL), 0);
    pthread_join(t, NULL);
    warm = true;
  }
  int n = proc_entries("/proc/self/task");
  for (int i = 0; i < 250; i++) {
    usleep(20 * 1000);
    int again = proc_entries("/proc/self/task");
    if (again == n) break;
    n = again;
  }
  return n;
}

/* Asserts that the process is back to `threads` threads: joined threads
 * leave /proc/self/task a moment after their join (at most 5 s). */
static void assert_threads_back_to(int threads) {
  int n = threads_now();
  for (int i = 0; i < 250 && n != threads; i++) {
    usleep(20 * 1000);
    n = proc_entries("/proc/self/task");
  }
  ck_assert_int_eq(n, threads);
}

#define SHUT_STORES 10

START_TEST(shutdown_leaves_no_driver_thread_and_no_socket) {
  /* shutdown joined the dispatcher but kept the client pool: 100 closed
   * stores held 101 threads and 206 descriptors until they were freed. */
  resv_store_t *stores[SHUT_STORES];
  int threads = threads_now(), fds = proc_entries("/proc/self/fd");
  for (int i = 0; i < SHUT_STORES; i++) {
    resv_answer_t a = {0};
    stores[i] = test_open(test_mongo_uri());
    test_reserve(test_fresh_type(stores[i], "shut"), "ann@x", "A", "a1", 60000, &a);
    ck_assert_int_eq(a.status, RESV_RESERVED);
    resv_answer_clear(&a);
  }
  int open_threads = threads_now(), open_fds = proc_entries("/proc/self/fd");
  ck_assert_int_gt(open_threads, threads);
  ck_assert_int_gt(open_fds, fds);
  for (int i = 0; i < SHUT_STORES; i++) resv_store_shutdown(stores[i]);
  assert_threads_back_to(threads);
  ck_assert_int_eq(proc_entries("/proc/self/fd"), fds);
  /* The handles stay valid and answer closed. */
  for (int i = 0; i < SHUT_STORES; i++) {
    char buf[256];
    resv_store_describe(stores[i], buf, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "mongodb"));
    resv_error_t err;
    ck_assert_ptr_null(resv_store_type(stores[i], "test", 4, "late", 4, &err));
    ck_assert_int_eq(err.code, RESV_ECLOSED);
    resv_store_shutdown(stores[i]); /* again: nothing to do */
    resv_store_close(stores[i]);
  }
  wait_for_reapers();
  fprintf(stderr, "store: %d stores open: %d threads, %d fds; shut down: %d, %d\n",
          SHUT_STORES, open_threads, open_fds, threads, fds);
}
END_TEST

START_TEST(close_returns_while_a_call_is_blocked_on_the_server) {
  /* A garbage collector frees stores with resv_store_close: with a call
   * blocked on the server, it waited as long as the call (1.5 s seen). */
  char app[64], uri[512];
  snprintf(app, sizeof app, "resv-close-%d", (int)getpid());
  emu_uri_with_app(test_mongo_uri(), app, uri, sizeof uri);
  int threads = threads_now(), fds = proc_entries("/proc/self/fd");
  resv_store_t *s = emu_open(uri, (resv_options_t){.threads = 1, .timeout_ms = 5000});
  resv_type_t *t = test_fresh_type(s, "close");
  resv_answer_t a = {0};
  test_reserve(t, "warm", "A", "a1", 60000, &a); /* the type is set up */
  resv_answer_clear(&a);
  emu_block_app(test_mongo_uri(), "findAndModify", app, 1, 2000);
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", "ann@x"),
                      .owner = test_owner("", "A"), .attempt = resv_cstr("a1"),
                      .ttl_ms = 60000};
  resv_job_t *job = resv_submit(t, &r, NULL, NULL);
  ck_assert_ptr_nonnull(job);
  usleep(500 * 1000); /* the worker has sent it: the server holds it 2 s */
  ck_assert_msg(!resv_job_done(job), "the blocked call answered before the close");
  resv_store_close(s);
  ck_assert_msg(!resv_job_done(job), "close waited for the blocked call");
  /* The call ends as it would have, and the teardown after it. */
  ck_assert(resv_job_wait(job, 10000));
  const resv_error_t *err = resv_job_error(job);
  ck_assert_msg(err->code == RESV_OK, "%s: %s", resv_code_name(err->code), err->message);
  ck_assert_int_eq(resv_job_answer(job)->status, RESV_RESERVED);
  resv_job_destroy(job);
  wait_for_reapers();
  assert_threads_back_to(threads);
  ck_assert_int_eq(proc_entries("/proc/self/fd"), fds);
  emu_failpoint(test_mongo_uri(), "\"off\"", NULL);
}
END_TEST

START_TEST(close_after_shutdown_frees_at_once) {
  resv_store_t *s = test_open(test_mongo_uri());
  resv_store_shutdown(s);
  resv_store_close(s);
  ck_assert_int_eq(resv__store_reapers(), 0); /* nothing left for a reaper */
}
END_TEST

Suite *store_suite(void) {
  Suite *s = suite_create("store");
  const TTest *types_tests[] = {
      finding_a_type_costs_the_same_among_200_or_20000, NULL};
  test_tcase(s, "types", 120, NULL, NULL, types_tests);
  const TTest *close_tests[] = {
      shutdown_leaves_no_driver_thread_and_no_socket,
      close_returns_while_a_call_is_blocked_on_the_server,
      close_after_shutdown_frees_at_once, NULL};
  test_tcase(s, "close", 60, NULL, NULL, close_tests);
  signals_tcase(s);
  return s;
}
