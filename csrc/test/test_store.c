/* test_store.c: the store handle (store.c): its types, and what closing
 * it leaves behind. Costs are asserted as counts or as the ratio of two
 * measurements in one run, never against a wall-clock limit. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tests.h"

static double thread_cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Adds types "agg<from>" .. "agg<to - 1>" to store. */
static void add_types(resv_store_t *store, int from, int to) {
  for (int i = from; i < to; i++) {
    char name[32];
    resv_error_t err;
    int n = snprintf(name, sizeof name, "agg%d", i);
    ck_assert_msg(resv_store_type(store, "ctx", 3, name, (size_t)n, &err) != NULL,
                  "type %s: %s", name, err.message);
  }
}

/* The least CPU time (of several rounds) of `lookups` lookups of the
 * first type the store was given, "agg0". */
static double lookup_seconds(resv_store_t *store, int lookups) {
  double best = 1e9;
  resv_type_t *first = resv_store_type(store, "ctx", 3, "agg0", 4, NULL);
  for (int round = 0; round < 5; round++) {
    double t0 = thread_cpu_seconds();
    for (int i = 0; i < lookups; i++)
      ck_assert_ptr_eq(resv_store_type(store, "ctx", 3, "agg0", 4, NULL), first);
    double t = thread_cpu_seconds() - t0;
    if (t < best) best = t;
  }
  return best;
}

START_TEST(finding_a_type_costs_the_same_among_200_or_20000) {
  /* The types were a list searched from the newest: finding the first
   * of 20,000 compared 20,000 names (40,000 types took 36.5 s to make). */
  resv_store_t *few = test_open(NULL), *many = test_open(NULL);
  add_types(few, 0, 200);
  add_types(many, 0, 20000);
  double t_few = lookup_seconds(few, 5000), t_many = lookup_seconds(many, 5000);
  ck_assert_msg(t_many < 10 * t_few,
                "5,000 lookups among 200 types: %.6f s, among 20,000: %.6f s "
                "(ratio %.1f, want under 10)", t_few, t_many, t_many / t_few);
  /* Asking again gives the same handle, and every type is still there. */
  resv_type_t *t = resv_store_type(many, "ctx", 3, "agg19999", 8, NULL);
  ck_assert_ptr_nonnull(t);
  ck_assert_str_eq(resv_type_collection(t), "wow_reservation__ctx__agg19999");
  ck_assert_ptr_eq(resv_store_type(many, "ctx", 3, "agg19999", 8, NULL), t);
  resv_store_close(few);
  resv_store_close(many);
}
END_TEST

Suite *store_suite(void) {
  Suite *s = suite_create("store");
  TCase *tc = tcase_create("types");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, finding_a_type_costs_the_same_among_200_or_20000);
  suite_add_tcase(s, tc);
  return s;
}
