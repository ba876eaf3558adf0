/* test_file_diff.c: the file store answers as the memory store does.
 *
 * The differential test of diff.c on a file store (a few keys in two
 * tenants, owners sharing an id across tenants, attempts, versions, ttls
 * at the edges, clock jumps onto and around expiry instants), run through
 * a memory store and a file store side by side with the same clock: every
 * answer must be the same, status, state, owner, expires_at, version and
 * holds as a set. One key ("$cat" of tenant t1) is 600 bytes long, so the file store's hashed
 * keys (longer than LMDB's 511) are compared too. Both stores reclaim
 * what expired TEST_DIFF_GRACE ago, each at its own pace, and sweep now and
 * then: past the grace, expired and absent mean the same (docs/design.md section
 * 5), so such a reservation is released from both before a call on its
 * key (test_forget_reclaimable).
 * The second and fourth seeds run with max_holds = 2, so refused new attempts are
 * compared too. Four seeds of 2,500 calls make 10,000 calls per run, on
 * sync = process;
 * one seed runs again on sync = disk. RESV_TEST_SEED=<seed>
 * RESV_TEST_STEPS=<n> replays one sequence. */
#include <stdlib.h>
#include <string.h>

#include "tests.h"

static void run_sequence(uint64_t seed, int steps, int32_t sync, int32_t max_holds) {
  static char long_key[601];
  memset(long_key, 'L', 600);
  char dir[256];
  test_temp_dir(dir, sizeof dir);
  resv_options_t mo = {.max_holds = max_holds, .sweep_grace_ms = TEST_DIFF_GRACE};
  resv_store_t *memory = resv_store_open(&mo, NULL);
  ck_assert_ptr_nonnull(memory);
  resv_options_t o = {.path = dir, .sync = sync, .threads = 2, .max_holds = max_holds,
                      .sweep_grace_ms = TEST_DIFF_GRACE};
  resv_error_t err;
  resv_store_t *file = resv_store_open(&o, &err);
  ck_assert_msg(file != NULL, "open: %s", err.message);
  test_diff_run(memory, file, "file", seed, steps, max_holds, long_key);
  resv_store_close(file);
  resv_store_close(memory);
  test_remove_dir(dir);
}

START_TEST(file_store_answers_as_the_memory_store) {
  const char *seed_env = getenv("RESV_TEST_SEED");
  if (seed_env) {
    if (_i == 0) run_sequence(strtoull(seed_env, NULL, 10), test_diff_steps(), RESV_SYNC_PROCESS, 0);
    return;
  }
  /* The odd ones with max_holds = 2, below the four attempts, so that full
   * reservations (a new attempt refused) are compared too. */
  run_sequence(test_diff_seeds[_i], test_diff_steps(), RESV_SYNC_PROCESS, _i % 2 ? 2 : 0);
}
END_TEST

START_TEST(file_store_with_disk_sync_answers_as_the_memory_store) {
  int steps = test_diff_steps();
  run_sequence(test_diff_seeds[0], steps < 500 ? steps : 500, RESV_SYNC_DISK, 0);
}
END_TEST

Suite *file_diff_suite(void) {
  Suite *s = suite_create("file_diff");
  TCase *tc = tcase_create("differential");
  tcase_add_loop_test(tc, file_store_answers_as_the_memory_store, 0,
                      (int)(TEST_DIFF_SEEDS));
  tcase_add_test(tc, file_store_with_disk_sync_answers_as_the_memory_store);
  tcase_set_timeout(tc, 600);
  suite_add_tcase(s, tc);
  return s;
}
