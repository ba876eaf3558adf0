/* test_mongo_build.c: the upsert's documents written from templates
 * (mongo_template.c) must be the bytes mongo_build.c's builders write for
 * the same request, for every shape (reserve's and confirm's filters,
 * confirm's exact one, both pipelines), any store's max_holds, strings of
 * any length (empty ones as (NULL, 0), long ones that take the writer to
 * the heap) and any int64, written into a fresh writer or after other
 * elements. No server needed. */
#include <stdint.h>
#include <string.h>

#include "doc_bson.h"
#include "mongo_internal.h"
#include "tests.h"

static uint64_t rng = 88172645463325252ull;

static uint64_t next_random(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Strings of every length class: empty (NULL or ""), short, and now and
 * then longer than the writer's inline buffer. */
static char pool[3][5000];

static resv_str_t random_str(int which) {
  uint64_t r = next_random();
  size_t len = r % 8 == 0 ? 0 : r % 37 == 0 ? 1000 + r % 3500 : r % 60;
  if (len == 0)
    return (resv_str_t){r % 2 ? NULL : "", 0};
  char *p = pool[which % 3] + (r >> 20) % 100;
  for (size_t i = 0; i < len; i++)
    p[i] = (char)('!' + (next_random() % 90));
  return (resv_str_t){p, len};
}

static int64_t random_int(void) {
  uint64_t r = next_random();
  switch (r % 5) {
  case 0: return (int64_t)next_random();
  case 1: return -(int64_t)(r % 1000);
  case 2: return INT64_C(0x5e11a7e0d0c0b0a0) + (int64_t)(r % 4); /* the sentinels */
  default: return (int64_t)(r % 2000000000000);
  }
}

/* The builder's bytes and the template's, for r, into writers that hold
 * prefixed other elements first. */
static void compare(const resv__mongo_t *m, const resv_request_t *r, int shape, int64_t now,
                    int64_t expires, bool prefixed) {
  resv__bw_t a, b;
  bson_t da, db;
  resv__bw_init(&a);
  resv__bw_init(&b);
  if (prefixed) {
    resv__bw_utf8(&a, K("before"), K("x"));
    resv__bw_utf8(&b, K("before"), K("x"));
  }
  if (shape < 3) {
    resv__mongo_build_upsert_filter(&a, m, r, now, shape == 2);
    resv__mongo_upsert_filter(&b, m, r, now, shape == 2);
  } else {
    resv__mongo_build_upsert_pipeline(&a, r, now, expires);
    resv__mongo_upsert_pipeline(&b, m, r, now, expires);
  }
  resv__bw_finish(&a, &da);
  resv__bw_finish(&b, &db);
  ck_assert_msg(bson_validate(&da, BSON_VALIDATE_NONE, NULL), "the builder's BSON is invalid");
  ck_assert_msg(da.len == db.len && memcmp(bson_get_data(&da), bson_get_data(&db), da.len) == 0,
                "shape %d, op %d, max_holds %d: the template wrote %u bytes that differ from "
                "the builder's %u",
                shape, (int)r->op, (int)m->max_holds, db.len, da.len);
  resv__bw_free(&a);
  resv__bw_free(&b);
}

START_TEST(test_templates_write_the_builders_bytes) {
  static const int32_t max_holds[] = {1, 2, 9, 10, 100, 1 << 20};
  for (size_t h = 0; h < sizeof max_holds / sizeof max_holds[0]; h++) {
    resv__mongo_t m = {.conforms = resv__doc_conforms_new(), .max_holds = max_holds[h]};
    m.templates = resv__mongo_templates_new(&m);
    for (int i = 0; i < 400; i++) {
      int shape = i % 5; /* filters: reserve, confirm, exact; pipelines */
      bool reserve = shape == 0 || shape == 3;
      resv_request_t r = {.op = reserve ? RESV_OP_RESERVE : RESV_OP_CONFIRM,
                          .key = {random_str(0), random_str(1), random_str(2)},
                          .owner = {random_str(0), random_str(1)},
                          .attempt = random_str(2),
                          .version = random_int()};
      compare(&m, &r, shape, random_int(), random_int(), i % 7 == 0);
    }
    resv__mongo_templates_free(m.templates);
    bson_destroy(m.conforms);
  }
}
END_TEST

/* A backend made by hand without templates builds per call: the same
 * bytes again. */
START_TEST(test_a_backend_without_templates_builds) {
  resv__mongo_t m = {.conforms = resv__doc_conforms_new(), .max_holds = 3};
  resv_request_t r = {.op = RESV_OP_RESERVE,
                      .key = {{"t", 1}, {"email", 5}, {"ann", 3}},
                      .owner = {{"", 0}, {"u1", 2}},
                      .attempt = {"a1", 2}};
  compare(&m, &r, 0, 1000, 61000, false);
  compare(&m, &r, 3, 1000, 61000, true);
  bson_destroy(m.conforms);
}
END_TEST

Suite *mongo_build_suite(void) {
  const TTest *const tests[] = {test_templates_write_the_builders_bytes,
                                       test_a_backend_without_templates_builds, NULL};
  return test_suite("mongo_build", "templates", 60, NULL, NULL, tests);
}
