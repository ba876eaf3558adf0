/* test_mongo_options.c: a collection the store did not create, made with
 * create options that change what "the same key" means, is refused at
 * set-up with format naming the option, and never written.
 *
 * Runs against RESV_TEST_URI (scripts/with-mongo: MONGODB_URI or a fresh
 * emulator, which keeps create's options and applies a default collation
 * as MongoDB does). Each test makes the collection first with a plain
 * mongoc client, as an administrator would, then calls through the store.
 * The readWrite test starts an emulator of its own with users. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"
#include "tests.h"

static const char *db_of(const mongoc_uri_t *uri) {
  const char *db = mongoc_uri_get_database(uri);
  return db && *db ? db : "resv";
}

/* Runs create for collection with the options given as JSON members
 * (e.g. "\"capped\": true, \"size\": 4096"), with a plain client. */
static void create_with(const char *uri, const char *collection,
                        const char *options_json) {
  char json[512];
  bson_error_t error;
  emu_raw_t r;

  snprintf(json, sizeof json, "{\"create\": \"%s\"%s%s}", collection,
           *options_json ? ", " : "", options_json);
  bson_t *cmd = bson_new_from_json((const uint8_t *)json, -1, &error);
  ck_assert_msg(cmd != NULL, "%s: %s", json, error.message);
  emu_raw_open(&r, uri, collection);
  bool ok = mongoc_client_command_simple(r.client, db_of(r.uri), cmd, NULL,
                                         NULL, &error);
  ck_assert_msg(ok, "%s: %s", json, error.message);
  bson_destroy(cmd);
  emu_raw_close(&r);
}

static int64_t documents_in(const char *uri, const char *collection) {
  emu_raw_t r;
  emu_raw_open(&r, uri, collection);
  int64_t n = emu_raw_count(&r, "{}");
  emu_raw_close(&r);
  return n;
}

static resv_request_t reserve_of(const char *key) {
  return (resv_request_t){.op = RESV_OP_RESERVE, .key = test_key("email", key),
                          .owner = test_owner("", "u"),
                          .attempt = resv_cstr("a"), .ttl_ms = 60000};
}

/* A reserve on a fresh type whose collection was first made with
 * options_json: format, the message naming want; nothing written. */
static void refused(const char *options_json, const char *want) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "opt");
  const char *collection = resv_type_collection(t);
  resv_request_t reserve = reserve_of("Ann");
  resv_answer_t a = {0};
  resv_error_t err;

  create_with(uri, collection, options_json);
  ck_assert(!resv_call(t, &reserve, &a, &err));
  ck_assert_msg(err.code == RESV_EFORMAT, "%s: %s: %s", options_json,
                resv_code_name(err.code), err.message);
  ck_assert_msg(strstr(err.message, collection) && strstr(err.message, want),
                "%s: %s", options_json, err.message);
  ck_assert_int_eq(documents_in(uri, collection), 0);
  resv_answer_clear(&a);
  resv_store_close(s);
}

START_TEST(a_default_collation_is_refused) {
  refused("\"collation\": {\"locale\": \"en\", \"strength\": 2}",
          "has a default collation {locale: \"en\", strength: 2}: the same "
          "key would match other keys");
}
END_TEST

START_TEST(a_validator_is_refused) {
  refused("\"validator\": {\"key\": {\"$exists\": true}}", "has a validator");
  /* Even one the store's documents pass: the store cannot prove it. */
  refused("\"validator\": {\"_id\": {\"$exists\": true}}", "has a validator");
}
END_TEST

START_TEST(a_capped_collection_is_refused) {
  refused("\"capped\": true, \"size\": 65536", "is capped");
}
END_TEST

START_TEST(a_time_series_collection_is_refused) {
  refused("\"timeseries\": {\"timeField\": \"t\"}", "time-series");
}
END_TEST

/* What cannot change an answer passes: no options, the simple collation,
 * a validator that refuses nothing. */
START_TEST(harmless_options_are_accepted) {
  static const char *const harmless[] = {
      "", "\"collation\": {\"locale\": \"simple\"}",
      "\"validator\": {\"key\": {\"$exists\": true}}, \"validationLevel\": \"off\"",
      "\"validator\": {\"key\": {\"$exists\": true}}, \"validationAction\": \"warn\""};
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);

  for (size_t i = 0; i < sizeof harmless / sizeof harmless[0]; i++) {
    resv_type_t *t = test_fresh_type(s, "harmless");
    resv_answer_t a = {0};
    create_with(uri, resv_type_collection(t), harmless[i]);
    test_reserve(t, "Ann", "u", "a", 60000, &a);
    ck_assert_int_eq(a.status, RESV_RESERVED);
    resv_answer_clear(&a);
    test_reserve(t, "ann", "v", "b", 60000, &a);
    ck_assert_msg(a.status == RESV_RESERVED, "%s: %d", harmless[i], a.status);
    resv_answer_clear(&a);
  }
  resv_store_close(s);
}
END_TEST

/* A store opened with no_create checks the collection as well. */
START_TEST(no_create_checks_the_options_too) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "optnc");
  const char *collection = resv_type_collection(t);
  resv_request_t reserve = reserve_of("k");
  resv_answer_t a = {0};
  resv_error_t err;
  emu_raw_t r;

  create_with(uri, collection, "\"collation\": {\"locale\": \"fr\", \"strength\": 1}");
  emu_raw_open(&r, uri, collection);
  emu_raw_insert(&r, "{\"_id\": \"format\", \"format\": 1}");
  emu_raw_close(&r);
  resv_store_t *looker = emu_open(uri, (resv_options_t){.threads = 1, .no_create = 1});
  resv_type_t *lt = resv_store_type(looker, "test", 4,
                                    collection + strlen("wow_reservation__test__"),
                                    strlen(collection) - strlen("wow_reservation__test__"),
                                    &err);
  ck_assert_msg(lt != NULL, "%s", err.message);
  ck_assert(!resv_call(lt, &reserve, &a, &err));
  ck_assert_msg(err.code == RESV_EFORMAT && strstr(err.message, "locale: \"fr\", strength: 1"),
                "%s: %s", resv_code_name(err.code), err.message);
  ck_assert_int_eq(documents_in(uri, collection), 1);
  resv_answer_clear(&a);
  resv_store_close(looker);
  resv_store_close(s);
}
END_TEST

/* listCollections is allowed by readWrite: a user with readWrite on the
 * store's database alone sets up new types, and is refused a collated
 * collection an administrator made. */
START_TEST(a_readwrite_user_is_checked_and_works) {
  static const char *const args[] = {"--user", "admin:pw:root@admin",
                                     "--user", "app:pw:readWrite@resv", NULL};
  char admin[160], app[160];
  resv_answer_t a = {0};
  resv_error_t err;
  emu_t e;

  emu_start_args(&e, 0, args);
  snprintf(admin, sizeof admin, "mongodb://admin:pw@127.0.0.1:%d/resv?authSource=admin",
           e.port);
  snprintf(app, sizeof app, "mongodb://app:pw@127.0.0.1:%d/resv?authSource=admin", e.port);
  resv_store_t *s = emu_open(app, (resv_options_t){.threads = 2});
  resv_type_t *t = test_fresh_type(s, "rwplain");
  test_reserve(t, "k", "u", "a", 60000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  resv_answer_clear(&a);

  t = test_fresh_type(s, "rwci");
  create_with(admin, resv_type_collection(t),
              "\"collation\": {\"locale\": \"en\", \"strength\": 2}");
  resv_request_t reserve = reserve_of("k");
  ck_assert(!resv_call(t, &reserve, &a, &err));
  ck_assert_msg(err.code == RESV_EFORMAT && strstr(err.message, "default collation"),
                "%s: %s", resv_code_name(err.code), err.message);
  resv_answer_clear(&a);
  resv_store_close(s);
  emu_stop(&e);
}
END_TEST

Suite *mongo_options_suite(void) {
  const TTest *tests[] = {
      a_default_collation_is_refused, a_validator_is_refused, a_capped_collection_is_refused,
      a_time_series_collection_is_refused, harmless_options_are_accepted,
      no_create_checks_the_options_too, a_readwrite_user_is_checked_and_works, NULL};
  return test_suite("mongo_options", "options", 60, NULL, NULL, tests);
}
