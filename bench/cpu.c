/* cpu.c: the client's CPU per reserve on MongoDB, against a bare driver call.
 *
 * The emulator is slow and shares the machine, so wall time says little
 * about resv. What resv adds is CPU in the client process: building the
 * command, the hand-off to a dispatcher thread and back, decoding the
 * reply, copying the answer. This program measures the process's CPU
 * clock (every thread, the scheduler's exact accounting) over N calls of:
 *
 *   bare   the baseline: mongoc_collection_find_and_modify_with_opts of the
 *          same reservation document on the same server and collection,
 *          built by hand ({$set} of owner, expires_at, holds; upsert,
 *          return new), on the caller's thread, reading the returned
 *          document's fields: what a careful caller would write without
 *          resv's rules;
 *   core   resv's operation without the dispatcher: resv__mongo_run_on (the
 *          internal entry point a connection's call runs) on the caller's
 *          thread and the same client and collection as bare, as one
 *          connection (its findAndModify options kept from call to call):
 *          command built, decoded, answered;
 *   unchecked  core with its filter's layout check (the conformance
 *          predicate, docs/mongodb.md) replaced by a constant of the same
 *          size that is always true (a string in $literal): the same
 *          bytes each way, only the server's work differs. Not what resv
 *          sends, but what tells the server's share: where the server
 *          shares the client's CPUs (the emulator here), the client's CPU
 *          per call grows with the time the server takes over it;
 *   call   resv_call through the public API: the above plus validation,
 *          the counters, and the client lent for the call (a blocking call
 *          runs on the caller's thread, docs/design.md section 7), from the
 *          store's own pool (its URI options: majority writes, the set's
 *          topology).
 *
 * Each round runs the three on the same key (reserving it again by the
 * same owner and attempt: one document, changed each time by its expiry,
 * so every call writes and returns the same shape), interleaved in blocks
 * of BLOCK calls whose order turns from block to block; the figures
 * are medians over the rounds (9, or the second argument, up to 31). The goal (issue 7) is call / bare <= 1.15.
 *
 * Under callgrind (bench/run.sh runs it so too) it runs one round after the
 * warm-up and dumps the counters after each phase ("bare", "core",
 * "unchecked", "call"), so instruction counts per call, deterministic where the CPU
 * clock is noisy, can be read from the dumps: they count user-space work
 * in every thread, but not the kernel's (futex waits, context switches). */
#include "apm.h"
#include "bench.h"

#include "mongo_internal.h"

#include <valgrind/callgrind.h>

#define ROUNDS 9
#define MAX_ROUNDS 31
#define DEFAULT_CALLS 300

static const char *K_TENANT = "", *K_NS = "email", *K_KEY = "cpu@example.com";
static const char *O_TENANT = "t1", *O_ID = "user-42", *ATTEMPT = "req-1";

static void bare_reserve(mongoc_collection_t *coll, int64_t now) {
  bson_t filter, id, update, set, owner, holds, reply;
  bson_error_t error;
  bson_iter_t it, doc;

  bson_init(&filter);
  BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &id);
  BSON_APPEND_UTF8(&id, "t", K_TENANT);
  BSON_APPEND_UTF8(&id, "n", K_NS);
  BSON_APPEND_UTF8(&id, "k", K_KEY);
  bson_append_document_end(&filter, &id);
  BSON_APPEND_UTF8(&filter, "tenant_id", K_TENANT);
  BSON_APPEND_UTF8(&filter, "key", K_KEY);

  bson_init(&update);
  BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
  BSON_APPEND_DOCUMENT_BEGIN(&set, "owner", &owner);
  BSON_APPEND_UTF8(&owner, "tenant_id", O_TENANT);
  BSON_APPEND_UTF8(&owner, "id", O_ID);
  bson_append_document_end(&set, &owner);
  BSON_APPEND_INT64(&set, "expires_at", now + 60000);
  BSON_APPEND_ARRAY_BEGIN(&set, "holds", &holds);
  BSON_APPEND_UTF8(&holds, "0", ATTEMPT);
  bson_append_array_end(&set, &holds);
  bson_append_document_end(&update, &set);

  mongoc_find_and_modify_opts_t *opts = mongoc_find_and_modify_opts_new();
  mongoc_find_and_modify_opts_set_update(opts, &update);
  mongoc_find_and_modify_opts_set_flags(
      opts, MONGOC_FIND_AND_MODIFY_UPSERT | MONGOC_FIND_AND_MODIFY_RETURN_NEW);
  if (!mongoc_collection_find_and_modify_with_opts(coll, &filter, opts, &reply,
                                                   &error)) {
    fprintf(stderr, "cpu: bare findAndModify: %s\n", error.message);
    exit(1);
  }
  /* Read what a caller needs: the expiry and the owner's id. */
  if (!bson_iter_init_find(&it, &reply, "value") || !bson_iter_recurse(&it, &doc) ||
      !bson_iter_find(&doc, "expires_at")) {
    fprintf(stderr, "cpu: bare findAndModify: no document returned\n");
    exit(1);
  }
  mongoc_find_and_modify_opts_destroy(opts);
  bson_destroy(&reply);
  bson_destroy(&update);
  bson_destroy(&filter);
}

static resv_request_t request(void) {
  resv_request_t r = {
      .op = RESV_OP_RESERVE,
      .key = {resv_cstr(K_TENANT), resv_cstr(K_NS), resv_cstr(K_KEY)},
      .owner = {resv_cstr(O_TENANT), resv_cstr(O_ID)},
      .attempt = resv_cstr(ATTEMPT),
      .ttl_ms = 60000};
  return r;
}

/* {$literal: "xx...x"}, as many bytes as check: an expression always
 * true ($expr takes a non-empty string as true) that costs the server
 * nothing to evaluate. */
static bson_t *same_size_true(const bson_t *check) {
  /* 4 (length) + 1 (type) + 9 ("$literal") + 4 (string length) + the
   * string and its NUL + 1 (end) */
  size_t n = check->len - 20;
  char *x = malloc(n + 1);
  if (!x) exit(1);
  memset(x, 'x', n);
  x[n] = '\0';
  bson_t *b = BCON_NEW("$literal", BCON_UTF8(x));
  free(x);
  if (b->len != check->len) {
    fprintf(stderr, "cpu: the constant is %u bytes, the check %u\n", b->len, check->len);
    exit(1);
  }
  return b;
}

/* Calls of each phase run together (in a round, or in a block of one). */
#define BLOCK 10

typedef struct phases {
  resv_store_t *store;
  resv_type_t *type;
  mongoc_collection_t *coll;
  /* core's and unchecked's: each a connection on the client of bare, and
   * a backend whose templates carry the layout check or a constant */
  resv__mongo_conn_t *conn[2];
  resv__mongo_t *backend[2];
  const resv_request_t *req;
  resv_answer_t *answer;
} phases_t;

enum { BARE, CORE, UNCHECKED, CALL, PHASES };
static const char *const phase_names[PHASES] = {"bare", "core", "unchecked", "call"};

/* n calls of phase p; the process's CPU ns. */
static int64_t run_phase(phases_t *ph, int p, int n) {
  resv_error_t err;
  int64_t t0 = bench_cpu_ns();
  for (int i = 0; i < n; i++) {
    if (p == BARE) {
      bare_reserve(ph->coll, resv_store_now(ph->store));
    } else if (p == CORE || p == UNCHECKED) {
      int b = p == UNCHECKED;
      if (!resv__mongo_run_on(ph->backend[b], ph->conn[b], ph->req, resv_store_now(ph->store),
                              resv__monotonic_ms() + 5000, ph->answer, NULL, &err))
        bench_die(phase_names[p], &err);
    } else if (!resv_call(ph->type, ph->req, ph->answer, &err)) {
      bench_die("reserve", &err);
    }
  }
  int64_t t1 = bench_cpu_ns();
  if (p != BARE) bench_expect(phase_names[p], ph->answer, RESV_RESERVED);
  return t1 - t0;
}

/* The rounds (and a warm-up before them): each phase's CPU per call
 * (us[p][round]) and its ratio to bare (ratio[p][round]). */
static void run_rounds(phases_t *ph, int calls, int rounds, double us[][MAX_ROUNDS],
                       double ratio[][MAX_ROUNDS]) {
  for (int round = -1; round < rounds; round++) { /* round -1 warms up */
    int64_t ns[PHASES] = {0};
    if (RUNNING_ON_VALGRIND) {
      /* One phase after another, each dumped: a dump zeroes every
       * thread's counters (CALLGRIND_ZERO_STATS only the caller's), so
       * each phase's dump holds that phase alone. */
      if (round == 0) CALLGRIND_DUMP_STATS_AT("before");
      for (int p = 0; p < PHASES; p++) {
        ns[p] = run_phase(ph, p, calls);
        if (round == 0) CALLGRIND_DUMP_STATS_AT(phase_names[p]);
      }
    } else {
      /* Interleaved in blocks, the order turning each block, so that the
       * load of a shared machine, which changes by the second, falls on
       * the phases alike. */
      for (int done = 0, b = 0; done < calls; done += BLOCK, b++)
        for (int k = 0; k < PHASES; k++) {
          int p = (b + k) % PHASES;
          ns[p] += run_phase(ph, p, calls - done < BLOCK ? calls - done : BLOCK);
        }
    }
    if (round < 0) continue;
    for (int p = 0; p < PHASES; p++) {
      us[p][round] = (double)ns[p] / calls / 1000.0;
      ratio[p][round] = us[p][round] / us[BARE][round];
    }
  }
}

/* The medians of the rounds, and the spread of resv_call's ratio. */
static void print_figures(int calls, int rounds, double us[][MAX_ROUNDS],
                          double r[][MAX_ROUNDS]) {
  static const char *const rows[PHASES] = {
      "bare mongoc find_and_modify (baseline)",
      "resv__mongo_run_on, the caller's thread (no dispatcher)",
      "  the same, its layout check a constant true, same size",
      "resv_call (the caller's thread, public API)"};
  printf("== 2. client CPU per reserve on MongoDB (%d calls x %d rounds, medians)\n",
         calls, rounds);
  printf("  %-56s %8s %7s\n", "", "us/call", "ratio");
  for (int p = 0; p < PHASES; p++)
    printf("  %-56s %8.1f %7.2f\n", rows[p], bench_median(us[p], rounds),
           p == BARE ? 1.0 : bench_median(r[p], rounds));
  double *r_call = r[CALL], ratio = bench_median(r_call, rounds);
  double lo = r_call[0], hi = r_call[0];
  for (int i = 1; i < rounds; i++) {
    if (r_call[i] < lo) lo = r_call[i];
    if (r_call[i] > hi) hi = r_call[i];
  }
  printf("  resv_call / bare over the rounds: min %.2f, median %.2f, max %.2f\n", lo,
         ratio, hi);
  printf("  goal resv_call <= 1.15x bare: %s\n", ratio <= 1.15 ? "met" : "NOT met");
}

int main(int argc, char **argv) {
  const char *uri = bench_uri();
  int calls = argc > 1 ? atoi(argv[1]) : DEFAULT_CALLS;
  int rounds = argc > 2 ? atoi(argv[2]) : ROUNDS;
  if (!uri || calls <= 0 || rounds < 1 || rounds > MAX_ROUNDS) {
    fprintf(stderr, "usage: scripts/with-mongo cpu [calls [rounds]]\n");
    return 1;
  }
  resv_error_t err;
  resv_options_t o = {.uri = uri, .database = "bench_cpu", .threads = 1};
  resv_store_t *store = resv_store_open(&o, &err);
  if (!store) bench_die("open", &err);
  resv_type_t *type = resv_store_type(store, "bench", 5, "cpu", 3, &err);
  if (!type) bench_die("type", &err);
  resv_request_t req = request();
  resv_answer_t answer = {0};
  /* The type's set-up happens here, outside the figures. */
  if (!resv_call(type, &req, &answer, &err)) bench_die("reserve", &err);
  bench_expect("reserve", &answer, RESV_RESERVED);

  /* The baseline's own client, same URI and error API, same collection. */
  bson_error_t error;
  mongoc_uri_t *muri = mongoc_uri_new_with_error(uri, &error);
  mongoc_client_pool_t *pool = muri ? mongoc_client_pool_new_with_error(muri, &error) : NULL;
  if (!pool) {
    fprintf(stderr, "cpu: %s\n", error.message);
    return 1;
  }
  mongoc_client_pool_set_error_api(pool, MONGOC_ERROR_API_VERSION_2);
  mongoc_client_t *client = mongoc_client_pool_pop(pool);
  mongoc_collection_t *coll =
      mongoc_client_get_collection(client, "bench_cpu", resv_type_collection(type));
  /* The fields resv__mongo_run_on reads, as resv__mongo_open sets them;
   * unchecked's with a layout check that is always true. */
  resv__mongo_t backend[2];
  resv__mongo_conn_t conn[2];
  for (int b = 0; b < 2; b++) {
    backend[b] = (resv__mongo_t){
        .primary = mongoc_read_prefs_new(MONGOC_READ_PRIMARY),
        .database = (char *)"bench_cpu",
        .conforms = b ? same_size_true(backend[0].conforms) : resv__doc_conforms_new(),
        .max_holds = RESV__DEFAULT_MAX_HOLDS};
    backend[b].templates = resv__mongo_templates_new(&backend[b]);
    conn[b] = (resv__mongo_conn_t){
        .client = client,
        .coll = mongoc_client_get_collection(client, "bench_cpu", resv_type_collection(type))};
  }

  if (RUNNING_ON_VALGRIND) rounds = 1;
  double us[PHASES][MAX_ROUNDS], ratio[PHASES][MAX_ROUNDS];
  phases_t ph = {store, type, coll, {&conn[0], &conn[1]}, {&backend[0], &backend[1]}, &req,
                 &answer};
  run_rounds(&ph, calls, rounds, us, ratio);
  if (RUNNING_ON_VALGRIND) return 0; /* the figures are in the dumps */
  print_figures(calls, rounds, us, ratio);

  resv_answer_clear(&answer);
  for (int b = 0; b < 2; b++) {
    mongoc_read_prefs_destroy(backend[b].primary);
    bson_destroy(backend[b].conforms);
    resv__mongo_templates_free(backend[b].templates);
    resv__mongo_conn_forget(&conn[b]); /* its coll with it */
  }
  mongoc_collection_destroy(coll);
  mongoc_client_pool_push(pool, client);
  mongoc_client_pool_destroy(pool);
  mongoc_uri_destroy(muri);
  resv_store_close(store);
  return 0;
}
