/* test_mongo_log.c: the driver's log lines and what open says of a URI,
 * with no server (mongo_log.c, mongo_store.c's parse_uri):
 *   - a URI mongoc refuses answers invalid with mongoc's reason (the
 *     reason it only logs), an unknown URI option is invalid too;
 *   - log_level out of range is invalid;
 *   - with nothing listening, a call answers unavailable (never timeout)
 *     and by default nothing of the monitor's reaches stderr; with
 *     log_level debug its lines do, naming the store;
 *   - at the default level a kind of line is shown once a minute, the
 *     next one saying how many were held back. */
#include "tests.h"
#include "mongo_internal.h"

#include <stdio.h>
#include <string.h>

static resv_error_t open_fails(const char *uri) {
  resv_options_t o = {.uri = uri, .timeout_ms = 300};
  resv_error_t err = {0};
  resv_store_t *s = resv_store_open(&o, &err);
  if (s) resv_store_close(s);
  ck_assert_msg(s == NULL, "%s opened", uri);
  return err;
}

START_TEST(a_refused_uri_says_why) {
  test_stderr_begin();
  resv_error_t port = open_fails("mongodb://127.0.0.1:x/");
  resv_error_t option = open_fails("mongodb://127.0.0.1:1/?nosuchoption=1");
  const char *out = test_stderr_end();
  ck_assert_int_eq(port.code, RESV_EINVALID);
  ck_assert_msg(strstr(port.message, "bad MongoDB URI: Port could not be parsed"), "%s",
                port.message);
  ck_assert_int_eq(option.code, RESV_EINVALID);
  ck_assert_msg(strstr(option.message, "Unsupported URI option \"nosuchoption\""), "%s",
                option.message);
  ck_assert_msg(out[0] == '\0', "the driver also said: %s", out);
}
END_TEST

START_TEST(log_level_out_of_range_is_invalid) {
  resv_options_t o = {.log_level = RESV_LOG_DEBUG + 1};
  resv_error_t err = {0};
  ck_assert_ptr_null(resv_store_open(&o, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, "log_level"), "%s", err.message);
}
END_TEST

/* Three calls on a store whose server does not listen; their codes. */
static void three_calls(int32_t log_level, resv_code_t codes[3]) {
  resv_options_t o = {.uri = "mongodb://127.0.0.1:1/", .timeout_ms = 300,
                      .threads = 1, .log_level = log_level};
  resv_error_t err = {0};
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s != NULL, "%s", err.message);
  resv_type_t *t = test_fresh_type(s, "down");
  for (int i = 0; i < 3; i++) {
    resv_request_t r = {.op = RESV_OP_GET, .key = test_key("email", "k")};
    resv_answer_t a = {0};
    int64_t t0 = resv__monotonic_ms();
    ck_assert(!resv_call(t, &r, &a, &err));
    fprintf(stdout, "mongo_log: call %d with nothing listening: %s after %lld ms "
            "(timeout_ms 300)\n", i + 1, resv_code_name(err.code),
            (long long)(resv__monotonic_ms() - t0));
    codes[i] = err.code;
    resv_answer_clear(&a);
  }
  resv_store_close(s);
}

START_TEST(a_call_with_nothing_listening_is_unavailable_and_quiet) {
  resv_code_t codes[3];
  test_stderr_begin();
  three_calls(0, codes);
  const char *out = test_stderr_end();
  for (int i = 0; i < 3; i++)
    ck_assert_msg(codes[i] == RESV_EUNAVAILABLE, "call %d: %s", i + 1,
                  resv_code_name(codes[i]));
  ck_assert_msg(out[0] == '\0', "stderr: %s", out);
}
END_TEST

START_TEST(log_level_debug_shows_the_monitor_naming_the_store) {
  resv_code_t codes[3];
  test_stderr_begin();
  three_calls(RESV_LOG_DEBUG, codes);
  const char *out = test_stderr_end();
  ck_assert_msg(strstr(out, "resv: mongodb 127.0.0.1:1/resv: DEBUG: monitor: "), "%s", out);
}
END_TEST

START_TEST(a_kind_of_warning_shows_once_a_minute) {
  resv_options_t o = {.uri = "mongodb://127.0.0.1:1/"};
  resv_error_t err = {0};
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s != NULL, "%s", err.message);
  test_stderr_begin();
  for (int i = 0; i < 5; i++)
    mongoc_log(MONGOC_LOG_LEVEL_WARNING, "test", "the same warning, %d", i);
  mongoc_log(MONGOC_LOG_LEVEL_ERROR, "test", "another kind");
  mongoc_log(MONGOC_LOG_LEVEL_INFO, "test", "information");
  const char *out = test_stderr_end();
  resv_store_close(s);
  ck_assert_str_eq(out, "resv: mongodb 127.0.0.1:1/resv: WARNING: test: the same warning, 0\n"
                        "resv: mongodb 127.0.0.1:1/resv: ERROR: test: another kind\n");
}
END_TEST

Suite *mongo_log_suite(void) {
  const TTest *tests[] = {
      a_refused_uri_says_why, log_level_out_of_range_is_invalid,
      a_call_with_nothing_listening_is_unavailable_and_quiet,
      log_level_debug_shows_the_monitor_naming_the_store,
      a_kind_of_warning_shows_once_a_minute, NULL};
  return test_suite("mongo_log", "log", 30, NULL, NULL, tests);
}
