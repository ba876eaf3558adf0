/* test_mongo_replset.c: the MongoDB store on a replica set (docs/design.md section 12).
 *
 * Runs against RESV_TEST_URI when that is a replica set of two or more
 * members (a real one: MONGODB_URI), else against an emulator replica set
 * this test starts (emulator/run.py --replset, three members). Only
 * MongoDB's own commands drive it (hello, replSetStepDown), so the same
 * test runs on a real set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"

typedef struct replset {
  char seed[512]; /* the seed list URI */
  char db[128];   /* its database */
  emu_t emu;      /* pid 0: RESV_TEST_URI is a set itself */
} replset_t;

/* hello on uri with a plain client, into reply (bson_destroy it). */
static void hello(const char *uri, bson_t *reply) {
  mongoc_client_t *client = mongoc_client_new(uri);
  bson_t cmd = BSON_INITIALIZER;
  bson_error_t error;

  ck_assert_ptr_nonnull(client);
  mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
  BSON_APPEND_INT32(&cmd, "hello", 1);
  ck_assert_msg(mongoc_client_command_simple(client, "admin", &cmd, NULL, reply,
                                             &error),
                "hello %s: %s", uri, error.message);
  bson_destroy(&cmd);
  mongoc_client_destroy(client);
}

static int count_hosts(const bson_t *reply) {
  bson_iter_t it, hosts;
  int n = 0;
  if (bson_iter_init_find(&it, reply, "hosts") && BSON_ITER_HOLDS_ARRAY(&it) &&
      bson_iter_recurse(&it, &hosts))
    while (bson_iter_next(&hosts))
      n++;
  return n;
}

static void replset_start(replset_t *rs) {
  const char *uri = test_mongo_uri();
  mongoc_uri_t *parsed;
  const char *db;
  bson_t reply;

  memset(rs, 0, sizeof *rs);
  hello(uri, &reply);
  if (count_hosts(&reply) >= 2) {
    snprintf(rs->seed, sizeof rs->seed, "%s", uri);
  } else {
    emu_start_mode(&rs->emu, 0, "--replset");
    snprintf(rs->seed, sizeof rs->seed, "%s", rs->emu.uri);
  }
  bson_destroy(&reply);
  parsed = mongoc_uri_new(rs->seed);
  ck_assert_ptr_nonnull(parsed);
  db = mongoc_uri_get_database(parsed);
  snprintf(rs->db, sizeof rs->db, "%s", db && *db ? db : "resv");
  mongoc_uri_destroy(parsed);
}

static void replset_stop(replset_t *rs) { emu_stop(&rs->emu); }

/* A member that is not the primary, "host:port", from hello. */
static void a_secondary(const replset_t *rs, char *out, size_t size) {
  bson_t reply;
  bson_iter_t it, hosts;
  const char *primary = NULL;

  out[0] = '\0';
  hello(rs->seed, &reply);
  if (bson_iter_init_find(&it, &reply, "primary") && BSON_ITER_HOLDS_UTF8(&it))
    primary = bson_iter_utf8(&it, NULL);
  ck_assert_ptr_nonnull(primary);
  ck_assert(bson_iter_init_find(&it, &reply, "hosts") &&
            bson_iter_recurse(&it, &hosts));
  while (bson_iter_next(&hosts))
    if (strcmp(bson_iter_utf8(&hosts, NULL), primary) != 0) {
      snprintf(out, size, "%s", bson_iter_utf8(&hosts, NULL));
      break;
    }
  bson_destroy(&reply);
  ck_assert_msg(out[0], "the set has no secondary");
}

/* replSetStepDown on the set's primary. The reply does not matter: some
 * servers close the connection as they step down. */
static void step_down(const replset_t *rs) {
  mongoc_client_t *client = mongoc_client_new(rs->seed);
  bson_t cmd = BSON_INITIALIZER, reply;
  bson_error_t error;

  ck_assert_ptr_nonnull(client);
  BSON_APPEND_INT32(&cmd, "replSetStepDown", 10);
  BSON_APPEND_INT32(&cmd, "secondaryCatchUpPeriodSecs", 5);
  mongoc_client_command_simple(client, "admin", &cmd, NULL, &reply, &error);
  bson_destroy(&reply);
  bson_destroy(&cmd);
  mongoc_client_destroy(client);
}

static bool try_reserve(resv_type_t *t, const char *key, resv_answer_t *a,
                        resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", key),
                      .owner = test_owner("", "u"), .attempt = resv_cstr("a"),
                      .ttl_ms = 600000};
  return resv_call(t, &r, a, err) && a->status == RESV_RESERVED;
}

/* docs/design.md section 12: a URI naming one member finds the set and follows its
 * failovers. The store names a secondary alone: its writes go to the
 * primary, and after the primary steps down to the new one. */
START_TEST(test_a_uri_naming_one_secondary_follows_a_step_down) {
  replset_t rs;
  char member[256], uri[512];
  resv_answer_t a = {0};
  resv_error_t err = {0};
  int failures = 0;
  bool ok = false;

  replset_start(&rs);
  a_secondary(&rs, member, sizeof member);
  snprintf(uri, sizeof uri, "mongodb://%s/%s", member, rs.db);
  resv_store_t *s = emu_open(uri, (resv_options_t){.threads = 2, .timeout_ms = 5000});
  resv_type_t *t = test_fresh_type(s, "follow");

  ck_assert_msg(try_reserve(t, "before", &a, &err), "%s: %s",
                resv_code_name(err.code), err.message);
  step_down(&rs);
  /* The driver may answer a call or two with the old primary's refusal
   * before it hears of the election; then it follows. */
  for (int i = 0; i < 100 && !ok; i++) {
    ok = try_reserve(t, "after", &a, &err);
    if (!ok) {
      failures++;
      usleep(100 * 1000);
    }
  }
  ck_assert_msg(ok, "no write succeeded after the step-down: %s: %s",
                resv_code_name(err.code), err.message);
  fprintf(stderr, "replset: %d failed calls after a step-down\n", failures);
  /* The majority-acknowledged reservation made before it survived. */
  resv_request_t get = {.op = RESV_OP_GET, .key = test_key("email", "before")};
  ck_assert(resv_call(t, &get, &a, &err));
  ck_assert_int_eq(a.status, RESV_PENDING);
  resv_answer_clear(&a);
  resv_store_close(s);
  replset_stop(&rs);
}
END_TEST

Suite *mongo_replset_suite(void) {
  const TTest *tests[] = {
      test_a_uri_naming_one_secondary_follows_a_step_down, NULL};
  return test_suite("mongo_replset", "replset", 60, NULL, NULL, tests);
}
