/* test_mongo_sweep.c: a MongoDB sweep that runs out of time part-way.
 *
 * On MongoDB a delete of many documents can pass its maxTimeMS in the
 * middle: the server then fails the whole command with MaxTimeMSExpired
 * (50) and no count, and the documents it deleted before stay deleted.
 * The emulator models it with a cost per deleted document
 * (emulatorControl "cost"). The store cannot know how many were deleted,
 * so its sweep must answer timeout, never a count; a sweep after it
 * deletes the rest and counts exactly those. The emulator is this test's
 * own (the cost is not a MongoDB command). */
#include <stdio.h>

#include "emu.h"

#define T0 INT64_C(1700000000000)
#define EXPIRED 100

static void set_cost(const char *uri, int32_t ms) {
  mongoc_client_t *client = mongoc_client_new(uri);
  bson_error_t error;
  bson_t reply;
  ck_assert_ptr_nonnull(client);
  bson_t *cmd = BCON_NEW("emulatorControl", "cost", "perDocumentMS", BCON_INT32(ms));
  ck_assert_msg(mongoc_client_command_simple(client, "admin", cmd, NULL, &reply, &error),
                "cost: %s", error.message);
  bson_destroy(&reply);
  bson_destroy(cmd);
  mongoc_client_destroy(client);
}

START_TEST(a_sweep_past_its_max_time_answers_timeout_and_the_next_counts_the_rest) {
  emu_t e;
  emu_start(&e, 0, false);
  resv_store_t *s = emu_open(e.uri, (resv_options_t){.timeout_ms = 300,
                                                     .sweep_grace_ms = 1000});
  resv_type_t *t = test_fresh_type(s, "msweep");
  resv_answer_t a = {0};
  resv_error_t err;
  char key[32];

  resv_store_set_time(s, T0);
  for (int i = 0; i < EXPIRED; i++) {
    snprintf(key, sizeof key, "old%d", i);
    test_reserve(t, key, "o", "a", 10, &a);
  }
  test_reserve(t, "live", "o", "a", INT64_C(1000000000), &a);
  resv_store_set_time(s, T0 + 10 + 1000);
  emu_raw_t raw;
  emu_raw_open(&raw, e.uri, resv_type_collection(t));
  const char *old = "{\"_id.k\": {\"$regex\": \"^old\"}}";

  set_cost(e.uri, 10); /* 100 documents: 1 s, past the 300 ms deadline */
  ck_assert(!resv_sweep(t, &a, &err));
  ck_assert_msg(err.code == RESV_ETIMEOUT, "%s: %s", resv_code_name(err.code), err.message);
  ck_assert_int_eq(err.server_code, 50);
  int64_t left = emu_raw_count(&raw, old);
  ck_assert_msg(left > 0 && left < EXPIRED, "%d of %d left", (int)left, EXPIRED);

  set_cost(e.uri, 0);
  ck_assert_msg(resv_sweep(t, &a, &err), "sweep: %s", err.message);
  ck_assert_int_eq(a.status, RESV_SWEPT);
  ck_assert_int_eq(a.count, left);
  ck_assert_int_eq(emu_raw_count(&raw, old), 0);
  ck_assert_int_eq(emu_raw_count(&raw, "{\"_id.k\": \"live\"}"), 1);
  ck_assert_int_eq(emu_raw_count(&raw, "{\"_id\": \"format\"}"), 1);

  emu_raw_close(&raw);
  resv_answer_clear(&a);
  resv_store_close(s);
  emu_stop(&e);
}
END_TEST

Suite *mongo_sweep_suite(void) {
  const TTest *tests[] = {
      a_sweep_past_its_max_time_answers_timeout_and_the_next_counts_the_rest, NULL};
  return test_suite("mongo_sweep", "mongo_sweep", 60, NULL, NULL, tests);
}
