/* test_mongo_retry.c: the store's writes when the server commits them and
 * the answer is lost, which mongoc's retryable writes are for.
 *
 * - MongoDB's fail point onPrimaryTransactionalWrite commits a retryable
 *   write, then closes its connection without a reply; the driver retries
 *   it (same lsid and txnNumber) and the server answers the retry from its
 *   record of the first, applying nothing again. A reserve through it
 *   answers reserved, and its document is written once.
 * - A write concern that fails because both secondaries died while the
 *   write waited for a majority: the write is on the primary, which then
 *   steps down for want of a majority. The reply carries a writeConcernError
 *   11602 labelled RetryableWriteError (as 4.4+ servers label it), so
 *   mongoc retries; with no primary to retry on, the call answers an error
 *   (unavailable or timeout), never reserved, and the caller's own retry
 *   once the set is back answers reserved with the one hold.
 * The first test runs against RESV_TEST_URI, the second starts an emulated
 * replica set of its own (it kills members). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"

/* Sends an admin command given as JSON with a plain client on uri (read
 * preference nearest: a live member even with no primary); the reply's
 * field `count` when it has one, else 0. Fails the test when refused. */
static int64_t admin_json(const char *uri, const char *json, bson_t *out) {
  bson_error_t error;
  bson_t reply;
  bson_iter_t it;
  int64_t count = 0;
  bson_t *cmd = bson_new_from_json((const uint8_t *)json, -1, &error);
  ck_assert_msg(cmd != NULL, "%s: %s", json, error.message);
  mongoc_client_t *client = mongoc_client_new(uri);
  ck_assert_ptr_nonnull(client);
  mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
  mongoc_read_prefs_t *prefs = mongoc_read_prefs_new(MONGOC_READ_NEAREST);
  bool ok = mongoc_client_command_simple(client, "admin", cmd, prefs, &reply, &error);
  ck_assert_msg(ok, "%s: %s", json, error.message);
  if (bson_iter_init_find(&it, &reply, "count") && BSON_ITER_HOLDS_NUMBER(&it))
    count = bson_iter_as_int64(&it);
  if (out)
    bson_copy_to(&reply, out);
  bson_destroy(&reply);
  bson_destroy(cmd);
  mongoc_read_prefs_destroy(prefs);
  mongoc_client_destroy(client);
  return count;
}

static int64_t documents_in(const char *uri, const char *collection, const char *filter) {
  emu_raw_t r;
  emu_raw_open(&r, uri, collection);
  int64_t n = emu_raw_count(&r, filter);
  emu_raw_close(&r);
  return n;
}

START_TEST(a_reserve_committed_then_cut_off_answers_reserved_once) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = emu_open(uri, (resv_options_t){.threads = 1, .timeout_ms = 5000});
  resv_type_t *t = test_fresh_type(s, "retry");
  resv_answer_t a = {0};
  const char *const one[] = {"a"};

  test_get(t, "k", &a); /* the type is set up before the fail point */
  admin_json(uri, "{\"configureFailPoint\": \"onPrimaryTransactionalWrite\", "
                  "\"mode\": {\"times\": 1}, \"data\": {\"closeConnection\": true}}",
             NULL);
  test_reserve(t, "k", "u", "a", 60000, &a);
  int64_t entered = admin_json(uri, "{\"configureFailPoint\": "
                                    "\"onPrimaryTransactionalWrite\", \"mode\": \"off\"}",
                               NULL);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert(test_holds_are(&a, 1, one));
  ck_assert_int_eq(entered, 1); /* the reserve's connection was cut once */
  ck_assert_int_eq(documents_in(uri, resv_type_collection(t), "{\"_id\": {\"$ne\": \"format\"}}"),
                   1);
  test_get(t, "k", &a);
  ck_assert(test_holds_are(&a, 1, one));
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* Kills every member of the set at uri but its primary, after a pause. */
typedef struct killer {
  const char *uri;
  char killed[2][128];
} killer_t;

static void *kill_secondaries(void *arg) {
  killer_t *k = arg;
  bson_t status;
  bson_iter_t it, members, member;
  char json[256];
  int n = 0;

  usleep(300 * 1000);
  admin_json(k->uri, "{\"emulatorControl\": \"status\"}", &status);
  ck_assert(bson_iter_init_find(&it, &status, "members") &&
            bson_iter_recurse(&it, &members));
  while (bson_iter_next(&members) && n < 2) {
    bson_t doc;
    const uint8_t *data;
    uint32_t len;
    bson_iter_document(&members, &len, &data);
    bson_init_static(&doc, data, len);
    const char *name = NULL, *state = NULL;
    if (bson_iter_init_find(&member, &doc, "name")) name = bson_iter_utf8(&member, NULL);
    if (bson_iter_init_find(&member, &doc, "stateStr")) state = bson_iter_utf8(&member, NULL);
    if (name && state && strcmp(state, "PRIMARY") != 0) {
      snprintf(k->killed[n++], sizeof k->killed[0], "%s", name);
      snprintf(json, sizeof json, "{\"emulatorControl\": \"kill\", \"member\": \"%s\"}", name);
      admin_json(k->uri, json, NULL);
    }
  }
  bson_destroy(&status);
  return NULL;
}

START_TEST(a_majority_wait_cut_by_both_secondaries_dying_is_an_error_then_once) {
  emu_t e;
  killer_t k = {0};
  pthread_t thread;
  resv_answer_t a = {0};
  resv_error_t err;
  char json[256];
  const char *const one[] = {"a"};

  emu_start_mode(&e, 0, "--replset");
  k.uri = e.uri;
  resv_store_t *s = emu_open(e.uri, (resv_options_t){.threads = 1, .timeout_ms = 3000});
  resv_type_t *t = test_fresh_type(s, "wce");
  test_get(t, "k", &a);
  admin_json(e.uri, "{\"emulatorControl\": \"lag\", \"ms\": 5000}", NULL);
  resv_request_t reserve = {.op = RESV_OP_RESERVE, .key = test_key("email", "k"),
                            .owner = test_owner("", "u"), .attempt = resv_cstr("a"),
                            .ttl_ms = 60000};
  pthread_create(&thread, NULL, kill_secondaries, &k);
  bool ok = resv_call(t, &reserve, &a, &err);
  pthread_join(thread, NULL);
  fprintf(stderr, "retry: both secondaries down during the majority wait: %s%s%s\n",
          ok ? "answered" : resv_code_name(err.code), ok ? "" : ": ", ok ? "" : err.message);
  ck_assert_msg(!ok, "answered %d with no majority", a.status);
  ck_assert_msg(err.code == RESV_EUNAVAILABLE || err.code == RESV_ETIMEOUT, "%s: %s",
                resv_code_name(err.code), err.message);

  admin_json(e.uri, "{\"emulatorControl\": \"lag\", \"ms\": 0}", NULL);
  for (int i = 0; i < 2; i++) {
    snprintf(json, sizeof json, "{\"emulatorControl\": \"restart\", \"member\": \"%s\"}",
             k.killed[i]);
    admin_json(e.uri, json, NULL);
  }
  ok = false;
  for (int i = 0; i < 100 && !ok; i++) { /* until a primary is elected */
    ok = resv_call(t, &reserve, &a, &err);
    if (!ok)
      usleep(100 * 1000);
  }
  ck_assert_msg(ok, "%s: %s", resv_code_name(err.code), err.message);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert(test_holds_are(&a, 1, one));
  resv_answer_clear(&a);
  resv_store_close(s);
  emu_stop(&e);
}
END_TEST

Suite *mongo_retry_suite(void) {
  const TTest *tests[] = {
      a_reserve_committed_then_cut_off_answers_reserved_once,
      a_majority_wait_cut_by_both_secondaries_dying_is_an_error_then_once, NULL};
  return test_suite("mongo_retry", "retry", 60, NULL, NULL, tests);
}
