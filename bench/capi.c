/* capi.c: the C API's cost per call, the baseline of the Lua benchmarks.
 *
 *   capi memory [keys]  the memory store: reserve of new keys, reserve of
 *                       the same keys again (joining one's own pending
 *                       reservation), reserve by another owner (conflict),
 *                       each through resv_call, and the new-key reserve
 *                       through resv_submit + resv_job_destroy (the path
 *                       the Lua module takes in a coroutine and in nginx).
 *                       Wall nanoseconds per call, median of 5 rounds, each
 *                       round on a fresh type (a fresh table).
 *   capi mongo [calls]  the MongoDB store (RESV_TEST_URI): reserves kept 16
 *                       at a time in flight through resv_submit and one
 *                       inbox, as resv.spawn does; process CPU nanoseconds
 *                       per call (the server's time is not ours).
 *
 * Each figure is printed as a line "figure <name> <value>" for
 * bench/lua_overhead.lua, which runs the same calls from Lua and prints
 * the difference. */
#include "bench.h"

#include <poll.h>

#define ROUNDS 5
#define IN_FLIGHT 16

static char **make_keys(int n) {
  char **keys = malloc((size_t)n * sizeof *keys);
  for (int i = 0; i < n; i++) {
    keys[i] = malloc(32);
    snprintf(keys[i], 32, "user%d@example.com", i);
  }
  return keys;
}

static resv_request_t reserve_of(const char *key, const char *owner) {
  resv_request_t r = {.op = RESV_OP_RESERVE,
                      .key = {resv_cstr(""), resv_cstr("email"), resv_cstr(key)},
                      .owner = {resv_cstr("t1"), resv_cstr(owner)},
                      .attempt = resv_cstr("req-1"),
                      .ttl_ms = 60000};
  return r;
}

static double pass(resv_type_t *type, char **keys, int n, const char *owner,
                   int32_t expect) {
  resv_answer_t a = {0};
  resv_error_t err;
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++) {
    resv_request_t r = reserve_of(keys[i], owner);
    if (!resv_call(type, &r, &a, &err)) bench_die("reserve", &err);
    if (a.status != expect) bench_expect("reserve", &a, expect);
  }
  int64_t t1 = bench_wall_ns();
  resv_answer_clear(&a);
  return (double)(t1 - t0) / n;
}

static double submit_pass(resv_type_t *type, char **keys, int n) {
  resv_error_t err;
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++) {
    resv_request_t r = reserve_of(keys[i], "user-42");
    resv_job_t *job = resv_submit(type, &r, NULL, &err);
    if (!job) bench_die("submit", &err);
    const resv_answer_t *a = resv_job_answer(job);
    if (!a) bench_die("submit", resv_job_error(job));
    if (a->status != RESV_RESERVED) bench_expect("submit", a, RESV_RESERVED);
    resv_job_destroy(job);
  }
  return (double)(bench_wall_ns() - t0) / n;
}

static int run_memory(int n) {
  resv_error_t err;
  resv_store_t *store = resv_store_open(NULL, &err);
  if (!store) bench_die("open", &err);
  char **keys = make_keys(n);
  double fresh[ROUNDS], again[ROUNDS], conflict[ROUNDS], submit[ROUNDS];
  for (int round = 0; round < ROUNDS; round++) {
    char name[32];
    snprintf(name, sizeof name, "call%d", round);
    resv_type_t *type = resv_store_type(store, "bench", 5, name, strlen(name), &err);
    snprintf(name, sizeof name, "submit%d", round);
    resv_type_t *type2 = resv_store_type(store, "bench", 5, name, strlen(name), &err);
    if (!type || !type2) bench_die("type", &err);
    fresh[round] = pass(type, keys, n, "user-42", RESV_RESERVED);
    again[round] = pass(type, keys, n, "user-42", RESV_RESERVED);
    conflict[round] = pass(type, keys, n, "user-43", RESV_CONFLICT);
    submit[round] = submit_pass(type2, keys, n);
  }
  printf("== 3a. C API on the memory store (%d keys x %d rounds, medians)\n", n, ROUNDS);
  printf("figure c_reserve_new_ns %.1f\n", bench_median(fresh, ROUNDS));
  printf("figure c_reserve_again_ns %.1f\n", bench_median(again, ROUNDS));
  printf("figure c_conflict_ns %.1f\n", bench_median(conflict, ROUNDS));
  printf("figure c_submit_new_ns %.1f\n", bench_median(submit, ROUNDS));
  resv_store_close(store);
  for (int i = 0; i < n; i++) free(keys[i]);
  free(keys);
  return 0;
}

static int run_mongo(int calls) {
  resv_error_t err;
  resv_options_t o = {.uri = bench_uri(), .database = "bench_lua"};
  if (!o.uri) {
    fprintf(stderr, "capi mongo: RESV_TEST_URI is not set\n");
    return 1;
  }
  resv_store_t *store = resv_store_open(&o, &err);
  if (!store) bench_die("open", &err);
  char context[32];
  snprintf(context, sizeof context, "c%lld", (long long)bench_wall_ns());
  resv_type_t *type = resv_store_type(store, context, strlen(context), "user", 4, &err);
  if (!type) bench_die("type", &err);
  resv_inbox_t *inbox = resv_inbox_new(&err);
  if (!inbox) bench_die("inbox", &err);
  char **keys = make_keys(IN_FLIGHT);

  /* Warm up: the type's set-up and one connection per thread. */
  for (int i = 0; i < IN_FLIGHT; i++) {
    resv_answer_t a = {0};
    resv_request_t r = reserve_of(keys[i], "user-42");
    if (!resv_call(type, &r, &a, &err)) bench_die("reserve", &err);
    resv_answer_clear(&a);
  }
  int64_t c0 = bench_cpu_ns(), t0 = bench_wall_ns(), m0 = bench_thread_cpu_ns();
  int submitted = 0, finished = 0;
  resv_job_t *done[IN_FLIGHT];
  while (finished < calls) {
    while (submitted < calls && submitted - finished < IN_FLIGHT) {
      resv_request_t r = reserve_of(keys[submitted % IN_FLIGHT], "user-42");
      if (!resv_submit(type, &r, inbox, &err)) bench_die("submit", &err);
      submitted++;
    }
    resv_inbox_wait(inbox, -1);
    size_t n = resv_inbox_drain(inbox, done, IN_FLIGHT);
    for (size_t i = 0; i < n; i++) {
      const resv_answer_t *a = resv_job_answer(done[i]);
      if (!a) bench_die("reserve", resv_job_error(done[i]));
      if (a->status != RESV_RESERVED) bench_expect("reserve", a, RESV_RESERVED);
      resv_job_destroy(done[i]);
    }
    finished += (int)n;
  }
  int64_t c1 = bench_cpu_ns(), t1 = bench_wall_ns(), m1 = bench_thread_cpu_ns();
  printf("== 3c. C API on MongoDB, %d reserves, %d in flight (resv_submit + inbox)\n",
         calls, IN_FLIGHT);
  printf("figure c_mongo_cpu_ns %.1f\n", (double)(c1 - c0) / calls);
  printf("figure c_mongo_wall_ns %.1f\n", (double)(t1 - t0) / calls);
  printf("figure c_mongo_caller_cpu_ns %.1f\n", (double)(m1 - m0) / calls);
  resv_inbox_destroy(inbox);
  resv_store_close(store);
  for (int i = 0; i < IN_FLIGHT; i++) free(keys[i]);
  free(keys);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "memory") == 0)
    return run_memory(argc > 2 ? atoi(argv[2]) : 100000);
  if (argc > 1 && strcmp(argv[1], "mongo") == 0)
    return run_mongo(argc > 2 ? atoi(argv[2]) : 2000);
  fprintf(stderr, "usage: capi memory [keys] | capi mongo [calls]\n");
  return 1;
}
