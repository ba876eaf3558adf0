/* test_mongo_store.c: the MongoDB store against a server.
 *
 * Runs against RESV_TEST_URI (scripts/with-mongo: MONGODB_URI or a fresh
 * emulator) and fails, never skips, when it is unset. The layout test
 * reads the documents back with pymongo (layout_check.py), an independent
 * client, and compares them with docs/design.md section 3 as canonical extended
 * JSON, field order and number types included. The sharding tests need a
 * mongos: RESV_TEST_URI when it is one, else an emulator started here with
 * --mongos. Setting-up and refusal tests look at the collection with a
 * plain mongoc client, not through the store. */
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

extern char **environ;

/* ---- helpers ---------------------------------------------------------- */

/* Runs argv, its stdout into out (NUL-terminated); returns its status. */
static int run_capture(char *const argv[], char *out, size_t size) {
  posix_spawn_file_actions_t fa;
  int fds[2], status = -1;
  size_t used = 0;
  pid_t pid;

  ck_assert(pipe(fds) == 0);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  ck_assert(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  for (;;) {
    ssize_t n = read(fds[0], out + used, size - 1 - used);
    if (n <= 0)
      break;
    used += (size_t)n;
  }
  out[used] = '\0';
  close(fds[0]);
  waitpid(pid, &status, 0);
  return status;
}

/* The layout of coll as layout_check.py prints it. */
static void layout_of(const char *uri, const char *coll, char *out,
                      size_t size) {
  char python[] = "/usr/bin/python3", script[] = "csrc/test/layout_check.py";
  char *argv[] = {python, script, (char *)uri, (char *)coll, NULL};
  int status = run_capture(argv, out, size);
  ck_assert_msg(status == 0, "layout_check.py failed (%d): %s", status, out);
}

static const char *db_of(const mongoc_uri_t *uri) {
  const char *db = mongoc_uri_get_database(uri);
  return db && *db ? db : "resv";
}

static bool raw_collection_exists(emu_raw_t *r, const char *collection) {
  bson_error_t error;
  mongoc_database_t *db = mongoc_client_get_database(r->client, db_of(r->uri));
  bool exists = mongoc_database_has_collection(db, collection, &error);
  mongoc_database_destroy(db);
  return exists;
}

/* A type on a collection name chosen here, so several stores (standing in
 * for several processes) can share it. */
static resv_type_t *named_type(resv_store_t *s, const char *aggregate) {
  resv_error_t err;
  resv_type_t *t =
      resv_store_type(s, "test", 4, aggregate, strlen(aggregate), &err);
  ck_assert_msg(t != NULL, "type: %s", err.message);
  return t;
}

static void unique_name(char *buf, size_t size, const char *prefix) {
  static int counter;
  snprintf(buf, size, "%s%dn%d", prefix, (int)getpid(), counter++);
}

static bool call_fails(resv_type_t *t, const resv_request_t *r, int32_t code,
                       resv_error_t *err) {
  resv_answer_t a = {0};
  bool ok = resv_call(t, r, &a, err);
  resv_answer_clear(&a);
  return !ok && err->code == code;
}

/* ---- a mongos --------------------------------------------------------- */

/* A mongos to test against: RESV_TEST_URI when it is one (a real cluster,
 * or scripts/with-mongo --mongos), else an emulator of this test's own. */
typedef struct mongos {
  char uri[256];
  emu_t emu; /* emu.pid 0: RESV_TEST_URI is a mongos itself */
} mongos_t;

static void mongos_start(mongos_t *ms) {
  const char *uri = test_mongo_uri();
  resv_store_t *probe = test_open(uri);
  bool sharded = resv_store_is_sharded(probe);

  resv_store_close(probe);
  memset(ms, 0, sizeof *ms);
  if (sharded) {
    snprintf(ms->uri, sizeof ms->uri, "%s", uri);
    return;
  }
  emu_start(&ms->emu, 0, true);
  snprintf(ms->uri, sizeof ms->uri, "%s", ms->emu.uri);
}

static void mongos_stop(mongos_t *ms) { emu_stop(&ms->emu); }

/* ---- tests ------------------------------------------------------------ */

START_TEST(test_layout_is_spec_section_3_field_by_field) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "layout");
  resv_answer_t a = {0};
  resv_error_t err;
  char got[4096];
  resv_key_t k = {resv_cstr("t1"), resv_cstr("email"), resv_cstr("ann@example.com")};
  resv_owner_t o = test_owner("t2", "u-1");
  static const char format_line[] =
      "{\"_id\": \"format\", \"format\": {\"$numberInt\": \"1\"}}\n";
  static const char head[] =
      "{\"_id\": {\"t\": \"t1\", \"n\": \"email\", \"k\": \"ann@example.com\"}, "
      "\"tenant_id\": \"t1\", \"key\": \"ann@example.com\", "
      "\"owner\": {\"tenant_id\": \"t2\", \"id\": \"u-1\"}, ";
  char want[4096];

  resv_store_set_time(s, 1000);
  ck_assert(resv_reserve(t, &k, &o, resv_cstr("a1"), 100, &a, &err));
  ck_assert(resv_reserve(t, &k, &o, resv_cstr("a2"), 50, &a, &err));
  ck_assert_int_eq(a.status, RESV_RESERVED);
  layout_of(uri, resv_type_collection(t), got, sizeof got);
  snprintf(want, sizeof want,
           "%s%s\"expires_at\": {\"$numberLong\": \"1100\"}, "
           "\"holds\": [\"a1\", \"a2\"]}\n",
           format_line, head);
  ck_assert_str_eq(got, want);

  ck_assert(resv_confirm(t, &k, &o, 7, &a, &err));
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  layout_of(uri, resv_type_collection(t), got, sizeof got);
  snprintf(want, sizeof want,
           "%s%s\"expires_at\": null, \"version\": {\"$numberLong\": \"7\"}}\n",
           format_line, head);
  ck_assert_str_eq(got, want);

  /* A confirm of a free key creates it confirmed, in the same layout; a
   * takeover of an expired reservation rewrites it in the same layout. */
  ck_assert(resv_release(t, &k, &o, &a, &err));
  ck_assert(resv_confirm(t, &k, &o, 3, &a, &err));
  layout_of(uri, resv_type_collection(t), got, sizeof got);
  snprintf(want, sizeof want,
           "%s%s\"expires_at\": null, \"version\": {\"$numberLong\": \"3\"}}\n",
           format_line, head);
  ck_assert_str_eq(got, want);

  resv_owner_t other = test_owner("", "u-2");
  ck_assert(resv_release(t, &k, &o, &a, &err));
  ck_assert(resv_reserve(t, &k, &o, resv_cstr("a1"), 100, &a, &err));
  resv_store_set_time(s, 1100);
  ck_assert(resv_reserve(t, &k, &other, resv_cstr("$b"), 10, &a, &err));
  ck_assert_int_eq(a.status, RESV_RESERVED);
  layout_of(uri, resv_type_collection(t), got, sizeof got);
  snprintf(want, sizeof want,
           "%s{\"_id\": {\"t\": \"t1\", \"n\": \"email\", \"k\": \"ann@example.com\"}, "
           "\"tenant_id\": \"t1\", \"key\": \"ann@example.com\", "
           "\"owner\": {\"tenant_id\": \"\", \"id\": \"u-2\"}, "
           "\"expires_at\": {\"$numberLong\": \"1110\"}, \"holds\": [\"$b\"]}\n",
           format_line);
  ck_assert_str_eq(got, want);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

START_TEST(test_nothing_is_created_before_a_types_first_call) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "lazy");
  resv_answer_t a = {0};
  emu_raw_t r;

  emu_raw_open(&r, uri, resv_type_collection(t));
  ck_assert(!raw_collection_exists(&r, resv_type_collection(t)));
  test_get(t, "nobody", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  ck_assert(raw_collection_exists(&r, resv_type_collection(t)));
  ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": \"format\", \"format\": 1}"), 1);
  ck_assert_int_eq(emu_raw_count(&r, "{}"), 1);
  emu_raw_close(&r);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

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
  static const char *const op_names[] = {
      [RESV_OP_RESERVE] = "reserve", [RESV_OP_CONFIRM] = "confirm",
      [RESV_OP_ABANDON] = "abandon", [RESV_OP_RELEASE] = "release",
      [RESV_OP_GET] = "get"};
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

/* The w the backend opened on uri (with the write_concern option) sends
 * with every command: MONGOC_WRITE_CONCERN_W_MAJORITY, a number, or
 * INT32_MIN when the open failed (err says why). */
static int32_t opened_w(const char *uri, int32_t option, resv_error_t *err) {
  resv_options_t o = {.uri = uri, .threads = 1, .timeout_ms = 5000,
                      .write_concern = option};
  const resv__backend_ops_t *ops;
  char database[RESV__MAX_NAMESPACE] = "";
  resv__mongo_t *m =
      resv__mongo_open(&o, NULL, database, sizeof database, &ops, err);
  int32_t w;

  if (!m)
    return INT32_MIN;
  w = mongoc_write_concern_get_w(mongoc_uri_get_write_concern(m->uri));
  ops->destroy(m);
  return w;
}

/* uri with one more option ("w=2"), into out. */
static void uri_with(const char *uri, const char *option, char *out, size_t size) {
  snprintf(out, size, "%s%s%s", uri, strchr(uri, '?') ? "&" : (strchr(uri + 10, '/') ? "?" : "/?"),
           option);
}

START_TEST(test_writes_are_majority_unless_write_concern_says_otherwise) {
  const char *uri = test_mongo_uri();
  char with_w[512];
  resv_error_t err;

  ck_assert_int_eq(opened_w(uri, 0, &err), MONGOC_WRITE_CONCERN_W_MAJORITY);
  ck_assert_int_eq(opened_w(uri, RESV_WRITE_MAJORITY, &err),
                   MONGOC_WRITE_CONCERN_W_MAJORITY);
  ck_assert_int_eq(opened_w(uri, 1, &err), 1);
  ck_assert_int_eq(opened_w(uri, 3, &err), 3);
  /* A w the URI names is kept, unless the option says otherwise. */
  uri_with(uri, "w=2", with_w, sizeof with_w);
  ck_assert_int_eq(opened_w(with_w, 0, &err), 2);
  ck_assert_int_eq(opened_w(with_w, RESV_WRITE_MAJORITY, &err),
                   MONGOC_WRITE_CONCERN_W_MAJORITY);
  ck_assert_int_eq(opened_w(with_w, 1, &err), 1);
  /* Unacknowledged writes cannot tell reserved from conflict. */
  ck_assert_int_eq(opened_w(uri, -2, &err), INT32_MIN);
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, "write_concern"), "%s", err.message);
  uri_with(uri, "w=0", with_w, sizeof with_w);
  ck_assert_int_eq(opened_w(with_w, 0, &err), INT32_MIN);
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, "w=0"), "%s", err.message);
  ck_assert_int_eq(opened_w(with_w, RESV_WRITE_MAJORITY, &err), INT32_MIN);

  /* And the store works with each accepted one. */
  for (int32_t w = RESV_WRITE_MAJORITY; w <= 1; w++) {
    resv_options_t o = {.threads = 1, .write_concern = w};
    resv_store_t *s;
    resv_answer_t a = {0};
    if (w == 0)
      continue;
    s = emu_open(uri, o);
    resv_type_t *t = test_fresh_type(s, "wc");
    test_reserve(t, "k", "u", "a", 60000, &a);
    ck_assert_int_eq(a.status, RESV_RESERVED);
    resv_answer_clear(&a);
    resv_store_close(s);
  }
}
END_TEST

/* Whether the backend opened on uri asks for a direct connection: 1 yes,
 * 0 directConnection=false, -1 unset. */
static int opened_direct(const char *uri) {
  resv_options_t o = {.uri = uri, .threads = 1, .timeout_ms = 5000};
  const resv__backend_ops_t *ops;
  char database[RESV__MAX_NAMESPACE] = "";
  resv_error_t err;
  resv__mongo_t *m = resv__mongo_open(&o, NULL, database, sizeof database, &ops, &err);
  int direct;

  ck_assert_msg(m, "open %s: %s", uri, err.message);
  direct = !mongoc_uri_has_option(m->uri, MONGOC_URI_DIRECTCONNECTION)
               ? -1
               : mongoc_uri_get_option_as_bool(m->uri, MONGOC_URI_DIRECTCONNECTION,
                                               false);
  ops->destroy(m);
  return direct;
}

START_TEST(test_a_single_host_uri_discovers_the_set) {
  const char *uri = test_mongo_uri();
  mongoc_uri_t *parsed = mongoc_uri_new(uri);
  const mongoc_host_list_t *hosts = mongoc_uri_get_hosts(parsed);
  bool one_host = hosts && !hosts->next && !mongoc_uri_get_srv_hostname(parsed);
  bool names_it = mongoc_uri_get_replica_set(parsed) ||
                  mongoc_uri_has_option(parsed, MONGOC_URI_DIRECTCONNECTION) ||
                  mongoc_uri_get_srv_hostname(parsed);
  char with[512];

  mongoc_uri_destroy(parsed);
  /* scripts/with-mongo's emulator: one host, nothing said. */
  ck_assert_msg(!names_it || getenv("MONGODB_URI"), "%s", uri);
  if (!names_it)
    ck_assert_int_eq(opened_direct(uri), 0);
  /* A URI that asks for a direct connection keeps it. */
  if (one_host) {
    uri_with(uri, "directConnection=true", with, sizeof with);
    ck_assert_int_eq(opened_direct(with), 1);
  }
}
END_TEST

/* The find commands a backend's pool sends, as canonical extended JSON. */
typedef struct seen_finds {
  pthread_mutex_t mutex;
  int n;
  char json[4][2048];
} seen_finds_t;

static void on_command_started(const mongoc_apm_command_started_t *event) {
  seen_finds_t *seen = mongoc_apm_command_started_get_context(event);
  if (strcmp(mongoc_apm_command_started_get_command_name(event), "find") != 0)
    return;
  char *json = bson_as_canonical_extended_json(
      mongoc_apm_command_started_get_command(event), NULL);
  pthread_mutex_lock(&seen->mutex);
  if (seen->n < 4)
    snprintf(seen->json[seen->n], sizeof seen->json[0], "%s", json);
  seen->n++;
  pthread_mutex_unlock(&seen->mutex);
  bson_free(json);
}

/* docs/design.md section 12: the read after a duplicate key uses read concern local
 * from the primary whatever the URI says, and on a mongos names the whole
 * shard key. The backend is opened on a URI asking readConcernLevel=
 * majority and its find commands are watched with command monitoring. */
START_TEST(test_the_read_after_a_duplicate_key_is_local_and_names_the_shard_key) {
  const char *uri = test_mongo_uri();
  char majority[512], database[RESV__MAX_NAMESPACE] = "";
  seen_finds_t seen = {.mutex = PTHREAD_MUTEX_INITIALIZER};
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "dupread");
  resv_answer_t a = {0};
  resv_error_t err;
  const resv__backend_ops_t *ops;

  test_reserve(t, "k", "ann", "a", 600000, &a); /* ann holds k */
  uri_with(uri, "readConcernLevel=majority", majority, sizeof majority);
  resv_options_t o = {.uri = majority, .threads = 1, .timeout_ms = 5000};
  resv__mongo_t *m = resv__mongo_open(&o, NULL, database, sizeof database, &ops, &err);
  ck_assert_msg(m, "%s", err.message);
  /* A pool of the test's own, with the backend's URI: the backend's pool
   * has the store's callbacks (mongo_skew.c), and a pool takes one set. */
  mongoc_client_pool_t *pool = mongoc_client_pool_new(m->uri);
  mongoc_client_pool_set_error_api(pool, MONGOC_ERROR_API_VERSION_2);
  mongoc_apm_callbacks_t *callbacks = mongoc_apm_callbacks_new();
  mongoc_apm_set_command_started_cb(callbacks, on_command_started);
  ck_assert(mongoc_client_pool_set_apm_callbacks(pool, callbacks, &seen));
  mongoc_client_t *client = mongoc_client_pool_pop(pool);
  mongoc_collection_t *coll =
      mongoc_client_get_collection(client, m->database, resv_type_collection(t));

  /* bob's reserve meets ann's document on the _id index: the conflict
   * path reads it. */
  resv_request_t bob = {.op = RESV_OP_RESERVE, .key = test_key("email", "k"),
                        .owner = test_owner("", "bob"), .attempt = resv_cstr("b"),
                        .ttl_ms = 60000};
  ck_assert_msg(resv__mongo_run(m, coll, &bob, resv_store_now(s),
                                resv__monotonic_ms() + 5000, &a, NULL, &err),
                "%s", err.message);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(seen.n, 1);
  ck_assert_msg(strstr(seen.json[0], "\"readConcern\" : { \"level\" : \"local\" }"),
                "%s", seen.json[0]);
  const char *filter =
      m->is_mongos ? "\"filter\" : { \"_id\" : { \"t\" : \"\", \"n\" : \"email\", "
                     "\"k\" : \"k\" }, \"tenant_id\" : \"\", \"key\" : \"k\" }"
                   : "\"filter\" : { \"_id\" : { \"t\" : \"\", \"n\" : \"email\", "
                     "\"k\" : \"k\" } }";
  ck_assert_msg(strstr(seen.json[0], filter), "%s", seen.json[0]);

  /* A get keeps the URI's read concern: the URI's option did arrive. */
  resv_request_t get = {.op = RESV_OP_GET, .key = test_key("email", "k")};
  ck_assert(resv__mongo_run(m, coll, &get, resv_store_now(s),
                            resv__monotonic_ms() + 5000, &a, NULL, &err));
  ck_assert_int_eq(seen.n, 2);
  ck_assert_msg(strstr(seen.json[1], "\"readConcern\" : { \"level\" : \"majority\" }"),
                "%s", seen.json[1]);

  resv_answer_clear(&a);
  mongoc_collection_destroy(coll);
  mongoc_client_pool_push(pool, client);
  mongoc_client_pool_destroy(pool);
  ops->destroy(m);
  mongoc_apm_callbacks_destroy(callbacks);
  resv_store_close(s);
}
END_TEST

/* docs/design.md section 12: a collection dropped while the store runs is set up
 * again, format record included, on the next call that finds it gone (a
 * get, or an abandon or release that matched nothing, reads the format
 * record with the key in the same find). On a mongos the format record
 * lives where the key does not route, so there the drop goes unseen: not
 * asserted. */
START_TEST(test_a_collection_dropped_under_a_running_store_is_set_up_again) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "dropped");
  resv_answer_t a = {0};
  bson_error_t error;
  emu_raw_t r;

  if (resv_store_is_sharded(s)) {
    resv_store_close(s);
    return;
  }
  test_reserve(t, "k1", "u", "a", 60000, &a);
  emu_raw_open(&r, uri, resv_type_collection(t));
  ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": \"format\"}"), 1);
  ck_assert_msg(mongoc_collection_drop(r.coll, &error), "%s", error.message);

  test_get(t, "k1", &a); /* finds it gone */
  ck_assert_int_eq(a.status, RESV_ABSENT);
  test_reserve(t, "k2", "u", "a", 60000, &a); /* sets it up again */
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": \"format\"}"), 1);
  ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": \"format\", \"format\": 1}"), 1);

  /* A drop seen by an abandon that matched nothing. */
  ck_assert(mongoc_collection_drop(r.coll, &error));
  test_abandon(t, "k2", "u", "a", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  test_get(t, "k3", &a);
  ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": \"format\"}"), 1);
  resv_answer_clear(&a);
  emu_raw_close(&r);
  resv_store_close(s);
}
END_TEST

/* The database: the option, else the URI's, else "resv". */
static void expect_database(const char *uri, const char *option, const char *want) {
  resv_options_t o = {.uri = uri, .database = option, .threads = 1};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  char text[512], tail[80];
  ck_assert_msg(s != NULL, "%s", err.message);
  resv_store_describe(s, text, sizeof text);
  snprintf(tail, sizeof tail, "/%s (", want);
  ck_assert_msg(strstr(text, tail), "\"%s\" lacks database %s", text, want);
  resv_store_close(s);
}

START_TEST(test_database_is_the_option_else_the_uris_else_resv) {
  const char *uri = test_mongo_uri();
  mongoc_uri_t *parsed = mongoc_uri_new(uri);
  const char *db = mongoc_uri_get_database(parsed);
  expect_database(uri, "fromoption", "fromoption");
  expect_database(uri, NULL, db && *db ? db : "resv");
  const mongoc_host_list_t *hosts = mongoc_uri_get_hosts(parsed);
  if (!mongoc_uri_get_username(parsed) && !mongoc_uri_get_replica_set(parsed) &&
      hosts && !hosts->next) {
    /* The same single server, named with a database in the path. */
    char with_db[300];
    snprintf(with_db, sizeof with_db, "mongodb://%s/fromuri?appname=x",
             hosts->host_and_port);
    expect_database(with_db, NULL, "fromuri");
  }
  mongoc_uri_destroy(parsed);
}
END_TEST

START_TEST(test_describe_names_the_host_and_topology) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  mongoc_uri_t *parsed = mongoc_uri_new(uri);
  char text[512];

  resv_store_describe(s, text, sizeof text);
  ck_assert_msg(strncmp(text, "mongodb ", 8) == 0, "%s", text);
  if (mongoc_uri_get_hosts(parsed))
    ck_assert_msg(strstr(text, mongoc_uri_get_hosts(parsed)->host_and_port),
                  "%s", text);
  if (mongoc_uri_get_password(parsed))
    ck_assert_msg(!strstr(text, mongoc_uri_get_password(parsed)), "%s", text);
  ck_assert(strstr(text, resv_store_is_sharded(s) ? "(mongos)" : "(mongod)"));
  mongoc_uri_destroy(parsed);
  resv_store_close(s);
}
END_TEST

/* A wrong password: whatever the server says (auth failure, or no auth at
 * all), the password is in no error message and not in describe. */
START_TEST(test_password_never_shows) {
  const char *uri = test_mongo_uri();
  const char *hosts = strstr(uri, "://"), *at;
  char with_password[512], text[512];
  resv_options_t o = {.threads = 1, .timeout_ms = 2000};
  resv_error_t err;

  hosts += 3;
  at = strchr(hosts, '@');
  if (at && (!strchr(hosts, '/') || at < strchr(hosts, '/')))
    hosts = at + 1;
  snprintf(with_password, sizeof with_password,
           "mongodb://resvtest:s3cr3t%%2Fpw@%s", hosts);
  o.uri = with_password;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) {
    ck_assert_msg(!strstr(err.message, "s3cr3t"), "%s", err.message);
    return;
  }
  resv_store_describe(s, text, sizeof text);
  ck_assert_msg(!strstr(text, "s3cr3t"), "%s", text);
  resv_type_t *t = test_fresh_type(s, "secret");
  resv_request_t get = {.op = RESV_OP_GET, .key = test_key("email", "a")};
  resv_answer_t a = {0};
  if (!resv_call(t, &get, &a, &err))
    ck_assert_msg(!strstr(err.message, "s3cr3t"), "%s", err.message);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* ---- sharded clusters -------------------------------------------------- */

static bool shard_key_is(const char *uri, const char *ns, const char *json) {
  emu_raw_t r;
  bson_t *filter = BCON_NEW("_id", BCON_UTF8(ns));
  bson_t *want = json ? bson_new_from_json((const uint8_t *)json, -1, NULL) : NULL;
  mongoc_collection_t *config;
  mongoc_cursor_t *cursor;
  const bson_t *doc;
  bson_iter_t it;
  bool same;

  emu_raw_open(&r, uri, "unused");
  config = mongoc_client_get_collection(r.client, "config", "collections");
  cursor = mongoc_collection_find_with_opts(config, filter, NULL, NULL);
  if (!mongoc_cursor_next(cursor, &doc)) {
    same = want == NULL;
  } else {
    ck_assert(bson_iter_init_find(&it, doc, "key") && BSON_ITER_HOLDS_DOCUMENT(&it));
    uint32_t len;
    const uint8_t *data;
    bson_t key;
    bson_iter_document(&it, &len, &data);
    bson_init_static(&key, data, len);
    char *got = bson_as_canonical_extended_json(&key, NULL);
    char *exp = want ? bson_as_canonical_extended_json(want, NULL) : NULL;
    same = exp && strcmp(got, exp) == 0;
    if (!same)
      fprintf(stderr, "shard key of %s: %s\n", ns, got);
    bson_free(got);
    bson_free(exp);
  }
  mongoc_cursor_destroy(cursor);
  mongoc_collection_destroy(config);
  emu_raw_close(&r);
  bson_destroy(filter);
  if (want)
    bson_destroy(want);
  return same;
}

START_TEST(test_mongos_shards_each_collection_on_first_use) {
  mongos_t ms;
  mongos_start(&ms);
  resv_store_t *s = test_open(ms.uri);
  resv_type_t *t = test_fresh_type(s, "sharded");
  resv_answer_t a = {0};
  char ns[300];

  ck_assert(resv_store_is_sharded(s));
  snprintf(ns, sizeof ns, "resv.%s", resv_type_collection(t));
  ck_assert(shard_key_is(ms.uri, ns, NULL));
  /* Every operation targets one shard, which the mongos enforces. */
  test_reserve(t, "k", "u1", "a1", 60000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert(shard_key_is(ms.uri, ns, "{\"tenant_id\": 1, \"key\": \"hashed\"}"));
  test_reserve(t, "k", "u2", "b1", 60000, &a);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  test_abandon(t, "k", "u1", "a1", &a);
  ck_assert_int_eq(a.status, RESV_ABANDONED);
  test_confirm(t, "k", "u2", 4, &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  test_get(t, "k", &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  test_release(t, "k", "u2", &a);
  ck_assert_int_eq(a.status, RESV_RELEASED);
  resv_answer_clear(&a);
  resv_store_close(s);
  mongos_stop(&ms);
}
END_TEST

START_TEST(test_mongos_collection_sharded_on_another_key_is_refused) {
  mongos_t ms;
  mongos_start(&ms);
  resv_store_t *s = test_open(ms.uri);
  resv_type_t *t = test_fresh_type(s, "otherkey");
  resv_error_t err;
  bson_error_t error;
  char ns[300];
  emu_raw_t r;

  snprintf(ns, sizeof ns, "resv.%s", resv_type_collection(t));
  emu_raw_open(&r, ms.uri, resv_type_collection(t));
  bson_t *cmd = BCON_NEW("shardCollection", BCON_UTF8(ns), "key", "{", "_id",
                         BCON_INT32(1), "}");
  ck_assert_msg(mongoc_client_command_simple(r.client, "admin", cmd, NULL, NULL,
                                             &error),
                "%s", error.message);
  bson_destroy(cmd);
  resv_request_t req = {.op = RESV_OP_RESERVE, .key = test_key("email", "a"),
                        .owner = test_owner("", "u"), .attempt = resv_cstr("x"),
                        .ttl_ms = 100};
  ck_assert_msg(call_fails(t, &req, RESV_EFORMAT, &err), "%s: %s",
                resv_code_name(err.code), err.message);
  ck_assert_msg(strstr(err.message, "another key"), "%s", err.message);
  ck_assert_int_eq(emu_raw_count(&r, "{}"), 0);
  emu_raw_close(&r);
  resv_store_close(s);
  mongos_stop(&ms);
}
END_TEST

/* docs/design.md section 12: shardCollection of a collection that already holds
 * documents needs the shard key's index first (InvalidOptions, 72); the
 * format record alone makes a collection non-empty (a replica set put
 * behind a mongos later). The store makes the index, then shards. */
START_TEST(test_mongos_non_empty_collection_is_sharded_after_its_index) {
  mongos_t ms;
  mongos_start(&ms);
  char aggregate[64], ns[300];
  unique_name(aggregate, sizeof aggregate, "nonempty");
  resv_store_t *s = test_open(ms.uri);
  resv_type_t *t = named_type(s, aggregate);
  resv_answer_t a = {0};
  emu_raw_t r;

  emu_raw_open(&r, ms.uri, resv_type_collection(t));
  emu_raw_insert(&r, "{\"_id\": \"format\", \"format\": 1}");
  emu_raw_insert(&r, "{\"_id\": {\"t\": \"\", \"n\": \"email\", \"k\": \"old\"}, "
                 "\"tenant_id\": \"\", \"key\": \"old\", "
                 "\"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, "
                 "\"expires_at\": null, \"version\": {\"$numberLong\": \"3\"}}");
  test_get(t, "old", &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  snprintf(ns, sizeof ns, "resv.%s", resv_type_collection(t));
  ck_assert(shard_key_is(ms.uri, ns, "{\"tenant_id\": 1, \"key\": \"hashed\"}"));
  test_reserve(t, "new", "u", "a", 60000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  resv_answer_clear(&a);
  emu_raw_close(&r);
  resv_store_close(s);
  mongos_stop(&ms);
}
END_TEST

/* A mongos emulator of this test's own with an admin (root) and a user
 * with readWrite on database resv alone, and their URIs. */
typedef struct users_mongos {
  emu_t emu;
  char admin[256], app[256];
} users_mongos_t;

static void users_mongos_start(users_mongos_t *u) {
  static const char *const args[] = {"--mongos", "--user", "admin:pw:root@admin",
                                     "--user", "app:pw:readWrite@resv", NULL};
  emu_start_args(&u->emu, 0, args);
  snprintf(u->admin, sizeof u->admin,
           "mongodb://admin:pw@127.0.0.1:%d/resv?authSource=admin", u->emu.port);
  snprintf(u->app, sizeof u->app,
           "mongodb://app:pw@127.0.0.1:%d/resv?authSource=admin", u->emu.port);
}

/* docs/design.md section 12: a user with readWrite on the store's database alone can
 * run everything but the sharding of a new collection: with sharding off
 * nothing reads config.collections; with sharding auto a new collection
 * is refused with what is missing, before anything is created, and once
 * an admin has set it up the same store uses it. */
START_TEST(test_mongos_readwrite_user_works_and_is_told_what_sharding_needs) {
  users_mongos_t u;
  users_mongos_start(&u);
  char aggregate[64], ns[300];
  resv_answer_t a = {0};
  resv_error_t err;
  emu_raw_t admin;

  /* sharding off: every call works. */
  resv_store_t *off = emu_open(u.app, (resv_options_t){.threads = 2,
                                                        .sharding = RESV_SHARDING_OFF});
  resv_type_t *t = test_fresh_type(off, "rwoff");
  test_reserve(t, "k", "u", "a", 60000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  resv_store_close(off);

  /* sharding auto, a new collection: a clear refusal, nothing created. */
  resv_store_t *app = emu_open(u.app, (resv_options_t){.threads = 2});
  unique_name(aggregate, sizeof aggregate, "rwauto");
  t = named_type(app, aggregate);
  snprintf(ns, sizeof ns, "resv.%s", resv_type_collection(t));
  resv_request_t reserve = {.op = RESV_OP_RESERVE, .key = test_key("email", "k"),
                            .owner = test_owner("", "u"), .attempt = resv_cstr("a"),
                            .ttl_ms = 60000};
  ck_assert(!resv_call(t, &reserve, &a, &err));
  ck_assert_msg(err.code == RESV_ESERVER && err.server_code == 13, "%s: %d %s",
                resv_code_name(err.code), (int)err.server_code, err.message);
  ck_assert_msg(strstr(err.message, "read on config.collections") &&
                    strstr(err.message, "sh.shardCollection") &&
                    strstr(err.message, "sharding = \"off\""),
                "%s", err.message);
  emu_raw_open(&admin, u.admin, resv_type_collection(t));
  ck_assert(!raw_collection_exists(&admin, resv_type_collection(t)));

  /* An admin's store sets it up (and shards it); the user's store then
   * uses it as it is. */
  resv_store_t *root = emu_open(u.admin, (resv_options_t){.threads = 1});
  test_get(named_type(root, aggregate), "k", &a);
  ck_assert(shard_key_is(u.admin, ns, "{\"tenant_id\": 1, \"key\": \"hashed\"}"));
  bool ok = false;
  for (int i = 0; i < 100 && !ok; i++) { /* the failed set-up may back off */
    ok = resv_call(t, &reserve, &a, &err);
    if (!ok)
      usleep(50 * 1000);
  }
  ck_assert_msg(ok, "%s: %s", resv_code_name(err.code), err.message);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  resv_answer_clear(&a);
  emu_raw_close(&admin);
  resv_store_close(root);
  resv_store_close(app);
  emu_stop(&u.emu);
}
END_TEST

START_TEST(test_mongos_sharding_off_never_shards) {
  mongos_t ms;
  mongos_start(&ms);
  resv_options_t o = {.uri = ms.uri, .sharding = RESV_SHARDING_OFF, .threads = 2};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s != NULL, "%s", err.message);
  resv_type_t *t = test_fresh_type(s, "unsharded");
  resv_answer_t a = {0};
  char ns[300];

  test_reserve(t, "k", "u1", "a1", 60000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  snprintf(ns, sizeof ns, "resv.%s", resv_type_collection(t));
  ck_assert(shard_key_is(ms.uri, ns, NULL));
  resv_answer_clear(&a);
  resv_store_close(s);
  mongos_stop(&ms);
}
END_TEST

Suite *mongo_store_suite(void) {
  Suite *s = suite_create("mongo_store");
  const TTest *store_tests[] = {
      test_layout_is_spec_section_3_field_by_field,
      test_nothing_is_created_before_a_types_first_call,
      test_racing_reserves_of_a_free_key_one_wins,
      test_racing_stores_set_up_one_collection_once, test_churn_on_hot_keys_stays_coherent,
      test_other_format_is_refused_and_nothing_written,
      test_foreign_document_is_format_error,
      test_document_not_a_reservation_is_never_written_and_answers_format,
      test_describe_names_the_host_and_topology,
      test_writes_are_majority_unless_write_concern_says_otherwise,
      test_a_single_host_uri_discovers_the_set,
      test_the_read_after_a_duplicate_key_is_local_and_names_the_shard_key,
      test_a_collection_dropped_under_a_running_store_is_set_up_again,
      test_database_is_the_option_else_the_uris_else_resv, test_password_never_shows, NULL};
  test_tcase(s, "store", 60, NULL, NULL, store_tests);
  const TTest *sharded_tests[] = {
      test_mongos_shards_each_collection_on_first_use,
      test_mongos_collection_sharded_on_another_key_is_refused,
      test_mongos_sharding_off_never_shards,
      test_mongos_non_empty_collection_is_sharded_after_its_index,
      test_mongos_readwrite_user_works_and_is_told_what_sharding_needs, NULL};
  test_tcase(s, "sharded", 60, NULL, NULL, sharded_tests);
  return s;
}
