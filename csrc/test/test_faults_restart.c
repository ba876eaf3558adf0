/* test_faults_restart.c: the MongoDB store when the server goes away, in
 * the faults suite: a store opened while the server is down, calls with
 * the server gone, check at open, a server killed or stopped and
 * restarted on the same port (an emulator this test starts), and a store
 * used in a child after fork. docs/design.md sections 7 and 8 are the
 * rules, as in test_faults.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"
#include "faults_test.h"

/* ---- the server down, and back ----------------------------------------- */

/* docs/design.md section 7: without check, opening never waits on the network: a
 * store opened while the server is down opens at once, its calls answer
 * unavailable (or timeout) within their deadline, and it works as soon as
 * the server is back. */
START_TEST(a_store_opened_while_the_server_is_down_works_once_it_is_back) {
  emu_t e;
  emu_start(&e, 0, false);
  emu_kill(&e);
  char uri[256];
  snprintf(uri, sizeof uri, "mongodb://127.0.0.1:%d/app", e.port);
  resv_options_t o = {.uri = uri, .timeout_ms = 500, .threads = 2};
  resv_error_t err;
  resv_answer_t a = {0};
  int64_t took, start = resv__monotonic_ms();
  resv_store_t *s = resv_store_open(&o, &err);
  int64_t opened = resv__monotonic_ms() - start;

  ck_assert_msg(s != NULL, "%s: %s", resv_code_name(err.code), err.message);
  ck_assert_msg(opened < 100, "open took %lld ms", (long long)opened);
  resv_type_t *t = test_fresh_type(s, "down");
  ck_assert(!op_call(t, RESV_OP_RESERVE, "k", &a, &err, &took));
  ck_assert_msg(err.code == RESV_EUNAVAILABLE || err.code == RESV_ETIMEOUT, "%s: %s",
                resv_code_name(err.code), err.message);
  ck_assert_msg(took <= 500 + GRACE_MS + 400, "the call took %lld ms", (long long)took);
  emu_start(&e, e.port, false);
  int64_t recovery = until_answered(t, RESV_OP_RESERVE, "k", 10000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  fprintf(stderr, "faults: opened with the server down in %lld ms; first answer %lld ms "
          "after the restart\n", (long long)opened, (long long)recovery);
  resv_answer_clear(&a);
  resv_store_close(s);
  emu_stop(&e);
}
END_TEST

/* A call whose own timeout_ms ends before the store's server selection
 * would: with the server gone (the driver knows no server that takes
 * writes), it answers unavailable at once, not timeout after its deadline
 * while a selection of the store's timeout holds a dispatcher thread. */
START_TEST(a_short_call_with_the_server_gone_is_unavailable_at_once) {
  emu_t e;
  emu_start(&e, 0, false);
  resv_store_t *s = emu_open(e.uri, (resv_options_t){.threads = 2, .timeout_ms = 3000});
  resv_type_t *t = test_fresh_type(s, "short");
  resv_answer_t a = {0};
  resv_error_t err;
  int64_t took;
  ck_assert_msg(op_call(t, RESV_OP_RESERVE, "k", &a, &err, NULL), "%s", err.message);
  emu_kill(&e);
  /* The call that finds the connection dead: the server is unknown since. */
  ck_assert(!op_call(t, RESV_OP_GET, "k", &a, &err, &took));
  fprintf(stderr, "faults: the first call after the kill: %s after %lld ms\n",
          resv_code_name(err.code), (long long)took);
  resv_request_t r = {.op = RESV_OP_GET, .key = K("k"), .timeout_ms = 300};
  for (int i = 0; i < 3; i++) {
    int64_t start = resv__monotonic_ms();
    ck_assert(!resv_call(t, &r, &a, &err));
    took = resv__monotonic_ms() - start;
    ck_assert_msg(err.code == RESV_EUNAVAILABLE, "%s: %s", resv_code_name(err.code),
                  err.message);
    fprintf(stderr, "faults: a 300 ms call with the server gone: %s after %lld ms\n",
            resv_code_name(err.code), (long long)took);
  }
  emu_start(&e, e.port, false);
  /* A fresh emulator: the key is absent there. */
  int64_t recovery = until_answered(t, RESV_OP_GET, "k", 10000, &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  fprintf(stderr, "faults: found again %lld ms after the restart\n", (long long)recovery);
  resv_answer_clear(&a);
  resv_store_close(s);
  emu_stop(&e);
}
END_TEST

/* The short-call rule waits for the pool to have reached a server: a
 * store opened with check (which reaches it on a client of its own) takes
 * a short first call as any other. */
START_TEST(a_short_first_call_after_check_at_open_works) {
  emu_t e;
  emu_start(&e, 0, false);
  resv_store_t *s = emu_open(e.uri, (resv_options_t){.threads = 2, .timeout_ms = 3000,
                                                     .check = 1});
  resv_type_t *t = test_fresh_type(s, "short");
  resv_answer_t a = {0};
  resv_error_t err;
  resv_request_t r = {.op = RESV_OP_GET, .key = K("k"), .timeout_ms = 300};
  ck_assert_msg(resv_call(t, &r, &a, &err), "%s: %s", resv_code_name(err.code), err.message);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  resv_answer_clear(&a);
  resv_store_close(s);
  emu_stop(&e);
}
END_TEST

/* check = true authenticates at open: a wrong password fails there,
 * clearly and without the password; the right one opens. */
START_TEST(check_at_open_authenticates) {
  emu_t e;
  char uri[256];
  resv_error_t err;
  emu_start_mode(&e, 0, "--user=app:s3cret:readWrite@resv");
  snprintf(uri, sizeof uri, "mongodb://app:wr0ng@127.0.0.1:%d/resv?authSource=admin",
           e.port);
  resv_options_t o = {.uri = uri, .timeout_ms = 2000, .threads = 1, .check = 1};
  ck_assert_ptr_null(resv_store_open(&o, &err));
  ck_assert_msg(strstr(err.message, "uthenticat") && !strstr(err.message, "wr0ng"),
                "%s: %s", resv_code_name(err.code), err.message);
  fprintf(stderr, "faults: check with a wrong password: %s: %s\n", resv_code_name(err.code),
          err.message);
  /* Without check the same open succeeds: the first call says it. */
  o.check = 0;
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_ptr_nonnull(s);
  resv_store_close(s);
  snprintf(uri, sizeof uri, "mongodb://app:s3cret@127.0.0.1:%d/resv?authSource=admin",
           e.port);
  o.check = 1;
  s = resv_store_open(&o, &err);
  ck_assert_msg(s != NULL, "%s", err.message);
  ck_assert(!resv_store_is_sharded(s));
  resv_store_close(s);
  emu_stop(&e);
}
END_TEST

START_TEST(a_server_down_at_open_is_unavailable_at_once) {
  emu_t e;
  emu_start(&e, 0, false);
  emu_kill(&e);
  char uri[256];
  snprintf(uri, sizeof uri, "mongodb://ann:s3cret@127.0.0.1:%d/app", e.port);
  resv_options_t o = {.uri = uri, .timeout_ms = 5000, .check = 1};
  resv_error_t err;
  int64_t start = resv__monotonic_ms();
  resv_store_t *s = resv_store_open(&o, &err);
  int64_t took = resv__monotonic_ms() - start;
  ck_assert_ptr_null(s);
  ck_assert_msg(err.code == RESV_EUNAVAILABLE, "%s: %s", resv_code_name(err.code),
                err.message);
  ck_assert_msg(!strstr(err.message, "s3cret"), "%s", err.message);
  ck_assert_msg(took < 2000, "open took %lld ms", (long long)took);
  fprintf(stderr, "faults: open with the server down: unavailable after %lld ms\n",
          (long long)took);
}
END_TEST

/* Kills the store's server (SIGKILL: connections drop without a word)
 * or stops it, calls while it is down, restarts it on the same port and
 * measures how long the store takes to answer again, unaided. */
static void restart_run(bool crash) {
  emu_t e;
  emu_start(&e, 0, false);
  resv_store_t *s = emu_open(e.uri, (resv_options_t){.threads = 2, .timeout_ms = TIMEOUT_MS});
  resv_type_t *t = test_fresh_type(s, "restart");
  resv_answer_t a = {0};
  resv_error_t err;
  int64_t took, worst = 0;

  test_reserve(t, "before", "ann", "a", 60000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  if (crash) emu_kill(&e); else emu_stop(&e);

  for (int i = 0; i < 2; i++) {
    int32_t op = i % 2 ? RESV_OP_GET : RESV_OP_RESERVE;
    bool ok = op_call(t, op, "down", &a, &err, &took);
    ck_assert_msg(!ok, "answered %s with the server down", resv_status_name(a.status));
    ck_assert_msg(err.code == RESV_EUNAVAILABLE || err.code == RESV_ETIMEOUT, "%s: %s",
                  resv_code_name(err.code), err.message);
    ck_assert_msg(took <= TIMEOUT_MS + GRACE_MS + 500, "a call took %lld ms", (long long)took);
    if (took > worst) worst = took;
  }
  emu_start(&e, e.port, false);
  int64_t recovery = until_answered(t, RESV_OP_RESERVE, "after", 15000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  fprintf(stderr,
          "faults: server %s: calls while down answered within %lld ms "
          "(timeout %d); first answer %lld ms after the restart\n",
          crash ? "killed" : "stopped", (long long)worst, TIMEOUT_MS,
          (long long)recovery);
  resv_answer_clear(&a);
  resv_store_close(s);
  emu_stop(&e);
}

START_TEST(a_server_killed_and_restarted_is_found_again) { restart_run(true); }
END_TEST

START_TEST(a_server_stopped_and_restarted_is_found_again) { restart_run(false); }
END_TEST

/* ---- fork ----------------------------------------------------------------- */

#include <sys/wait.h>

/* A store used in a child process answers closed and leaves the parent's
 * connections alone; the child exits cleanly; the parent still works. */
static void fork_run(const char *uri) {
  resv_store_t *s = uri ? test_open(uri) : test_open(NULL);
  resv_type_t *t = test_fresh_type(s, "fork");
  resv_answer_t a = {0};
  test_reserve(t, "k", "ann", "a", 60000, &a);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    resv_error_t err;
    resv_request_t r = {.op = RESV_OP_RESERVE, .key = K("k2"), .owner = *ANN(),
                        .attempt = resv_cstr("a"), .ttl_ms = 1000};
    int status = 0;
    if (resv_call(t, &r, &a, &err) || err.code != RESV_ECLOSED) status |= 1;
    resv_job_t *job = resv_submit(t, &r, NULL, &err);
    if (!job || !resv_job_done(job) || resv_job_error(job)->code != RESV_ECLOSED)
      status |= 2;
    resv_job_destroy(job);
    if (resv_store_type(s, "x", 1, "y", 1, &err) || err.code != RESV_ECLOSED) status |= 4;
    resv_store_close(s); /* frees the handle only: the rest is the parent's */
    /* End by exec, not _exit: what the child inherited and must leave
     * alone would otherwise count as leaked in a leak checker (valgrind
     * checks a child at its exit, not across an exec). */
    char code[4];
    snprintf(code, sizeof code, "%d", status);
    execl("/bin/sh", "sh", "-c", "exit \"$1\"", "sh", code, (char *)NULL);
    _exit(127);
  }
  int status;
  ck_assert(waitpid(pid, &status, 0) == pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  test_reserve(t, "k2", "ann", "a", 60000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  test_get(t, "k", &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  resv_answer_clear(&a);
  resv_store_close(s);
}

START_TEST(a_store_used_after_fork_answers_closed_on_memory) { fork_run(NULL); }
END_TEST

START_TEST(a_store_used_after_fork_answers_closed_on_mongo) { fork_run(test_mongo_uri()); }
END_TEST
void faults_restart_tcase(Suite *s) {
  TCase *tc = tcase_create("restart");
  tcase_add_test(tc, a_server_down_at_open_is_unavailable_at_once);
  tcase_add_test(tc, a_store_opened_while_the_server_is_down_works_once_it_is_back);
  tcase_add_test(tc, a_short_call_with_the_server_gone_is_unavailable_at_once);
  tcase_add_test(tc, a_short_first_call_after_check_at_open_works);
  tcase_add_test(tc, check_at_open_authenticates);
  tcase_add_test(tc, a_server_killed_and_restarted_is_found_again);
  tcase_add_test(tc, a_server_stopped_and_restarted_is_found_again);
  tcase_add_test(tc, a_store_used_after_fork_answers_closed_on_memory);
  tcase_add_test(tc, a_store_used_after_fork_answers_closed_on_mongo);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
}
