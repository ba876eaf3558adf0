/* test_mongo_sharded.c: the MongoDB store on a sharded cluster, in the
 * mongo_store suite: each collection sharded on first use, one sharded on
 * another key refused, a non-empty one sharded after its index, a
 * readWrite user told what sharding needs, and sharding off. Needs a
 * mongos: RESV_TEST_URI when it is one, else an emulator started here
 * with --mongos. */
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

void mongo_store_add_sharded_tests(TCase *tc) {
  const TTest *tests[] = {
      test_mongos_shards_each_collection_on_first_use,
      test_mongos_collection_sharded_on_another_key_is_refused,
      test_mongos_sharding_off_never_shards,
      test_mongos_non_empty_collection_is_sharded_after_its_index,
      test_mongos_readwrite_user_works_and_is_told_what_sharding_needs, NULL};
  test_tcase_add(tc, tests);
}
