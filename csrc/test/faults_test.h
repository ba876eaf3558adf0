/* faults_test.h: what the files of the faults suite share
 * (test_faults.c, test_faults_restart.c): stores scoped to an appName,
 * MongoDB's failCommand fail point on and off, one call of an op for ANN
 * and the checks of its answer, and the restart test case. */
#ifndef RESV_FAULTS_TEST_H
#define RESV_FAULTS_TEST_H

#include <stdio.h>
#include <unistd.h>

#include "emu.h"

#define TIMEOUT_MS 1000
#define GRACE_MS 250 /* store.c's DEADLINE_GRACE_MS */

static inline resv_key_t K(const char *key) { return test_key("email", key); }
static inline const resv_owner_t *ANN(void) {
  static resv_owner_t o;
  o = test_owner("t1", "ann");
  return &o;
}

/* A store on RESV_TEST_URI whose connections carry appName app. */
static inline resv_store_t *app_store(const char *app, int32_t timeout_ms) {
  char uri[512];
  emu_uri_with_app(test_mongo_uri(), app, uri, sizeof uri);
  return emu_open(uri, (resv_options_t){.threads = 2, .timeout_ms = timeout_ms});
}

static inline void app_name(char *buf, size_t size, const char *what) {
  static int n;
  snprintf(buf, size, "resv-%s-%d-%d", what, (int)getpid(), n++);
}

static inline void fail_on(const char *app, const char *mode, const char *commands,
                           const char *action) {
  char data[512];
  snprintf(data, sizeof data, "{\"failCommands\": %s, \"appName\": \"%s\", %s}",
           commands, app, action);
  emu_failpoint(test_mongo_uri(), mode, data);
}

static inline void fail_off(void) { emu_failpoint(test_mongo_uri(), "\"off\"", NULL); }

static inline bool is_fault_code(int32_t code) {
  return code == RESV_EUNAVAILABLE || code == RESV_ETIMEOUT || code == RESV_ESERVER;
}

/* The one call of op on key for ANN, attempt "a", version 7. */
static inline bool op_call(resv_type_t *t, int32_t op, const char *key, resv_answer_t *a,
                           resv_error_t *err, int64_t *took) {
  resv_request_t r = {.op = op, .key = K(key), .owner = *ANN(),
                      .attempt = resv_cstr("a"), .ttl_ms = 60000, .version = 7};
  int64_t start = resv__monotonic_ms();
  bool ok = resv_call(t, &r, a, err);
  if (took) *took = resv__monotonic_ms() - start;
  return ok;
}

/* Asserts key's reservation through t: absent, or ANN's pending one with
 * the one hold "a" (when pending_ok). */
static inline void expect_absent_or_ours(resv_type_t *t, const char *key, bool pending_ok) {
  resv_answer_t a = {0};
  test_get(t, key, &a);
  if (a.status != RESV_ABSENT) {
    ck_assert_msg(pending_ok, "%s: %s, expected absent", key, resv_status_name(a.status));
    ck_assert_int_eq(a.status, RESV_PENDING);
    ck_assert(test_str_is(a.owner_id, "ann"));
    const char *const one[] = {"a"};
    ck_assert(test_holds_are(&a, 1, one));
  }
  resv_answer_clear(&a);
}

/* Calls op until it answers, up to limit_ms; returns how long it took. */
static inline int64_t until_answered(resv_type_t *t, int32_t op, const char *key,
                                     int64_t limit_ms, resv_answer_t *a) {
  int64_t start = resv__monotonic_ms();
  resv_error_t err;
  for (;;) {
    if (op_call(t, op, key, a, &err, NULL)) return resv__monotonic_ms() - start;
    ck_assert_msg(is_fault_code(err.code), "%s: %s", resv_code_name(err.code),
                  err.message);
    ck_assert_msg(resv__monotonic_ms() - start < limit_ms,
                  "no recovery within %lld ms: %s: %s", (long long)limit_ms,
                  resv_code_name(err.code), err.message);
    usleep(20 * 1000);
  }
}

/* The test case "restart" (test_faults_restart.c): the server down at
 * open, gone, killed or stopped and back, and a store used after fork. */
void faults_restart_tcase(Suite *s);

#endif
