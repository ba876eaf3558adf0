/* test_faults.c: the MongoDB store when the server misbehaves.
 *
 * Faults come from MongoDB's own failCommand fail point (sent with a plain
 * client, scoped to the store's appName so a shared server's other clients
 * never see them) and from an emulator this test starts, kills and
 * restarts on the same port. For each fault the rules are docs/design.md section 7
 * and 8's: the call answers one of the codes of section 8, within its
 * deadline (plus the store's grace), and never `reserved` or `confirmed`
 * for a reservation it does not hold; once the fault is gone the same
 * store works again without being reopened; and a write that MongoDB
 * retried, or that the caller retries, gives the right answer, because
 * reserve and confirm are idempotent.
 *
 * Recovery times are printed (stderr, "faults:"), never asserted beyond a
 * generous bound: they are figures for the README's "Guarantees". This
 * file holds the fail point tests; the server's restarts and fork are in
 * test_faults_restart.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"
#include "faults_test.h"

/* ---- one fault, retried by the driver ---------------------------------- */

typedef struct fault {
  const char *name;
  int32_t op;
  const char *commands; /* failCommands */
  const char *action;   /* the failCommand data's action fields */
  int32_t twice;        /* the code when the retry fails too; 0: any fault code */
} fault_t;

/* Each fault once (mode {times: 1}): the driver retries a retryable write
 * or read once, on a new connection, and the call succeeds. */
static const fault_t once[] = {
    {"closed connection, reserve", RESV_OP_RESERVE, "[\"findAndModify\"]", "\"closeConnection\": true", 0},
    {"closed connection, confirm", RESV_OP_CONFIRM, "[\"findAndModify\"]", "\"closeConnection\": true", 0},
    {"closed connection, abandon", RESV_OP_ABANDON, "[\"findAndModify\"]", "\"closeConnection\": true", 0},
    {"closed connection, get", RESV_OP_GET, "[\"find\"]", "\"closeConnection\": true", 0},
    {"NotWritablePrimary, reserve", RESV_OP_RESERVE, "[\"findAndModify\"]", "\"errorCode\": 10107", RESV_EUNAVAILABLE},
    {"HostUnreachable, reserve", RESV_OP_RESERVE, "[\"findAndModify\"]", "\"errorCode\": 6", 0},
    {"ExceededTimeLimit, reserve", RESV_OP_RESERVE, "[\"findAndModify\"]", "\"errorCode\": 262", RESV_ETIMEOUT},
    {"NotWritablePrimary, confirm", RESV_OP_CONFIRM, "[\"findAndModify\"]", "\"errorCode\": 10107", RESV_EUNAVAILABLE},
    {"ShutdownInProgress, release", RESV_OP_RELEASE, "[\"delete\"]", "\"errorCode\": 91", RESV_EUNAVAILABLE},
    {"HostUnreachable, get", RESV_OP_GET, "[\"find\"]", "\"errorCode\": 6", 0},
    {"PrimarySteppedDown, reserve", RESV_OP_RESERVE, "[\"findAndModify\"]", "\"errorCode\": 189", RESV_EUNAVAILABLE},
    {"InterruptedDueToReplStateChange, abandon", RESV_OP_ABANDON, "[\"findAndModify\"]", "\"errorCode\": 11602", RESV_EUNAVAILABLE},
    {"InterruptedAtShutdown, confirm", RESV_OP_CONFIRM, "[\"findAndModify\"]", "\"errorCode\": 11600", RESV_EUNAVAILABLE},
    {"NotPrimaryNoSecondaryOk, get", RESV_OP_GET, "[\"find\"]", "\"errorCode\": 13435", RESV_EUNAVAILABLE},
    {"NotPrimaryOrSecondary, release", RESV_OP_RELEASE, "[\"delete\"]", "\"errorCode\": 13436", RESV_EUNAVAILABLE},
    {"RetryableWriteError label, reserve", RESV_OP_RESERVE, "[\"findAndModify\"]",
     "\"errorCode\": 9001, \"errorLabels\": [\"RetryableWriteError\"]", RESV_EUNAVAILABLE},
};

static int32_t expected_status(int32_t op) {
  switch (op) {
  case RESV_OP_RESERVE: return RESV_RESERVED;
  case RESV_OP_CONFIRM: return RESV_CONFIRMED;
  case RESV_OP_ABANDON: return RESV_ABANDONED;
  case RESV_OP_RELEASE: return RESV_RELEASED;
  default: return RESV_PENDING;
  }
}

/* Puts ANN's pending reservation (hold "a") on key, for the ops that need
 * one. */
static void prepare(resv_type_t *t, int32_t op, const char *key) {
  resv_answer_t a = {0};
  if (op != RESV_OP_RESERVE && op != RESV_OP_CONFIRM) {
    resv_request_t r = {.op = RESV_OP_RESERVE, .key = K(key), .owner = *ANN(),
                        .attempt = resv_cstr("a"), .ttl_ms = 60000};
    resv_error_t err;
    ck_assert_msg(resv_call(t, &r, &a, &err), "%s", err.message);
  }
  resv_answer_clear(&a);
}

START_TEST(a_fault_the_driver_retries_once_still_answers_right) {
  const fault_t *f = &once[_i];
  char app[64];
  app_name(app, sizeof app, "once");
  resv_store_t *s = app_store(app, 3000);
  resv_type_t *t = test_fresh_type(s, "faults");
  resv_answer_t a = {0};
  resv_error_t err;

  prepare(t, f->op, "k");
  fail_on(app, "{\"times\": 1}", f->commands, f->action);
  bool ok = op_call(t, f->op, "k", &a, &err, NULL);
  fail_off();
  ck_assert_msg(ok, "%s: %s: %s", f->name, resv_code_name(err.code), err.message);
  ck_assert_msg(a.status == expected_status(f->op), "%s: %s", f->name,
                resv_status_name(a.status));
  if (f->op == RESV_OP_RESERVE || f->op == RESV_OP_GET) {
    const char *const one[] = {"a"};
    ck_assert_msg(test_holds_are(&a, 1, one), "%s: holds", f->name);
  }
  if (f->op == RESV_OP_CONFIRM) ck_assert_int_eq(a.version, 7);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* The same faults twice in a row (the driver's one retry fails too): the
 * call answers a section-8 error, nothing was written (failCommand fails a
 * command before it runs), and the next call works. */
START_TEST(a_fault_on_the_retry_too_answers_an_error_and_writes_nothing) {
  const fault_t *f = &once[_i];
  char app[64];
  app_name(app, sizeof app, "twice");
  resv_store_t *s = app_store(app, 3000);
  resv_type_t *t = test_fresh_type(s, "faults");
  resv_answer_t a = {0};
  resv_error_t err;
  int64_t took;

  prepare(t, f->op, "k");
  fail_on(app, "{\"times\": 2}", f->commands, f->action);
  bool ok = op_call(t, f->op, "k", &a, &err, &took);
  fail_off();
  ck_assert_msg(!ok, "%s: answered %s through two faults", f->name,
                resv_status_name(a.status));
  ck_assert_msg(is_fault_code(err.code), "%s: %s: %s", f->name,
                resv_code_name(err.code), err.message);
  /* docs/design.md section 12's classes (the server's code kept). */
  ck_assert_msg(!f->twice || err.code == f->twice, "%s: %s (%d), expected %s", f->name,
                resv_code_name(err.code), (int)err.server_code, resv_code_name(f->twice));
  if (strstr(f->action, "errorCode"))
    ck_assert_int_eq(err.server_code, atoi(strchr(f->action, ':') + 1));
  ck_assert_msg(took < 3000 + GRACE_MS + 500, "%s took %lld ms", f->name, (long long)took);
  /* Nothing changed: the reservation is as prepare left it. */
  expect_absent_or_ours(t, "k", f->op != RESV_OP_RESERVE && f->op != RESV_OP_CONFIRM);
  if (f->op == RESV_OP_RESERVE || f->op == RESV_OP_CONFIRM) {
    test_get(t, "k", &a);
    ck_assert_int_eq(a.status, RESV_ABSENT);
  }
  /* And the store works again at once. */
  int64_t recovery = until_answered(t, f->op, "k", 5000, &a);
  ck_assert_int_eq(a.status, expected_status(f->op));
  fprintf(stderr, "faults: %-30s -> %s; next call answered after %lld ms\n", f->name,
          resv_code_name(err.code), (long long)recovery);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* ---- a write concern error: the write happened, the call says timeout --- */

START_TEST(a_write_concern_error_is_an_error_and_the_retry_is_idempotent) {
  int32_t op = _i == 0 ? RESV_OP_RESERVE : RESV_OP_CONFIRM;
  char app[64];
  app_name(app, sizeof app, "wce");
  resv_store_t *s = app_store(app, 3000);
  resv_type_t *t = test_fresh_type(s, "faults");
  resv_answer_t a = {0};
  resv_error_t err;

  fail_on(app, "{\"times\": 1}", "[\"findAndModify\"]",
          "\"writeConcernError\": {\"code\": 64, \"codeName\": \"WriteConcernFailed\", "
          "\"errmsg\": \"waiting for replication timed out\", "
          "\"errInfo\": {\"wtimeout\": true}}");
  bool ok = op_call(t, op, "k", &a, &err, NULL);
  fail_off();
  ck_assert_msg(!ok, "answered %s despite the write concern error", resv_status_name(a.status));
  /* docs/design.md section 12: a write concern timeout is a timeout. */
  ck_assert_msg(err.code == RESV_ETIMEOUT && err.server_code == 64, "%s: %d %s",
                resv_code_name(err.code), (int)err.server_code, err.message);
  /* The write itself was applied: the caller was told it does not know. */
  test_get(t, "k", &a);
  ck_assert_int_eq(a.status, op == RESV_OP_RESERVE ? RESV_PENDING : RESV_CONFIRMED);
  /* The caller retries the same call: same answer as if the first had
   * succeeded, nothing doubled. */
  ck_assert_msg(op_call(t, op, "k", &a, &err, NULL), "%s", err.message);
  ck_assert_int_eq(a.status, expected_status(op));
  if (op == RESV_OP_RESERVE) {
    const char *const one[] = {"a"};
    ck_assert(test_holds_are(&a, 1, one));
  } else {
    ck_assert_int_eq(a.version, 7);
  }
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* A retryable write concern error: the write was applied and the driver
 * retries it with the same transaction number; the server answers the
 * retry from its memory of the first (retryable-writes spec), so the call
 * answers reserved with the one hold. */
START_TEST(a_retried_write_that_was_applied_answers_once) {
  char app[64];
  app_name(app, sizeof app, "retried");
  resv_store_t *s = app_store(app, 3000);
  resv_type_t *t = test_fresh_type(s, "faults");
  resv_answer_t a = {0};
  resv_error_t err;

  fail_on(app, "{\"times\": 1}", "[\"findAndModify\"]",
          "\"errorLabels\": [\"RetryableWriteError\"], "
          "\"writeConcernError\": {\"code\": 91, \"codeName\": \"ShutdownInProgress\", "
          "\"errmsg\": \"shutting down\"}");
  bool ok = op_call(t, RESV_OP_RESERVE, "k", &a, &err, NULL);
  fail_off();
  if (!ok) {
    /* mongoc retries this write when it can select the server again in
     * time; 91 marks the server unknown, and on a loaded machine the
     * retry may give up and hand back the first error. The caller then
     * does what any caller of a failed reserve does: try again, which
     * must find the write that was applied, not a second hold. */
    ck_assert_msg(err.code == RESV_ESERVER || err.code == RESV_EUNAVAILABLE,
                  "%s: %d %s", resv_code_name(err.code), (int)err.server_code,
                  err.message);
    ok = op_call(t, RESV_OP_RESERVE, "k", &a, &err, NULL);
    ck_assert_msg(ok, "again: %s: %s", resv_code_name(err.code), err.message);
  }
  ck_assert_int_eq(a.status, RESV_RESERVED);
  const char *const one[] = {"a"};
  ck_assert(test_holds_are(&a, 1, one));
  test_get(t, "k", &a);
  ck_assert(test_holds_are(&a, 1, one));
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* ---- a server slower than the deadline --------------------------------- */

START_TEST(a_call_blocked_past_its_deadline_answers_timeout_never_reserved) {
  int32_t op = _i == 0 ? RESV_OP_RESERVE : RESV_OP_CONFIRM;
  char app[64];
  app_name(app, sizeof app, "slow");
  resv_store_t *s = app_store(app, 300);
  resv_type_t *t = test_fresh_type(s, "faults");
  resv_answer_t a = {0};
  resv_error_t err;
  int64_t took;

  /* Every findAndModify of this store waits 1.2 s, the retry too. */
  fail_on(app, "\"alwaysOn\"", "[\"findAndModify\"]",
          "\"blockConnection\": true, \"blockTimeMS\": 1200");
  bool ok = op_call(t, op, "k", &a, &err, &took);
  fail_off();
  ck_assert_msg(!ok, "answered %s past the deadline", resv_status_name(a.status));
  ck_assert_msg(err.code == RESV_ETIMEOUT || err.code == RESV_EUNAVAILABLE, "%s: %s",
                resv_code_name(err.code), err.message);
  ck_assert_msg(took <= 300 + GRACE_MS + 400, "the call took %lld ms", (long long)took);
  fprintf(stderr, "faults: blocked %s answered %s after %lld ms (deadline 300 ms)\n",
          op == RESV_OP_RESERVE ? "reserve" : "confirm", resv_code_name(err.code),
          (long long)took);
  /* The blocked command still runs on the server once its block ends, as
   * on MongoDB: timeout means "unknown", and the same call again gives
   * the right answer either way. */
  usleep(1500 * 1000);
  int64_t recovery = until_answered(t, op, "k", 5000, &a);
  ck_assert_int_eq(a.status, expected_status(op));
  if (op == RESV_OP_RESERVE) {
    const char *const one[] = {"a"};
    ck_assert(test_holds_are(&a, 1, one));
  }
  fprintf(stderr, "faults: after the block, the same call answered %s after %lld ms\n",
          resv_status_name(a.status), (long long)recovery);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* docs/design.md section 7: the server is told the deadline (maxTimeMS). A command
 * blocked on the server past it ends there with MaxTimeMSExpired (50):
 * the call answers timeout within its deadline, the driver does not run it
 * a second time (50 is not retryable: the fail point's second turn is left
 * for the next call), and the blocked command is not applied. With only a
 * socket timeout, the server would apply it once its block ended. */
START_TEST(a_command_blocked_past_its_deadline_ends_there_once_and_unapplied) {
  int32_t op = _i == 0 ? RESV_OP_RESERVE : RESV_OP_CONFIRM;
  char app[64];
  app_name(app, sizeof app, "maxtime");
  resv_store_t *s = app_store(app, 400);
  resv_type_t *t = test_fresh_type(s, "faults");
  resv_answer_t a = {0};
  resv_error_t err;
  int64_t took;

  test_get(t, "setup", &a); /* the type's set-up is not what is timed */
  fail_on(app, "{\"times\": 2}", "[\"findAndModify\"]",
          "\"blockConnection\": true, \"blockTimeMS\": 1500");
  for (int call = 0; call < 2; call++) {
    bool ok = op_call(t, op, call ? "k2" : "k1", &a, &err, &took);
    ck_assert_msg(!ok, "answered %s past the deadline", resv_status_name(a.status));
    ck_assert_msg(err.code == RESV_ETIMEOUT && err.server_code == 50,
                  "call %d: %s: %d %s", call, resv_code_name(err.code),
                  (int)err.server_code, err.message);
    ck_assert_msg(took >= 400 && took <= 400 + GRACE_MS, "call %d took %lld ms", call,
                  (long long)took);
    fprintf(stderr, "faults: blocked %s answered timeout (50) after %lld ms (deadline 400 ms)\n",
            op == RESV_OP_RESERVE ? "reserve" : "confirm", (long long)took);
  }
  /* Both turns were taken, one per call: the next call is not blocked. */
  ck_assert_msg(op_call(t, op, "k3", &a, &err, &took), "%s", err.message);
  ck_assert_int_eq(a.status, expected_status(op));
  fail_off();
  usleep(1600 * 1000); /* past the blocks */
  expect_absent_or_ours(t, "k1", false);
  expect_absent_or_ours(t, "k2", false);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* docs/design.md section 12: a type's set-up that failed is retried with back-off,
 * not on every call. The create of a type's first call fails once (a
 * fail point of one turn): the next call, at once, answers the same error
 * without trying (it would succeed now), and a call after the back-off
 * (100 ms first) sets the type up. */
START_TEST(a_failed_set_up_is_retried_after_a_back_off_not_on_every_call) {
  char app[64];
  app_name(app, sizeof app, "setup");
  resv_store_t *s = app_store(app, 3000);
  resv_type_t *t = test_fresh_type(s, "faults");
  resv_answer_t a = {0};
  resv_error_t err;

  fail_on(app, "{\"times\": 1}", "[\"create\"]", "\"errorCode\": 8000");
  ck_assert(!op_call(t, RESV_OP_GET, "k", &a, &err, NULL));
  ck_assert_msg(err.code == RESV_ESERVER && err.server_code == 8000, "%s: %s",
                resv_code_name(err.code), err.message);
  ck_assert(!op_call(t, RESV_OP_GET, "k", &a, &err, NULL));
  ck_assert_msg(err.server_code == 8000 && strstr(err.message, "set-up tried again in"),
                "%s: %s", resv_code_name(err.code), err.message);
  fail_off();
  usleep(150 * 1000);
  ck_assert_msg(op_call(t, RESV_OP_GET, "k", &a, &err, NULL), "%s", err.message);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* A call blocked past its deadline never holds up the store: other calls
 * answer meanwhile, and closing it answers what is queued. */
START_TEST(a_full_queue_answers_busy_and_close_answers_every_call) {
  char app[64];
  app_name(app, sizeof app, "busy");
  char uri[512];
  emu_uri_with_app(test_mongo_uri(), app, uri, sizeof uri);
  resv_store_t *s = emu_open(uri, (resv_options_t){.threads = 1, .queue = 3,
                                                   .timeout_ms = 2000});
  resv_type_t *t = test_fresh_type(s, "faults");
  resv_answer_t a = {0};
  test_reserve(t, "warm", "ann", "a", 60000, &a); /* the type is set up */
  fail_on(app, "\"alwaysOn\"", "[\"findAndModify\"]",
          "\"blockConnection\": true, \"blockTimeMS\": 800");
  enum { N = 12 };
  resv_job_t *jobs[N];
  int busy = 0, closed = 0, answered = 0, other = 0;
  for (int i = 0; i < N; i++) {
    if (i == 1) usleep(100 * 1000); /* the first one is running by now */
    char key[16];
    snprintf(key, sizeof key, "k%d", i);
    resv_request_t r = {.op = RESV_OP_RESERVE, .key = K(key), .owner = *ANN(),
                        .attempt = resv_cstr("a"), .ttl_ms = 60000};
    jobs[i] = resv_submit(t, &r, NULL, NULL);
    ck_assert_ptr_nonnull(jobs[i]);
  }
  /* One runs, three wait, the rest were refused at once. */
  for (int i = 0; i < N; i++)
    if (resv_job_done(jobs[i])) {
      ck_assert_int_eq(resv_job_error(jobs[i])->code, RESV_EBUSY);
      busy++;
    }
  ck_assert_msg(busy >= N - 4, "only %d of %d busy", busy, N);
  resv_store_shutdown(s); /* waits for the running one, fails the queued */
  for (int i = 0; i < N; i++) {
    ck_assert(resv_job_wait(jobs[i], 5000));
    const resv_error_t *e = resv_job_error(jobs[i]);
    if (e->code == RESV_ECLOSED) closed++;
    else if (e->code == RESV_OK) answered++;
    else if (e->code != RESV_EBUSY) other++;
    resv_job_destroy(jobs[i]);
  }
  fail_off();
  fprintf(stderr, "faults: queue 3, 12 calls: %d busy, %d closed, %d answered, %d other\n",
          busy, closed, answered, other);
  ck_assert_int_eq(busy + closed + answered + other, N);
  ck_assert_int_ge(closed, 1);
  ck_assert_int_eq(other, 0);
  resv_error_t err;
  resv_request_t r = {.op = RESV_OP_GET, .key = K("warm")};
  ck_assert(!resv_call(t, &r, &a, &err));
  ck_assert_int_eq(err.code, RESV_ECLOSED);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* ---- between abandon's two writes ------------------------------------- */

/* docs/design.md section 5's abandon is two writes, and anything may happen between
 * them. The answer is decided at the first (the pull, whose findAndModify
 * returns what it left): kept only when the reservation stayed then,
 * abandoned when the pull took its last hold, whatever the delete finds.
 * Before, abandon answered kept whenever the delete deleted nothing, for
 * a reservation gone by then (model/README.md, "What SPIN found"). Here
 * the store's delete is held on the server (failCommand's blockConnection,
 * scoped to its appName) while a second store, on the same type, changes
 * the key. */

#define BLOCK_MS 2500

typedef struct between {
  char app[64];
  resv_store_t *s, *other; /* s abandons; other acts between the writes */
  resv_type_t *t, *ot;
} between_t;

static void between_open(between_t *b) {
  static int n;
  char aggregate[64];
  resv_error_t err;
  app_name(b->app, sizeof b->app, "between");
  b->s = app_store(b->app, 10000);
  b->other = emu_open(test_mongo_uri(), (resv_options_t){.threads = 2, .timeout_ms = 10000});
  snprintf(aggregate, sizeof aggregate, "between%dx%d", (int)getpid(), n++);
  b->t = resv_store_type(b->s, "test", 4, aggregate, strlen(aggregate), &err);
  ck_assert_msg(b->t, "type: %s", err.message);
  b->ot = resv_store_type(b->other, "test", 4, aggregate, strlen(aggregate), &err);
  ck_assert_msg(b->ot, "type: %s", err.message);
}

static void between_close(between_t *b) {
  fail_off();
  resv_store_close(b->s);
  resv_store_close(b->other);
}

static void reserve_for(resv_type_t *t, const char *owner, const char *attempt,
                        int64_t ttl) {
  resv_answer_t a = {0};
  test_reserve(t, "k", owner, attempt, ttl, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  resv_answer_clear(&a);
}

/* Submits ann's abandon of attempt on b->s with its delete held BLOCK_MS
 * on the server, and returns once its pull has landed: the key's holds
 * (read through b->other) no longer name attempt, nholds_left of them. */
static resv_job_t *abandon_held_before_its_delete(between_t *b, const char *attempt,
                                                  size_t nholds_left) {
  char block[64];
  snprintf(block, sizeof block, "\"blockConnection\": true, \"blockTimeMS\": %d", BLOCK_MS);
  fail_on(b->app, "{\"times\": 1}", "[\"delete\"]", block);
  resv_request_t r = {.op = RESV_OP_ABANDON, .key = K("k"),
                      .owner = test_owner("", "ann"), .attempt = resv_cstr(attempt)};
  resv_job_t *job = resv_submit(b->t, &r, NULL, NULL);
  ck_assert_ptr_nonnull(job);
  int64_t start = resv__monotonic_ms();
  for (;;) {
    resv_answer_t a = {0};
    test_get(b->ot, "k", &a);
    bool pulled = a.status != RESV_ABSENT && a.nholds == nholds_left;
    for (size_t i = 0; pulled && i < a.nholds; i++)
      pulled = !test_str_is(a.holds[i], attempt);
    resv_answer_clear(&a);
    if (pulled) break;
    ck_assert_msg(resv__monotonic_ms() - start < BLOCK_MS / 2,
                  "the pull did not land within %d ms", BLOCK_MS / 2);
    usleep(10 * 1000);
  }
  ck_assert_msg(!resv_job_done(job), "the abandon answered before its delete ran");
  return job;
}

/* The abandon's answer, once its delete ran; the job must still have been
 * held when the other store was done (else the test proved nothing). */
static int32_t abandon_answer(resv_job_t *job) {
  ck_assert_msg(!resv_job_done(job),
                "the abandon's delete ran before the other store was done: "
                "a loaded machine? (block %d ms)", BLOCK_MS);
  ck_assert(resv_job_wait(job, 2 * BLOCK_MS + 10000));
  const resv_error_t *err = resv_job_error(job);
  ck_assert_msg(err->code == RESV_OK, "%s: %s", resv_code_name(err->code), err->message);
  int32_t status = resv_job_answer(job)->status;
  resv_job_destroy(job);
  return status;
}

/* The owner confirms k and releases it, through the other store. */
static void confirm_and_release(resv_type_t *t, const char *owner) {
  resv_answer_t a = {0};
  test_confirm(t, "k", owner, 3, &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  test_release(t, "k", owner, &a);
  ck_assert_int_eq(a.status, RESV_RELEASED);
  resv_answer_clear(&a);
}

/* SPIN's trace: the pull takes the last hold; before the delete the
 * owner confirms and releases. The reservation is gone: abandoned (at the
 * pull, where it was pending without holds), never kept. */
START_TEST(abandon_of_the_last_hold_answers_abandoned_when_confirmed_and_released_before_its_delete) {
  between_t b;
  resv_answer_t a = {0};
  between_open(&b);
  reserve_for(b.t, "ann", "a", 60000);
  resv_job_t *job = abandon_held_before_its_delete(&b, "a", 0);
  confirm_and_release(b.ot, "ann");
  int32_t status = abandon_answer(job);
  ck_assert_msg(status == RESV_ABANDONED, "abandon answered %s for a reservation released "
                "after its pull took the last hold", resv_status_name(status));
  test_get(b.ot, "k", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  resv_answer_clear(&a);
  between_close(&b);
}
END_TEST

/* The pull takes the last hold of a reservation about to expire; before
 * the delete another owner takes the expired key over. Not kept: the
 * key is bob's, and ann's abandon was the last of hers. */
START_TEST(abandon_of_the_last_hold_answers_abandoned_when_taken_over_before_its_delete) {
  between_t b;
  resv_answer_t a = {0};
  int64_t t0 = 1700000000000;
  between_open(&b);
  resv_store_set_time(b.s, t0);
  resv_store_set_time(b.other, t0 + 5000);
  reserve_for(b.t, "ann", "a", 1000);
  resv_job_t *job = abandon_held_before_its_delete(&b, "a", 0);
  reserve_for(b.ot, "bob", "b", 60000);
  int32_t status = abandon_answer(job);
  ck_assert_msg(status == RESV_ABANDONED, "abandon answered %s for a reservation another "
                "owner took over after its pull", resv_status_name(status));
  test_get(b.ot, "k", &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert(test_str_is(a.owner_id, "bob"));
  resv_answer_clear(&a);
  between_close(&b);
}
END_TEST

/* The pull leaves another hold: kept, true at the pull, though the other
 * attempt confirms and the owner releases before the delete. (The old
 * code answered kept here too; an abandon that answered from the delete
 * alone, "deleted nothing: abandoned", would not.) */
START_TEST(abandon_answers_kept_when_another_hold_stayed_at_its_pull) {
  between_t b;
  between_open(&b);
  reserve_for(b.t, "ann", "a", 60000);
  reserve_for(b.t, "ann", "a2", 60000);
  resv_job_t *job = abandon_held_before_its_delete(&b, "a", 1);
  confirm_and_release(b.ot, "ann");
  int32_t status = abandon_answer(job);
  ck_assert_msg(status == RESV_KEPT, "abandon answered %s, but a2 held the reservation "
                "when its pull took a's hold", resv_status_name(status));
  between_close(&b);
}
END_TEST

Suite *faults_suite(void) {
  Suite *s = suite_create("faults");
  TCase *tc = tcase_create("failpoints");
  int n = (int)(sizeof once / sizeof once[0]);
  tcase_add_loop_test(tc, a_fault_the_driver_retries_once_still_answers_right, 0, n);
  tcase_add_loop_test(tc, a_fault_on_the_retry_too_answers_an_error_and_writes_nothing, 0, n);
  tcase_add_loop_test(tc, a_write_concern_error_is_an_error_and_the_retry_is_idempotent, 0, 2);
  tcase_add_test(tc, a_retried_write_that_was_applied_answers_once);
  tcase_add_loop_test(tc, a_call_blocked_past_its_deadline_answers_timeout_never_reserved, 0, 2);
  tcase_add_loop_test(tc, a_command_blocked_past_its_deadline_ends_there_once_and_unapplied, 0, 2);
  tcase_add_test(tc, a_full_queue_answers_busy_and_close_answers_every_call);
  tcase_add_test(tc, a_failed_set_up_is_retried_after_a_back_off_not_on_every_call);
  tcase_set_timeout(tc, 30);
  suite_add_tcase(s, tc);
  tc = tcase_create("between abandon's writes");
  tcase_add_test(tc, abandon_of_the_last_hold_answers_abandoned_when_confirmed_and_released_before_its_delete);
  tcase_add_test(tc, abandon_of_the_last_hold_answers_abandoned_when_taken_over_before_its_delete);
  tcase_add_test(tc, abandon_answers_kept_when_another_hold_stayed_at_its_pull);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  faults_restart_tcase(s);
  return s;
}
