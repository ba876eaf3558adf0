/* test_mongo_calls.c: the MongoDB store's calls against a server, in
 * the mongo_store suite: racing reserves and stores setting up one
 * collection, churn on hot keys, and documents of another format or not
 * reservations at all, refused and never written. Runs against
 * RESV_TEST_URI (scripts/with-mongo) and fails, never skips, when it is
 * unset; the format tests look at the collection with a plain mongoc
 * client, not through the store. */
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mongo_internal.h"
#include "emu.h"
#include "tests.h"
#include "mongo_store_test.h"


typedef struct racer {
  resv_type_t *type;
  const char *key;
  char owner[32];
  resv_answer_t answer;
  resv_error_t err;
  bool ok;
  pthread_barrier_t *start;
} racer_t;

static void *race_reserve(void *arg) {
  racer_t *r = arg;
  resv_key_t k = test_key("email", r->key);
  resv_owner_t o = test_owner("", r->owner);
  pthread_barrier_wait(r->start);
  r->ok = resv_reserve(r->type, &k, &o, resv_cstr("attempt"), 60000,
                       &r->answer, &r->err);
  return NULL;
}

/* N stores on one new collection (N processes starting at once), each
 * reserving the same free key: the set-up is done without error by all,
 * one format record is written, one reserve wins and the others answer
 * conflict naming the winner. */
static void race(int nstores, int nthreads) {
  enum { MAX = 16 };
  const char *uri = test_mongo_uri();
  resv_store_t *stores[MAX];
  racer_t racers[MAX];
  pthread_t threads[MAX];
  pthread_barrier_t start;
  char aggregate[64];
  int reserved = 0, conflicts = 0, winner = -1;
  emu_raw_t r;

  unique_name(aggregate, sizeof aggregate, "race");
  for (int i = 0; i < nstores; i++)
    stores[i] = test_open(uri);
  pthread_barrier_init(&start, NULL, (unsigned)nthreads);
  for (int i = 0; i < nthreads; i++) {
    memset(&racers[i], 0, sizeof racers[i]);
    racers[i].type = named_type(stores[i % nstores], aggregate);
    racers[i].key = "racy@example.com";
    snprintf(racers[i].owner, sizeof racers[i].owner, "owner-%d", i);
    racers[i].start = &start;
    pthread_create(&threads[i], NULL, race_reserve, &racers[i]);
  }
  for (int i = 0; i < nthreads; i++)
    pthread_join(threads[i], NULL);
  for (int i = 0; i < nthreads; i++) {
    ck_assert_msg(racers[i].ok, "racer %d: %s: %s", i,
                  resv_code_name(racers[i].err.code), racers[i].err.message);
    if (racers[i].answer.status == RESV_RESERVED) {
      reserved++;
      winner = i;
    } else {
      ck_assert_int_eq(racers[i].answer.status, RESV_CONFLICT);
      conflicts++;
    }
  }
  ck_assert_int_eq(reserved, 1);
  ck_assert_int_eq(conflicts, nthreads - 1);
  for (int i = 0; i < nthreads; i++) {
    if (i != winner)
      ck_assert(test_str_is(racers[i].answer.owner_id, racers[winner].owner));
    resv_answer_clear(&racers[i].answer);
  }
  emu_raw_open(&r, uri, resv_type_collection(racers[0].type));
  ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": \"format\"}"), 1);
  ck_assert_int_eq(emu_raw_count(&r, "{}"), 2);
  emu_raw_close(&r);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < nstores; i++)
    resv_store_close(stores[i]);
}

START_TEST(test_racing_reserves_of_a_free_key_one_wins) { race(1, 8); }
END_TEST

START_TEST(test_racing_stores_set_up_one_collection_once) { race(4, 8); }
END_TEST

/* Churn: threads of two stores reserve, abandon and release two keys as
 * different owners, so duplicate keys meet keys freed again in between
 * (the retried upsert). No call may fail, and every answer must be
 * coherent: reserved is ours, a conflict names someone else. */
typedef struct churner {
  resv_type_t *type;
  int id;
  int calls, conflicts;
  char failure[600];
} churner_t;

static void *churn(void *arg) {
  churner_t *c = arg;
  char owner[16];
  resv_answer_t a = {0};
  resv_error_t err;
  uint64_t rng = 0x2545f4914f6cdd1dULL * (uint64_t)(c->id + 1);
  int64_t until = resv__monotonic_ms() + 1500;

  snprintf(owner, sizeof owner, "o%d", c->id);
  while (resv__monotonic_ms() < until && !c->failure[0]) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    resv_key_t k = test_key("email", rng & 1 ? "hot1" : "hot2");
    resv_owner_t o = test_owner("", owner);
    bool ok;
    switch ((rng >> 8) % 3) {
    case 0:
      ok = resv_reserve(c->type, &k, &o, resv_cstr("a"), 60000, &a, &err);
      if (ok && a.status == RESV_RESERVED && !test_str_is(a.owner_id, owner))
        snprintf(c->failure, sizeof c->failure, "reserved for someone else");
      if (ok && a.status == RESV_CONFLICT && test_str_is(a.owner_id, owner))
        snprintf(c->failure, sizeof c->failure, "conflict with ourselves");
      if (ok && a.status == RESV_CONFLICT)
        c->conflicts++;
      break;
    case 1:
      ok = resv_abandon(c->type, &k, &o, resv_cstr("a"), &a, &err);
      break;
    default:
      ok = resv_release(c->type, &k, &o, &a, &err);
      break;
    }
    if (!ok)
      snprintf(c->failure, sizeof c->failure, "%s: %s", resv_code_name(err.code),
               err.message);
    c->calls++;
  }
  resv_answer_clear(&a);
  return NULL;
}

START_TEST(test_churn_on_hot_keys_stays_coherent) {
  enum { N = 8 };
  const char *uri = test_mongo_uri();
  resv_store_t *stores[2] = {test_open(uri), test_open(uri)};
  churner_t cs[N];
  pthread_t threads[N];
  char aggregate[64];
  int calls = 0, conflicts = 0;

  unique_name(aggregate, sizeof aggregate, "churn");
  for (int i = 0; i < N; i++) {
    memset(&cs[i], 0, sizeof cs[i]);
    cs[i].type = named_type(stores[i % 2], aggregate);
    cs[i].id = i;
    pthread_create(&threads[i], NULL, churn, &cs[i]);
  }
  for (int i = 0; i < N; i++)
    pthread_join(threads[i], NULL);
  for (int i = 0; i < N; i++) {
    ck_assert_msg(!cs[i].failure[0], "thread %d: %s", i, cs[i].failure);
    calls += cs[i].calls;
    conflicts += cs[i].conflicts;
  }
  ck_assert_int_gt(calls, 50);
  ck_assert_int_gt(conflicts, 0);
  resv_answer_t a = {0};
  test_get(cs[0].type, "hot1", &a); /* still decodes */
  resv_answer_clear(&a);
  resv_store_close(stores[0]);
  resv_store_close(stores[1]);
}
END_TEST

START_TEST(test_other_format_is_refused_and_nothing_written) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  char aggregate[64];
  resv_error_t err;
  emu_raw_t r;

  unique_name(aggregate, sizeof aggregate, "fmt");
  resv_type_t *t = named_type(s, aggregate);
  emu_raw_open(&r, uri, resv_type_collection(t));
  emu_raw_insert(&r, "{\"_id\": \"format\", \"format\": 2}");

  resv_request_t reqs[] = {
      {.op = RESV_OP_RESERVE, .key = test_key("email", "a"),
       .owner = test_owner("", "u"), .attempt = resv_cstr("x"), .ttl_ms = 100},
      {.op = RESV_OP_CONFIRM, .key = test_key("email", "a"),
       .owner = test_owner("", "u"), .version = 1},
      {.op = RESV_OP_GET, .key = test_key("email", "a")},
  };
  for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
    ck_assert_msg(call_fails(t, &reqs[i], RESV_EFORMAT, &err), "op %d: %s: %s",
                  reqs[i].op, resv_code_name(err.code), err.message);
    ck_assert_msg(strstr(err.message, "format 2"), "%s", err.message);
  }
  ck_assert_int_eq(emu_raw_count(&r, "{}"), 1);
  ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": \"format\", \"format\": 2}"), 1);

  /* A record without a numeric format is refused too. */
  unique_name(aggregate, sizeof aggregate, "fmt");
  t = named_type(s, aggregate);
  emu_raw_close(&r);
  emu_raw_open(&r, uri, resv_type_collection(t));
  emu_raw_insert(&r, "{\"_id\": \"format\", \"format\": \"one\"}");
  ck_assert(call_fails(t, &reqs[0], RESV_EFORMAT, &err));
  ck_assert_int_eq(emu_raw_count(&r, "{}"), 1);
  emu_raw_close(&r);
  resv_store_close(s);
}
END_TEST

START_TEST(test_foreign_document_is_format_error) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "foreign");
  resv_answer_t a = {0};
  resv_error_t err;
  emu_raw_t r;

  test_get(t, "x", &a); /* sets the collection up */
  emu_raw_open(&r, uri, resv_type_collection(t));
  emu_raw_insert(&r, "{\"_id\": {\"t\": \"\", \"n\": \"email\", \"k\": \"odd\"},"
                 " \"tenant_id\": \"\", \"key\": \"odd\", \"who\": \"someone\"}");
  resv_request_t get = {.op = RESV_OP_GET, .key = test_key("email", "odd")};
  ck_assert(call_fails(t, &get, RESV_EFORMAT, &err));
  resv_request_t reserve = {.op = RESV_OP_RESERVE, .key = test_key("email", "odd"),
                            .owner = test_owner("", "u"),
                            .attempt = resv_cstr("x"), .ttl_ms = 100};
  ck_assert_msg(call_fails(t, &reserve, RESV_EFORMAT, &err), "%s: %s",
                resv_code_name(err.code), err.message);
  ck_assert_int_eq(emu_raw_count(&r, "{\"who\": \"someone\"}"), 1);

  /* A document at the key's _id whose tenant_id is not the _id's: the
   * reserve's upsert meets its _id, and the duplicate-key path reads it
   * by _id and refuses it rather than retrying against it. */
  emu_raw_insert(&r, "{\"_id\": {\"t\": \"\", \"n\": \"email\", \"k\": \"odd2\"},"
                 " \"tenant_id\": \"elsewhere\", \"key\": \"odd2\","
                 " \"owner\": {\"tenant_id\": \"\", \"id\": \"v\"},"
                 " \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}");
  reserve.key = test_key("email", "odd2");
  ck_assert_msg(call_fails(t, &reserve, RESV_EFORMAT, &err), "%s: %s",
                resv_code_name(err.code), err.message);
  emu_raw_close(&r);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* Documents at a key's _id that are not format-1 reservations, each held
 * by owner {"", "u"} at its own key. The first six are the cases issue 11
 * found rewritten or deleted by the owner's own calls. */
#define NR_ID(k) "{\"_id\": {\"t\": \"\", \"n\": \"email\", \"k\": \"" k "\"}, "
#define NR_HEAD(k) NR_ID(k) "\"tenant_id\": \"\", \"key\": \"" k "\", "
#define NR_OWNER "\"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, "
#define NR_LATER "\"expires_at\": {\"$numberLong\": \"9000000000000\"}, "
static const struct not_reservation {
  const char *key, *json;
  bool routed_away; /* tenant_id is not the _id's: on a mongos its shard
                       key routes elsewhere, so a read by F(key) misses it */
} not_reservations[] = {
    {"dbl", NR_HEAD("dbl") NR_OWNER
     "\"expires_at\": {\"$numberDouble\": \"1.0\"}, \"holds\": [\"x\"]}", false},
    {"str", NR_HEAD("str") NR_OWNER
     "\"expires_at\": \"9000000000000\", \"holds\": [\"x\"]}", false},
    {"dup", NR_HEAD("dup") NR_OWNER NR_LATER "\"holds\": [\"x\", \"x\"]}", false},
    {"extra", NR_HEAD("extra") NR_OWNER NR_LATER
     "\"holds\": [\"x\"], \"note\": \"hi\"}", false},
    {"order", NR_ID("order") "\"key\": \"order\", \"tenant_id\": \"\", "
     NR_OWNER NR_LATER "\"holds\": [\"x\"]}", false},
    {"tenant", NR_ID("tenant") "\"tenant_id\": \"elsewhere\", \"key\": \"tenant\", "
     NR_OWNER NR_LATER "\"holds\": [\"x\"]}", true},
    {"negver", NR_HEAD("negver") NR_OWNER
     "\"expires_at\": null, \"version\": {\"$numberLong\": \"-1\"}}", false},
    {"owner3", NR_HEAD("owner3")
     "\"owner\": {\"tenant_id\": \"\", \"id\": \"u\", \"x\": 1}, "
     NR_LATER "\"holds\": [\"x\"]}", false},
    {"emptyhold", NR_HEAD("emptyhold") NR_OWNER NR_LATER "\"holds\": [\"\"]}", false},
};

static void id_filter(bson_t *filter, const char *key) {
  bson_t id;
  bson_init(filter);
  bson_append_document_begin(filter, "_id", -1, &id);
  BSON_APPEND_UTF8(&id, "t", "");
  BSON_APPEND_UTF8(&id, "n", "email");
  BSON_APPEND_UTF8(&id, "k", key);
  bson_append_document_end(filter, &id);
}

/* The stored bytes of the document at key's _id into out (bson_destroy
 * it); false when there is none. */
static bool stored_at(emu_raw_t *r, const char *key, bson_t *out) {
  bson_t filter;
  bson_error_t error;
  const bson_t *doc;
  bool found;

  id_filter(&filter, key);
  mongoc_cursor_t *c = mongoc_collection_find_with_opts(r->coll, &filter, NULL, NULL);
  found = mongoc_cursor_next(c, &doc);
  if (found)
    bson_copy_to(doc, out);
  ck_assert_msg(!mongoc_cursor_error(c, &error), "find: %s", error.message);
  mongoc_cursor_destroy(c);
  bson_destroy(&filter);
  return found;
}

START_TEST(test_document_not_a_reservation_is_never_written_and_answers_format) {
  static const char *const op_names[] = {[RESV_OP_RESERVE] = "reserve",
      [RESV_OP_CONFIRM] = "confirm", [RESV_OP_ABANDON] = "abandon",
      [RESV_OP_RELEASE] = "release", [RESV_OP_GET] = "get"};
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "notres");
  bool sharded = resv_store_is_sharded(s);
  char failures[8192] = "";
  resv_answer_t a = {0};
  resv_error_t err;
  emu_raw_t r;

  test_get(t, "setup", &a); /* sets the collection up */
  resv_answer_clear(&a);
  emu_raw_open(&r, uri, resv_type_collection(t));
  for (size_t i = 0; i < sizeof not_reservations / sizeof not_reservations[0]; i++) {
    const struct not_reservation *nr = &not_reservations[i];
    bson_error_t error;
    bson_t *want = bson_new_from_json((const uint8_t *)nr->json, -1, &error);
    ck_assert_msg(want, "%s: %s", nr->json, error.message);
    emu_raw_insert(&r, nr->json);

    resv_key_t k = test_key("email", nr->key);
    resv_owner_t u = test_owner("", "u"), v = test_owner("", "v");
    resv_request_t calls[] = {
        {.op = RESV_OP_RESERVE, .key = k, .owner = u, .attempt = resv_cstr("y"),
         .ttl_ms = 60000},
        {.op = RESV_OP_RESERVE, .key = k, .owner = u, .attempt = resv_cstr("x"),
         .ttl_ms = 60000},
        {.op = RESV_OP_CONFIRM, .key = k, .owner = u, .version = 7},
        {.op = RESV_OP_ABANDON, .key = k, .owner = u, .attempt = resv_cstr("x")},
        {.op = RESV_OP_RELEASE, .key = k, .owner = u},
        {.op = RESV_OP_GET, .key = k},
        {.op = RESV_OP_RESERVE, .key = k, .owner = v, .attempt = resv_cstr("z"),
         .ttl_ms = 60000},
        {.op = RESV_OP_CONFIRM, .key = k, .owner = v, .version = 1},
    };
    for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
      resv_request_t *req = &calls[c];
      bool routed_read = sharded && nr->routed_away &&
                         (req->op == RESV_OP_GET || req->op == RESV_OP_ABANDON ||
                          req->op == RESV_OP_RELEASE);
      /* On a mongos a read by F(key) goes to the shard of the key's
       * tenant_id, where this document is not: absent. */
      bool ok = resv_call(t, req, &a, &err);
      bson_t got;

      bool right = routed_read ? ok && a.status == RESV_ABSENT
                               : !ok && err.code == RESV_EFORMAT;
      bool kept = stored_at(&r, nr->key, &got);
      bool same = kept && got.len == want->len &&
                  memcmp(bson_get_data(&got), bson_get_data(want),
                         want->len) == 0;
      /* Every case is tried, and every wrong one listed. */
      if (!right || !same) {
        size_t used = strlen(failures);
        snprintf(failures + used, sizeof failures - used,
                 "\n  %s, %s by %s: answered %s%s", nr->key,
                 op_names[req->op], req->op == RESV_OP_GET ? "anyone" : test_str_is(req->owner.id, "u") ? "u" : "v",
                 ok ? resv_status_name(a.status) : resv_code_name(err.code),
                 !kept ? ", deleted it" : !same ? ", rewrote it" : "");
      }
      resv_answer_clear(&a);
      if (kept)
        bson_destroy(&got);
      if (!same) { /* put it back for the next call */
        bson_t filter;
        id_filter(&filter, nr->key);
        ck_assert(mongoc_collection_delete_many(r.coll, &filter, NULL, NULL, &error));
        bson_destroy(&filter);
        emu_raw_insert(&r, nr->json);
      }
    }
    bson_destroy(want);
  }
  ck_assert_msg(failures[0] == '\0', "%s", failures);
  emu_raw_close(&r);
  resv_store_close(s);
}
END_TEST
void mongo_store_add_call_tests(TCase *tc) {
  const TTest *tests[] = {
      test_racing_reserves_of_a_free_key_one_wins,
      test_racing_stores_set_up_one_collection_once, test_churn_on_hot_keys_stays_coherent,
      test_other_format_is_refused_and_nothing_written,
      test_foreign_document_is_format_error,
      test_document_not_a_reservation_is_never_written_and_answers_format, NULL};
  test_tcase_add(tc, tests);
}
