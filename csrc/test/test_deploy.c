/* test_deploy.c: the MongoDB store on deployments as production runs them
 * (issue 12, docs/design.md section 12): over TLS with a CA file, and as a user with
 * readWrite on its database only.
 *
 * Each test starts its own emulator (emulator/run.py --tls, or --user=...),
 * whatever RESV_TEST_URI names, since it needs the server's certificate or
 * users to be known. */
#include <stdio.h>
#include <string.h>

#include "emu.h"

static void works(resv_store_t *s, const char *prefix) {
  resv_type_t *t = test_fresh_type(s, prefix);
  resv_answer_t a = {0};

  test_reserve(t, "k", "u1", "a1", 60000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  test_reserve(t, "k", "u2", "b1", 60000, &a);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  test_confirm(t, "k", "u1", 3, &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  test_get(t, "k", &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  test_release(t, "k", "u1", &a);
  ck_assert_int_eq(a.status, RESV_RELEASED);
  test_reserve(t, "j", "u1", "a1", 60000, &a);
  test_abandon(t, "j", "u1", "a1", &a);
  ck_assert_int_eq(a.status, RESV_ABANDONED);
  resv_answer_clear(&a);
}

/* tls=true&tlsCAFile=<the CA the emulator made>: every call works; the
 * same server without TLS answers nothing. */
START_TEST(a_store_over_tls_works) {
  emu_t e;
  char plain[128];
  resv_error_t err;
  resv_answer_t a = {0};

  emu_start_mode(&e, 0, "--tls");
  ck_assert_msg(strstr(e.uri, "tls=true&tlsCAFile="), "%s", e.uri);
  resv_store_t *s = emu_open(e.uri, (resv_options_t){.threads = 2});
  works(s, "tls");
  resv_store_close(s);

  /* Without TLS: open fails, or (an open that does not wait on the
   * network) the first call does. */
  snprintf(plain, sizeof plain, "mongodb://127.0.0.1:%d/?serverSelectionTimeoutMS=500", e.port);
  resv_options_t o = {.uri = plain, .threads = 1, .timeout_ms = 1000};
  s = resv_store_open(&o, &err);
  if (s) {
    resv_type_t *t = test_fresh_type(s, "plain");
    resv_request_t r = {.op = RESV_OP_GET, .key = test_key("email", "k")};
    ck_assert(!resv_call(t, &r, &a, &err));
    resv_store_close(s);
  }
  ck_assert_msg(err.code == RESV_EUNAVAILABLE || err.code == RESV_ETIMEOUT, "%s: %s",
                resv_code_name(err.code), err.message);
  resv_answer_clear(&a);
  emu_stop(&e);
}
END_TEST

/* SCRAM-SHA-256 as a user with readWrite on its database alone: every
 * call works on a replica-set primary. */
START_TEST(a_read_write_user_works_on_a_primary) {
  emu_t e;
  char uri[256];

  emu_start_mode(&e, 0, "--user=app:s3cret:readWrite@resv");
  snprintf(uri, sizeof uri, "mongodb://app:s3cret@127.0.0.1:%d/resv?authSource=admin",
           e.port);
  resv_store_t *s = emu_open(uri, (resv_options_t){.threads = 2});
  works(s, "rw");
  resv_store_close(s);
  emu_stop(&e);
}
END_TEST

/* A wrong password: the first call fails, saying authentication failed,
 * and never shows the password. */
START_TEST(a_wrong_password_fails_the_first_call_clearly) {
  emu_t e;
  char uri[256];
  resv_error_t err;
  resv_answer_t a = {0};

  emu_start_mode(&e, 0, "--user=app:s3cret:readWrite@resv");
  snprintf(uri, sizeof uri, "mongodb://app:wr0ng@127.0.0.1:%d/resv?authSource=admin",
           e.port);
  resv_store_t *s = emu_open(uri, (resv_options_t){.threads = 1, .timeout_ms = 5000});
  resv_type_t *t = test_fresh_type(s, "wrong");
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", "k"),
                      .owner = test_owner("", "u"), .attempt = resv_cstr("a"),
                      .ttl_ms = 1000};
  ck_assert(!resv_call(t, &r, &a, &err));
  ck_assert_msg(strstr(err.message, "uthenticat"), "%s: %s", resv_code_name(err.code),
                err.message);
  ck_assert_msg(!strstr(err.message, "wr0ng"), "%s", err.message);
  fprintf(stderr, "deploy: wrong password: %s: %s\n", resv_code_name(err.code), err.message);
  resv_answer_clear(&a);
  resv_store_close(s);
  emu_stop(&e);
}
END_TEST

Suite *deploy_suite(void) {
  const TTest *tests[] = {
      a_store_over_tls_works, a_read_write_user_works_on_a_primary,
      a_wrong_password_fails_the_first_call_clearly, NULL};
  return test_suite("deploy", "deploy", 60, NULL, NULL, tests);
}
