/* file_store_test.h: what the files of the file_store suite share
 * (test_file_store.c, test_file_store_data.c): each test's fresh
 * directory (the test case's fixture), a store and a type on it, one call,
 * and the data test case. */
#ifndef RESV_FILE_STORE_TEST_H
#define RESV_FILE_STORE_TEST_H

#include <string.h>

#include "tests.h"

#define T0 1700000000000LL
#define HOUR (3600 * 1000)

static char dir[256];

static inline void setup(void) { test_temp_dir(dir, sizeof dir); }
static inline void teardown(void) { test_remove_dir(dir); }

static inline resv_store_t *open_with(resv_options_t o, resv_error_t *err) {
  o.path = dir;
  return resv_store_open(&o, err);
}

static inline resv_type_t *type_of(resv_store_t *s, const char *aggregate) {
  resv_error_t err;
  resv_type_t *t = resv_store_type(s, "test", 4, aggregate, strlen(aggregate), &err);
  ck_assert_msg(t != NULL, "type: %s", err.message);
  return t;
}

static inline bool call(resv_type_t *t, int32_t op, const char *key, const char *owner,
                        const char *attempt, int64_t ttl, resv_answer_t *a, resv_error_t *err) {
  resv_request_t r = {.op = op, .key = test_key("email", key),
                      .owner = test_owner("", owner), .attempt = resv_cstr(attempt),
                      .ttl_ms = ttl, .version = 1};
  return resv_call(t, &r, a, err);
}
/* The test case of the layout, foreign data, a full map and reclaiming
 * (test_file_store_data.c). */
void file_store_data_tcase(Suite *s);

#endif
