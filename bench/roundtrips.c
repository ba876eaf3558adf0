/* roundtrips.c: how many commands each operation sends to MongoDB.
 *
 * Runs every operation of docs/design.md section 5 once through the public C API
 * against the server named by RESV_TEST_URI (scripts/with-mongo starts the
 * emulator) and counts the commands each one started, with mongoc's APM
 * callbacks (apm.c). A round trip is the physical cost of a call on a real
 * server, so each count is printed next to the minimum the design (docs/design.md) allows;
 * any extra is a bug. The baseline is that minimum: the ratio column is
 * measured / minimum.
 *
 * Every call waits for its answer (resv_call), so the commands counted
 * between two calls belong to the call between them. */
#include "apm.h"
#include "bench.h"

static resv_type_t *type;
static int extras;

static void report(const char *what, int expected, const resv_answer_t *a) {
  char names[512];
  int n = bench_apm_count();
  bench_apm_names(names, sizeof names);
  char ratio[16] = "-";
  if (expected) snprintf(ratio, sizeof ratio, "%.2f", (double)n / expected);
  printf("  %-36s %-10s %3d %7d %7s  %-5s %s\n", what,
         a ? resv_status_name(a->status) : "-", n, expected, ratio,
         n == expected ? "ok" : (n > expected ? "EXTRA" : "less"), names);
  if (n > expected) extras++;
  bench_apm_reset();
}

static resv_key_t key_of(const char *k) {
  resv_key_t key = {resv_cstr(""), resv_cstr("email"), resv_cstr(k)};
  return key;
}

static void call(const char *what, int expected, resv_request_t *r,
                 int32_t status) {
  resv_answer_t a = {0};
  resv_error_t err;
  bench_apm_reset();
  if (!resv_call(type, r, &a, &err)) bench_die(what, &err);
  report(what, expected, &a);
  bench_expect(what, &a, status);
  resv_answer_clear(&a);
}

/* The *_all ops of N keys (design.md section 5, "Several keys at once"):
 * one batch of every key's writes, whatever N, and one read unless the
 * batch's reply told every key's answer (a reserve_all of free keys, a
 * confirm_all of keys nobody else holds); a conflict adds the batch of
 * pulls and the batch of deletes that take its holds back; abandon_all's
 * deletes go only when a pull emptied a reservation. */
static void several_keys(resv_store_t *store, const char *context, resv_owner_t ann,
                         resv_owner_t bob) {
  static const size_t sizes[] = {1, 2, 8, 16};
  resv_key_t keys[16];
  char names[16][16], what[64];
  resv_error_t err;
  for (size_t i = 0; i < 16; i++) {
    snprintf(names[i], sizeof names[i], "all%zu@x", i);
    keys[i] = key_of(names[i]);
  }
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    size_t n = sizes[s];
    char aggregate[32];
    snprintf(aggregate, sizeof aggregate, "all%zu", n);
    type = resv_store_type(store, context, strlen(context), aggregate, strlen(aggregate), &err);
    if (!type) bench_die("type", &err);
    resv_request_t r = {.op = RESV_OP_GET, .key = key_of("warm@x")};
    resv_answer_t a = {0};
    if (!resv_call(type, &r, &a, &err)) bench_die("set-up", &err);
    resv_answer_clear(&a);
    bench_apm_reset();
    r = (resv_request_t){.op = RESV_OP_RESERVE_ALL, .keys = keys, .nkeys = n, .owner = ann,
                         .attempt = resv_cstr("c1"), .ttl_ms = 60000};
    snprintf(what, sizeof what, "reserve_all, %zu free keys", n);
    call(what, 1, &r, RESV_RESERVED);
    snprintf(what, sizeof what, "reserve_all, %zu held by itself", n);
    call(what, 2, &r, RESV_RESERVED);
    r.owner = bob;
    snprintf(what, sizeof what, "reserve_all, %zu held (conflict)", n);
    call(what, 2, &r, RESV_CONFLICT);
    /* A conflict on the last key only: the others are taken back. */
    r.owner = ann;
    r.op = RESV_OP_ABANDON_ALL;
    r.nkeys = n > 1 ? n - 1 : n;
    snprintf(what, sizeof what, "abandon_all, %zu keys", r.nkeys);
    call(what, 3, &r, RESV_ABANDONED);
    if (n > 1) {
      r = (resv_request_t){.op = RESV_OP_RESERVE_ALL, .keys = keys, .nkeys = n, .owner = bob,
                           .attempt = resv_cstr("c2"), .ttl_ms = 60000};
      snprintf(what, sizeof what, "reserve_all, %zu, 1 held (conflict)", n);
      call(what, 4, &r, RESV_CONFLICT);
    }
    /* A sign-up: reserve_all of free keys, confirm_all of its holds. */
    r = (resv_request_t){.op = RESV_OP_RESERVE_ALL, .keys = keys, .nkeys = n > 1 ? n - 1 : n,
                         .owner = ann, .attempt = resv_cstr("c3"), .ttl_ms = 60000};
    snprintf(what, sizeof what, "reserve_all, %zu free keys again", r.nkeys);
    call(what, 1, &r, RESV_RESERVED);
    r.op = RESV_OP_CONFIRM_ALL;
    r.version = 3;
    snprintf(what, sizeof what, "confirm_all, %zu reserved keys", r.nkeys);
    call(what, 1, &r, RESV_CONFIRMED);
    r.op = RESV_OP_ABANDON_ALL;
    snprintf(what, sizeof what, "abandon_all, %zu confirmed (kept)", r.nkeys);
    call(what, 2, &r, RESV_ABANDONED);
    r.op = RESV_OP_CONFIRM_ALL;
    r.version = 2;
    snprintf(what, sizeof what, "confirm_all, %zu at a later version", r.nkeys);
    call(what, 2, &r, RESV_CONFIRMED);
  }
}

int main(int argc, char **argv) {
  const char *uri = bench_uri();
  bool mongos = argc > 1 && strcmp(argv[1], "--mongos") == 0;
  if (!uri) {
    fprintf(stderr, "roundtrips: RESV_TEST_URI is not set (run under scripts/with-mongo)\n");
    return 1;
  }
  bench_apm_enable();
  bench_apm_reset();

  resv_error_t err;
  resv_options_t o = {.uri = uri, .database = "bench_rt", .threads = 2};
  resv_store_t *store = resv_store_open(&o, &err);
  if (!store) bench_die("open", &err);

  char desc[256];
  resv_store_describe(store, desc, sizeof desc);
  printf("== 1. round trips per operation (%s)\n", desc);
  printf("  %-36s %-10s %3s %7s %7s  %-5s %s\n", "operation", "answer", "cmd",
         "minimum", "ratio", "", "commands");
  /* The start-up check needs one round trip: the connection's hello
   * handshake proves the server answers and says whether it is a mongos.
   * A handshake is not an APM command, so the minimum counted is 0 (before
   * d95f6bf the check also sent ping, hello and endSessions: 3). */
  report("open (hello handshake only)", 0, NULL);

  char context[64];
  snprintf(context, sizeof context, "rt%lld", (long long)bench_wall_ns());
  type = resv_store_type(store, context, strlen(context), "user", 4, &err);
  if (!type) bench_die("type", &err);
  report("store_type (creates nothing)", 0, NULL);

  resv_owner_t ann = {resv_cstr(""), resv_cstr("ann")};
  resv_owner_t bob = {resv_cstr(""), resv_cstr("bob")};
  resv_request_t r;

  /* The type's first call: set-up, then the reserve. The minimum is the
   * set-up the design (docs/design.md) describes (create, the check of the
   * collection's options (docs/mongodb-collections.md), read the format
   * record, write it; on a mongos also read config.collections,
   * enableSharding, the shard key's index that a collection holding
   * documents needs before shardCollection (docs/design.md section 12),
   * shardCollection) plus the reserve's one. */
  int first_min = mongos ? 9 : 5;
  r = (resv_request_t){.op = RESV_OP_RESERVE, .key = key_of("a@x"),
                       .owner = ann, .attempt = resv_cstr("c1"), .ttl_ms = 60000};
  call("reserve, first call of the type", first_min, &r, RESV_RESERVED);
  r.key = key_of("b@x");
  call("reserve a free key", 1, &r, RESV_RESERVED);
  call("reserve again, same attempt", 1, &r, RESV_RESERVED);
  r.attempt = resv_cstr("c2");
  call("reserve, same owner, new attempt", 1, &r, RESV_RESERVED);
  r.owner = bob;
  /* A conflict is the upsert's duplicate key, then a read of the holder
   * (docs/design.md section 5): two round trips by design. */
  call("reserve, held by another (conflict)", 2, &r, RESV_CONFLICT);

  r = (resv_request_t){.op = RESV_OP_CONFIRM, .key = key_of("b@x"),
                       .owner = ann, .version = 3};
  call("confirm own pending", 1, &r, RESV_CONFIRMED);
  call("confirm again", 1, &r, RESV_CONFIRMED);
  r.key = key_of("c@x");
  call("confirm a free key", 1, &r, RESV_CONFIRMED);
  r.owner = bob;
  call("confirm, held by another (conflict)", 2, &r, RESV_CONFLICT);

  r = (resv_request_t){.op = RESV_OP_GET, .key = key_of("b@x")};
  call("get (confirmed)", 1, &r, RESV_CONFIRMED);
  r.key = key_of("nobody@x");
  call("get (absent)", 1, &r, RESV_ABSENT);

  r = (resv_request_t){.op = RESV_OP_ABANDON, .key = key_of("a@x"),
                       .owner = ann, .attempt = resv_cstr("c1")};
  /* abandon is docs/design.md section 5's two writes: the pull (a findAndModify
   * returning what it left, which decides the answer), then the delete. */
  call("abandon last hold", 2, &r, RESV_ABANDONED);
  /* When the pull matched nothing there is no delete to send (nothing of
   * the owner's was there), and one read tells an absent reservation from
   * a document that is not a reservation, which answers format (docs/design.md
   * section 12); only then. (3 before the pull returned what it left:
   * update, delete, find.) */
  call("abandon (absent)", 2, &r, RESV_ABSENT);
  r.key = key_of("b@x");
  call("abandon a confirmed one (kept)", 2, &r, RESV_KEPT);

  r = (resv_request_t){.op = RESV_OP_RELEASE, .key = key_of("b@x"), .owner = ann};
  call("release", 1, &r, RESV_RELEASED);
  call("release (absent)", 2, &r, RESV_ABSENT); /* the same read */

  /* A second type pays its own set-up once; the first type never again. */
  resv_type_t *second = resv_store_type(store, context, strlen(context), "team", 4, &err);
  if (!second) bench_die("type", &err);
  type = second;
  r = (resv_request_t){.op = RESV_OP_RESERVE, .key = key_of("a@x"),
                       .owner = ann, .attempt = resv_cstr("c1"), .ttl_ms = 60000};
  call("reserve, first call of a 2nd type", first_min, &r, RESV_RESERVED);
  r.key = key_of("d@x");
  call("reserve a free key (2nd type)", 1, &r, RESV_RESERVED);

  several_keys(store, context, ann, bob);

  resv_store_close(store);
  printf("  extra round trips: %d operation(s) over the minimum%s\n", extras,
         extras ? "  <-- a bug to fix" : "");
  return 0;
}
