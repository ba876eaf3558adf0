/* overlap.c: do T dispatcher threads overlap T slow writes?
 *
 *   overlap [L_ms] [calls_per_thread] [T...]     (RESV_TEST_URI set)
 *
 * The emulator's failCommand fail point makes every findAndModify wait L ms
 * (blockConnection/blockTimeMS) before it runs, so a reserve takes at
 * least L and T threads can at best finish T/L reserves a second: the
 * ideal. For each T it measures:
 *   raw   T threads, each with its own client of a mongoc pool, doing bare
 *         findAndModify calls back to back: the driver's and the emulator's
 *         own ceiling, measured in the same run;
 *   resv  a store with T dispatcher threads and 4T reserves kept in flight
 *         through resv_submit and one inbox (many concurrent callers).
 * and prints reserves/s and the ratios resv/ideal (the goal: >= 0.9) and
 * resv/raw. The keys were reserved once before the fail point is set, so
 * each measured call is one findAndModify. Also writes
 * $BENCH_OUT/overlap.dat (T ideal raw resv) for the plot. */
#include "bench.h"

#include <mongoc/mongoc.h>
#include <pthread.h>

#define MAX_T 64

static const char *uri;
static int L = 50, calls_per_thread = 20;

static void failpoint(int block_ms) {
  bson_error_t error;
  mongoc_client_t *client = mongoc_client_new(uri);
  bson_t *cmd = block_ms
      ? BCON_NEW("configureFailPoint", "failCommand", "mode", "alwaysOn", "data",
                 "{", "failCommands", "[", "findAndModify", "]",
                 "blockConnection", BCON_BOOL(true), "blockTimeMS",
                 BCON_INT32(block_ms), "}")
      : BCON_NEW("configureFailPoint", "failCommand", "mode", "off");
  if (!client || !mongoc_client_command_simple(client, "admin", cmd, NULL, NULL, &error)) {
    fprintf(stderr, "overlap: configureFailPoint: %s\n", client ? error.message : "no client");
    exit(1);
  }
  bson_destroy(cmd);
  mongoc_client_destroy(client);
}

static char *key_name(int i) {
  char *k = malloc(32);
  snprintf(k, 32, "overlap%d@example.com", i);
  return k;
}

/* ---- raw: T threads of bare findAndModify ---------------------------- */

typedef struct raw_arg {
  mongoc_client_pool_t *pool;
  int index;
} raw_arg_t;

static void *raw_thread(void *p) {
  raw_arg_t *a = p;
  mongoc_client_t *client = mongoc_client_pool_pop(a->pool);
  mongoc_collection_t *coll = mongoc_client_get_collection(client, "bench_overlap", "raw");
  char key[32];
  snprintf(key, sizeof key, "raw%d", a->index);
  bson_t *filter = BCON_NEW("_id", BCON_UTF8(key));
  for (int i = 0; i < calls_per_thread; i++) {
    bson_t *update = BCON_NEW("$set", "{", "n", BCON_INT32(i), "}");
    bson_t reply;
    bson_error_t error;
    mongoc_find_and_modify_opts_t *opts = mongoc_find_and_modify_opts_new();
    mongoc_find_and_modify_opts_set_update(opts, update);
    mongoc_find_and_modify_opts_set_flags(
        opts, MONGOC_FIND_AND_MODIFY_UPSERT | MONGOC_FIND_AND_MODIFY_RETURN_NEW);
    if (!mongoc_collection_find_and_modify_with_opts(coll, filter, opts, &reply, &error)) {
      fprintf(stderr, "overlap: raw findAndModify: %s\n", error.message);
      exit(1);
    }
    bson_destroy(&reply);
    mongoc_find_and_modify_opts_destroy(opts);
    bson_destroy(update);
  }
  bson_destroy(filter);
  mongoc_collection_destroy(coll);
  mongoc_client_pool_push(a->pool, client);
  return NULL;
}

static double run_raw(int threads) {
  mongoc_uri_t *muri = mongoc_uri_new(uri);
  mongoc_uri_set_option_as_int32(muri, MONGOC_URI_MAXPOOLSIZE, threads);
  mongoc_client_pool_t *pool = mongoc_client_pool_new(muri);
  pthread_t tid[MAX_T];
  raw_arg_t args[MAX_T];
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < threads; i++) {
    args[i] = (raw_arg_t){pool, i};
    pthread_create(&tid[i], NULL, raw_thread, &args[i]);
  }
  for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
  int64_t t1 = bench_wall_ns();
  mongoc_client_pool_destroy(pool);
  mongoc_uri_destroy(muri);
  return (double)threads * calls_per_thread / ((double)(t1 - t0) / 1e9);
}

/* ---- resv: T dispatcher threads, 4T jobs in flight ------------------- */

static double run_resv(int threads) {
  resv_error_t err;
  resv_options_t o = {.uri = uri, .database = "bench_overlap", .threads = threads,
                      .queue = 4096, .timeout_ms = 60000};
  resv_store_t *store = resv_store_open(&o, &err);
  if (!store) bench_die("open", &err);
  char agg[32];
  snprintf(agg, sizeof agg, "t%d_%lld", threads, (long long)(bench_wall_ns() % 1000000007));
  resv_type_t *type = resv_store_type(store, "overlap", 7, agg, strlen(agg), &err);
  if (!type) bench_die("type", &err);
  int in_flight = 4 * threads, total = threads * calls_per_thread;
  char *keys[4 * MAX_T];
  for (int i = 0; i < in_flight; i++) keys[i] = key_name(i);
  resv_inbox_t *inbox = resv_inbox_new(&err);
  resv_request_t r = {.op = RESV_OP_RESERVE, .owner = {resv_cstr("t1"), resv_cstr("user-42")},
                      .attempt = resv_cstr("req-1"), .ttl_ms = 3600000};
  r.key.tenant = resv_cstr("");
  r.key.ns = resv_cstr("email");
  for (int i = 0; i < in_flight; i++) { /* set-up and keys, before the fail point */
    resv_answer_t a = {0};
    r.key.key = resv_cstr(keys[i]);
    if (!resv_call(type, &r, &a, &err)) bench_die("reserve", &err);
    resv_answer_clear(&a);
  }
  failpoint(L);
  int submitted = 0, finished = 0;
  resv_job_t *done[4 * MAX_T];
  int64_t t0 = bench_wall_ns();
  while (finished < total) {
    while (submitted < total && submitted - finished < in_flight) {
      r.key.key = resv_cstr(keys[submitted % in_flight]);
      if (!resv_submit(type, &r, inbox, &err)) bench_die("submit", &err);
      submitted++;
    }
    resv_inbox_wait(inbox, -1);
    size_t n = resv_inbox_drain(inbox, done, (size_t)in_flight);
    for (size_t i = 0; i < n; i++) {
      const resv_answer_t *a = resv_job_answer(done[i]);
      if (!a) bench_die("reserve", resv_job_error(done[i]));
      bench_expect("reserve", a, RESV_RESERVED);
      resv_job_destroy(done[i]);
    }
    finished += (int)n;
  }
  int64_t t1 = bench_wall_ns();
  failpoint(0);
  resv_inbox_destroy(inbox);
  resv_store_close(store);
  for (int i = 0; i < in_flight; i++) free(keys[i]);
  return (double)total / ((double)(t1 - t0) / 1e9);
}

int main(int argc, char **argv) {
  static const int default_ts[] = {1, 2, 4, 8, 16};
  int ts[16], nts = 0;
  uri = bench_uri();
  if (!uri) {
    fprintf(stderr, "overlap: RESV_TEST_URI is not set (run under scripts/with-mongo)\n");
    return 1;
  }
  if (argc > 1) L = atoi(argv[1]);
  if (argc > 2) calls_per_thread = atoi(argv[2]);
  for (int i = 3; i < argc && nts < 16; i++) ts[nts++] = atoi(argv[i]);
  if (!nts) {
    memcpy(ts, default_ts, sizeof default_ts);
    nts = 5;
  }
  mongoc_init();
  const char *dir = getenv("BENCH_OUT");
  char path[512];
  snprintf(path, sizeof path, "%s/overlap.dat", dir && dir[0] ? dir : ".");
  FILE *dat = fopen(path, "w");
  if (dat) fprintf(dat, "# T ideal raw resv (reserves/s), L = %d ms\n", L);

  printf("== 5. overlap: findAndModify blocked %d ms, %d calls per thread\n", L, calls_per_thread);
  printf("  %4s %10s %10s %10s %10s %10s\n", "T", "ideal/s", "raw/s", "resv/s",
         "resv/ideal", "resv/raw");
  double worst = 1e9;
  for (int i = 0; i < nts; i++) {
    int t = ts[i] < 1 ? 1 : ts[i] > MAX_T ? MAX_T : ts[i];
    double ideal = t * 1000.0 / L;
    failpoint(L);
    double raw = run_raw(t);
    failpoint(0);
    double rv = run_resv(t);
    printf("  %4d %10.1f %10.1f %10.1f %10.3f %10.3f\n", t, ideal, raw, rv, rv / ideal, rv / raw);
    if (dat) fprintf(dat, "%d %.2f %.2f %.2f\n", t, ideal, raw, rv);
    if (rv / ideal < worst) worst = rv / ideal;
  }
  if (dat) fclose(dat);
  printf("  goal >= 0.9 of ideal at every T: %s (worst %.3f)\n", worst >= 0.9 ? "met" : "NOT met", worst);
  mongoc_cleanup();
  return 0;
}
