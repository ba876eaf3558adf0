/* costs.c: what issue 11's "costs that grow without bound" cost now.
 *
 *   scripts/with-mongo build/bench/costs
 *
 * Prints, each as "figure <name> <value>":
 *   - decoding a pending document of 20,000 and 100,000 holds (thread CPU,
 *     least of 3): the duplicate-hold check was quadratic (0.8 s, 19 s);
 *   - handing out 40,000 empty memory-store types: wall time and heap bytes
 *     per type (was 36.5 s and 13.7 kB per type);
 *   - a memory-store reserve joining a reservation of max_holds (100) holds,
 *     the most a reservation now has (was unbounded: 50,000 holds, 66 s);
 *   - with a MongoDB server: the threads and descriptors of 100 stores open
 *     and then shut down (were 101 threads and 206 fds after close), and how
 *     long resv_store_close takes with a call blocked 1.5 s on the server.
 * Figures, never a verdict: it fails only when a call does not answer. */
#include "bench.h"
#include "mongo_internal.h"

#include <dirent.h>
#include <malloc.h>
#include <unistd.h>

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bson_t *pending_with_holds(size_t n) {
  bson_t *b = bson_new(), sub;
  char name[16], hold[32];
  const char *key;
  BSON_APPEND_DOCUMENT_BEGIN(b, "_id", &sub);
  BSON_APPEND_UTF8(&sub, "t", "");
  BSON_APPEND_UTF8(&sub, "n", "email");
  BSON_APPEND_UTF8(&sub, "k", "ann");
  bson_append_document_end(b, &sub);
  BSON_APPEND_UTF8(b, "tenant_id", "");
  BSON_APPEND_UTF8(b, "key", "ann");
  BSON_APPEND_DOCUMENT_BEGIN(b, "owner", &sub);
  BSON_APPEND_UTF8(&sub, "tenant_id", "");
  BSON_APPEND_UTF8(&sub, "id", "u1");
  bson_append_document_end(b, &sub);
  BSON_APPEND_INT64(b, "expires_at", 1500);
  BSON_APPEND_ARRAY_BEGIN(b, "holds", &sub);
  for (size_t i = 0; i < n; i++) {
    bson_uint32_to_string((uint32_t)i, &key, name, sizeof name);
    snprintf(hold, sizeof hold, "attempt-%zu", i);
    BSON_APPEND_UTF8(&sub, key, hold);
  }
  bson_append_array_end(b, &sub);
  return b;
}

static void decode_figure(size_t n) {
  bson_t *doc = pending_with_holds(n);
  double best = 1e9;
  for (int r = 0; r < 3; r++) {
    resv__doc_t d;
    resv_error_t err;
    double t0 = thread_cpu_s();
    if (!resv__doc_decode(doc, &d, &err)) bench_die("decode", &err);
    double t = thread_cpu_s() - t0;
    resv__doc_free(&d);
    if (t < best) best = t;
  }
  printf("figure decode_%zu_holds_ms %.2f  (%u bytes)\n", n, best * 1e3, doc->len);
  bson_destroy(doc);
}

static size_t heap_bytes(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

static void types_figure(int n) {
  resv_error_t err;
  resv_store_t *store = resv_store_open(NULL, &err);
  if (!store) bench_die("open", &err);
  size_t before = heap_bytes();
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++) {
    char name[32];
    int len = snprintf(name, sizeof name, "agg%d", i);
    if (!resv_store_type(store, "ctx", 3, name, (size_t)len, &err)) bench_die("type", &err);
  }
  int64_t t = bench_wall_ns() - t0;
  printf("figure types_%d_ms %.1f\n", n, (double)t / 1e6);
  printf("figure bytes_per_empty_type %zu\n", (heap_bytes() - before) / (size_t)n);
  resv_store_close(store);
}

static void full_reserve_figure(void) {
  resv_error_t err;
  resv_store_t *store = resv_store_open(NULL, &err);
  if (!store) bench_die("open", &err);
  resv_type_t *t = resv_store_type(store, "ctx", 3, "full", 4, &err);
  resv_answer_t a = {0};
  resv_key_t key = {resv_cstr(""), resv_cstr("email"), resv_cstr("ann")};
  resv_owner_t owner = {resv_cstr(""), resv_cstr("u1")};
  char attempt[32];
  for (int i = 0; i < 100; i++) {
    snprintf(attempt, sizeof attempt, "attempt-%d", i);
    if (!resv_reserve(t, &key, &owner, resv_cstr(attempt), 60000, &a, &err))
      bench_die("reserve", &err);
  }
  int calls = 20000;
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < calls; i++)
    if (!resv_reserve(t, &key, &owner, resv_cstr("attempt-50"), 60000, &a, &err))
      bench_die("reserve", &err);
  int64_t ns = bench_wall_ns() - t0;
  printf("figure reserve_joining_%zu_holds_ns %.0f\n", a.nholds, (double)ns / calls);
  bool refused = !resv_reserve(t, &key, &owner, resv_cstr("attempt-100"), 60000, &a, &err);
  printf("figure attempt_101_refused %d  (%s)\n", refused, refused ? err.message : "");
  resv_answer_clear(&a);
  resv_store_close(store);
}

static int entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

static void shutdown_figure(const char *uri, int n) {
  resv_options_t o = {.uri = uri, .threads = 1};
  resv_store_t **stores = calloc((size_t)n, sizeof *stores);
  resv_error_t err;
  resv_answer_t a = {0};
  resv_key_t key = {resv_cstr(""), resv_cstr("email"), resv_cstr("ann")};
  resv_owner_t owner = {resv_cstr(""), resv_cstr("u1")};
  printf("figure before_open threads=%d fds=%d\n", entries("/proc/self/task"),
         entries("/proc/self/fd"));
  for (int i = 0; i < n; i++) {
    if (!(stores[i] = resv_store_open(&o, &err))) bench_die("open", &err);
    resv_type_t *t = resv_store_type(stores[i], "bench", 5, "costs", 5, &err);
    if (!resv_reserve(t, &key, &owner, resv_cstr("a1"), 1000, &a, &err)) bench_die("reserve", &err);
  }
  printf("figure %d_stores_open threads=%d fds=%d\n", n, entries("/proc/self/task"),
         entries("/proc/self/fd"));
  for (int i = 0; i < n; i++) resv_store_shutdown(stores[i]);
  printf("figure %d_stores_shut_down threads=%d fds=%d\n", n, entries("/proc/self/task"),
         entries("/proc/self/fd"));
  for (int i = 0; i < n; i++) resv_store_close(stores[i]);
  resv_answer_clear(&a);
  free(stores);
}

static void blocked_close_figure(const char *uri) {
  resv_options_t o = {.uri = uri, .threads = 1};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) bench_die("open", &err);
  resv_type_t *t = resv_store_type(s, "bench", 5, "costs", 5, &err);
  resv_answer_t a = {0};
  resv_key_t key = {resv_cstr(""), resv_cstr("email"), resv_cstr("bob")};
  resv_owner_t owner = {resv_cstr(""), resv_cstr("u1")};
  if (!resv_reserve(t, &key, &owner, resv_cstr("a1"), 1000, &a, &err)) bench_die("reserve", &err);
  /* Block this store's next findAndModify for 1.5 s. */
  mongoc_client_t *c = mongoc_client_new(uri);
  bson_error_t e;
  bson_t *cmd = BCON_NEW("configureFailPoint", "failCommand", "mode", "{", "times",
                         BCON_INT32(1), "}", "data", "{", "failCommands", "[",
                         "findAndModify", "]", "blockConnection", BCON_BOOL(true),
                         "blockTimeMS", BCON_INT32(1500), "}");
  if (!mongoc_client_command_simple(c, "admin", cmd, NULL, NULL, &e)) {
    printf("figure close_with_blocked_call skipped (%s)\n", e.message);
  } else {
    resv_request_t r = {.op = RESV_OP_RESERVE, .key = key, .owner = owner,
                        .attempt = resv_cstr("a2"), .ttl_ms = 1000};
    resv_job_t *job = resv_submit(t, &r, NULL, &err);
    usleep(300 * 1000);
    int64_t t0 = bench_wall_ns();
    resv_store_close(s);
    int64_t ns = bench_wall_ns() - t0;
    printf("figure close_with_call_blocked_1500ms_us %.0f  (call still running: %d)\n",
           (double)ns / 1e3, !resv_job_done(job));
    resv_job_wait(job, -1);
    resv_job_destroy(job);
    s = NULL;
  }
  bson_destroy(cmd);
  mongoc_client_destroy(c);
  if (s) resv_store_close(s);
  resv_answer_clear(&a);
}

int main(void) {
  decode_figure(20000);
  decode_figure(100000);
  types_figure(40000);
  full_reserve_figure();
  const char *uri = bench_uri();
  if (uri) {
    shutdown_figure(uri, 100);
    blocked_close_figure(uri);
  }
  return 0;
}
