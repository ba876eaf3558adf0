/* test_mongo_diff.c: the MongoDB store answers as the memory store does.
 *
 * The differential test of diff.c on a MongoDB store: four seeds of 2,500
 * calls make 10,000 calls per run (fewer under RESV_TEST_SLOW, i.e.
 * valgrind). The odd seeds run with max_holds = 2, below the four
 * attempts, so a full reservation (a new attempt refused, one already
 * there still joining) is met often, on both stores. MongoDB reclaims on a
 * sweep (one call in twenty). */
#include <stdlib.h>

#include "tests.h"

static resv_store_t *open_with_max_holds(const char *uri, int32_t max_holds) {
  resv_options_t o = {.uri = uri, .threads = 4, .timeout_ms = 5000, .max_holds = max_holds,
                      .sweep_grace_ms = TEST_DIFF_GRACE};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s != NULL, "open: %s", err.message);
  return s;
}

static void run_sequence(uint64_t seed, int steps, int32_t max_holds) {
  resv_store_t *memory = open_with_max_holds(NULL, max_holds);
  resv_store_t *mongo = open_with_max_holds(test_mongo_uri(), max_holds);
  test_diff_run(memory, mongo, "mongodb", seed, steps, max_holds, NULL);
  resv_store_close(mongo);
  resv_store_close(memory);
}

START_TEST(test_mongodb_answers_as_the_memory_store) {
  const char *seed_env = getenv("RESV_TEST_SEED");
  if (seed_env) {
    if (_i == 0)
      run_sequence(strtoull(seed_env, NULL, 10), test_diff_steps(), 0);
    return;
  }
  run_sequence(test_diff_seeds[_i], test_diff_steps(), _i % 2 ? 2 : 0);
}
END_TEST

Suite *mongo_diff_suite(void) {
  Suite *s = suite_create("mongo_diff");
  TCase *tc = tcase_create("differential");
  tcase_add_loop_test(tc, test_mongodb_answers_as_the_memory_store, 0,
                      (int)(TEST_DIFF_SEEDS));
  tcase_set_timeout(tc, 600);
  suite_add_tcase(s, tc);
  return s;
}
