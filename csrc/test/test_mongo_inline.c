/* test_mongo_inline.c: blocking calls on the caller's thread (docs/design.md
 * section 7; csrc/mongo/mongo_caller.c).
 *
 * resv_call on a MongoDB store runs the driver on the calling thread with
 * a client lent for the call; resv_submit keeps the dispatcher. What that
 * must keep: an answer while every dispatcher thread is held; the
 * deadline, with the server slow (maxTimeMS) or silent (the socket
 * bounded by the deadline plus the grace); more callers than clients
 * waiting until their deadline, never hanging; the counters as the
 * dispatcher's; shutdown and close while a caller is inside; and a child
 * forked after open never using its parent's clients. Fail points are
 * scoped to each store's appName; the silent server is an emulator of this
 * test, stopped with SIGSTOP. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu.h"

#define GRACE_MS RESV__DEADLINE_GRACE_MS
/* What a loaded machine may add to a bound (a hang guard, not a figure). */
#define SLACK_MS 600

static resv_key_t K(const char *key) { return test_key("email", key); }

static void app_name(char *buf, size_t size, const char *what) {
  static int n;
  snprintf(buf, size, "resv-inline-%s-%d-%d", what, (int)getpid(), n++);
}

static resv_store_t *app_store(const char *app, int32_t threads, int32_t timeout_ms) {
  char uri[512];
  emu_uri_with_app(test_mongo_uri(), app, uri, sizeof uri);
  return emu_open(uri, (resv_options_t){.threads = threads, .timeout_ms = timeout_ms});
}

static void fail_on(const char *app, const char *mode, const char *commands, int block_ms) {
  char data[512];
  snprintf(data, sizeof data,
           "{\"failCommands\": %s, \"appName\": \"%s\", \"blockConnection\": true, "
           "\"blockTimeMS\": %d}",
           commands, app, block_ms);
  emu_failpoint(test_mongo_uri(), mode, data);
}

static void fail_off(void) { emu_failpoint(test_mongo_uri(), "\"off\"", NULL); }

static resv_request_t reserve_of(const char *key, const char *owner, int64_t timeout_ms) {
  return (resv_request_t){.op = RESV_OP_RESERVE, .key = K(key),
                          .owner = test_owner("t1", owner), .attempt = resv_cstr("a"),
                          .ttl_ms = 60000, .timeout_ms = timeout_ms};
}

/* A resv_call on its own thread, and what it answered. */
typedef struct caller {
  pthread_t thread;
  resv_type_t *type;
  resv_request_t req;
  char key[32];
  bool ok;
  resv_answer_t answer;
  resv_error_t err;
  int64_t took_ms;
} caller_t;

static void *call_thread(void *arg) {
  caller_t *c = arg;
  c->req.key = K(c->key);
  int64_t start = resv__monotonic_ms();
  c->ok = resv_call(c->type, &c->req, &c->answer, &c->err);
  c->took_ms = resv__monotonic_ms() - start;
  return NULL;
}

static void caller_start(caller_t *c, resv_type_t *t, const char *key, int64_t timeout_ms) {
  memset(c, 0, sizeof *c);
  c->type = t;
  snprintf(c->key, sizeof c->key, "%s", key);
  c->req = reserve_of(key, "ann", timeout_ms);
  ck_assert_int_eq(pthread_create(&c->thread, NULL, call_thread, c), 0);
}

static void caller_join(caller_t *c) {
  pthread_join(c->thread, NULL);
}

/* ---- where a blocking call runs ---------------------------------------- */

/* The one dispatcher thread is held on the server by a submitted reserve:
 * a blocking call still answers, within its own short deadline, which a
 * call queued behind that job could not. */
START_TEST(a_blocking_call_answers_while_every_dispatcher_thread_is_held) {
  char app[64];
  app_name(app, sizeof app, "held");
  resv_store_t *s = app_store(app, 1, 5000);
  resv_type_t *t = test_fresh_type(s, "inline");
  resv_answer_t a = {0};
  resv_error_t err;
  test_get(t, "setup", &a); /* the type is set up */
  fail_on(app, "{\"times\": 1}", "[\"findAndModify\"]", 2000);
  resv_request_t held = reserve_of("held", "ann", 0);
  resv_job_t *job = resv_submit(t, &held, NULL, NULL);
  ck_assert_ptr_nonnull(job);
  resv_stats_t st;
  for (int i = 0; i < 200; i++) { /* until the worker runs it */
    ck_assert(resv_store_stats(s, &st, NULL));
    if (st.jobs_running == 1) break;
    usleep(10 * 1000);
  }
  ck_assert_int_eq(st.jobs_running, 1);
  usleep(100 * 1000); /* its findAndModify is on the server by now */
  resv_request_t r = reserve_of("free", "bob", 1000);
  int64_t start = resv__monotonic_ms();
  bool ok = resv_call(t, &r, &a, &err);
  int64_t took = resv__monotonic_ms() - start;
  ck_assert_msg(ok, "blocked behind the dispatcher: %s: %s (%lld ms)",
                resv_code_name(err.code), err.message, (long long)took);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert(!resv_job_done(job)); /* the held call is still on the server */
  ck_assert(resv_job_wait(job, 10000));
  ck_assert_int_eq(resv_job_error(job)->code, RESV_OK);
  ck_assert_int_eq(resv_job_answer(job)->status, RESV_RESERVED);
  resv_job_destroy(job);
  fail_off();
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* ---- deadlines --------------------------------------------------------- */

/* A command held on the server past the call's deadline ends there
 * (maxTimeMS): the blocking call answers timeout within its deadline and
 * the grace, and the reservation was not made. */
START_TEST(a_blocking_call_held_on_the_server_answers_timeout_by_its_deadline) {
  char app[64];
  app_name(app, sizeof app, "slow");
  resv_store_t *s = app_store(app, 2, 5000);
  resv_type_t *t = test_fresh_type(s, "inline");
  resv_answer_t a = {0};
  resv_error_t err;
  test_get(t, "setup", &a);
  fail_on(app, "\"alwaysOn\"", "[\"findAndModify\"]", 1500);
  resv_request_t r = reserve_of("k", "ann", 400);
  int64_t start = resv__monotonic_ms();
  bool ok = resv_call(t, &r, &a, &err);
  int64_t took = resv__monotonic_ms() - start;
  fail_off();
  ck_assert_msg(!ok, "answered %s past the deadline", resv_status_name(a.status));
  ck_assert_msg(err.code == RESV_ETIMEOUT, "%s: %s", resv_code_name(err.code), err.message);
  ck_assert_msg(took >= 400 && took <= 400 + GRACE_MS + SLACK_MS, "took %lld ms",
                (long long)took);
  usleep(1600 * 1000); /* past the block */
  test_get(t, "k", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* Stops pid with SIGSTOP and waits until every thread of it is stopped
 * (a thread may run on until the group stop reaches it). */
static void stop_process(pid_t pid) {
  ck_assert_int_eq(kill(pid, SIGSTOP), 0);
  for (int i = 0; i < 500; i++) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *dir = opendir(path);
    ck_assert_ptr_nonnull(dir);
    bool all = true;
    struct dirent *d;
    while ((d = readdir(dir)) && all) {
      if (d->d_name[0] == '.') continue;
      char stat[320], line[512];
      snprintf(stat, sizeof stat, "/proc/%d/task/%s/stat", (int)pid, d->d_name);
      FILE *f = fopen(stat, "r");
      if (!f) continue;
      const char *end = fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL;
      fclose(f);
      all = end && (end[2] == 'T' || end[2] == 't');
    }
    closedir(dir);
    if (all) return;
    usleep(10 * 1000);
  }
  ck_abort_msg("process %d did not stop", (int)pid);
}

/* A server that stops answering altogether (its process stopped: the
 * connection stays open, nothing comes back): a blocking call with a
 * deadline much shorter than the store's timeout (and so than the URI's
 * socket timeout) answers by its own deadline plus the grace, and the
 * store works again once the server does. */
START_TEST(a_silent_server_costs_a_blocking_call_its_deadline_plus_the_grace) {
  emu_t e;
  emu_start(&e, 0, false);
  resv_store_t *s = emu_open(e.uri, (resv_options_t){.threads = 1, .timeout_ms = 8000});
  resv_type_t *t = test_fresh_type(s, "inline");
  resv_answer_t a = {0};
  resv_error_t err;
  test_reserve(t, "warm", "ann", "a", 60000, &a);
  stop_process(e.pid);
  resv_request_t r = reserve_of("k", "ann", 400);
  int64_t start = resv__monotonic_ms();
  bool ok = resv_call(t, &r, &a, &err);
  int64_t took = resv__monotonic_ms() - start;
  ck_assert_int_eq(kill(e.pid, SIGCONT), 0);
  ck_assert_msg(!ok, "answered %s from a stopped server", resv_status_name(a.status));
  ck_assert_msg(err.code == RESV_ETIMEOUT || err.code == RESV_EUNAVAILABLE, "%s: %s",
                resv_code_name(err.code), err.message);
  ck_assert_msg(took <= 400 + GRACE_MS + SLACK_MS, "took %lld ms (%s)", (long long)took,
                err.message);
  fprintf(stderr, "inline: a stopped server: %s after %lld ms (deadline 400 ms)\n",
          resv_code_name(err.code), (long long)took);
  bool back = false;
  r.timeout_ms = 0; /* the store's: time for a server selection */
  for (int i = 0; i < 5 && !back; i++) back = resv_call(t, &r, &a, &err);
  ck_assert_msg(back, "not back: %s", err.message);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  resv_answer_clear(&a);
  resv_store_close(s);
  emu_stop(&e);
}
END_TEST

/* No server at all (nothing listens on the port) and a store whose
 * timeout, and so its server selection, is much longer than the call's
 * deadline: the blocking call does not wait out the selection (mongoc's
 * pooled selection takes no per-call bound), it answers by its deadline
 * plus the grace, as a waiter of the dispatcher does. */
START_TEST(a_short_blocking_call_never_waits_out_a_longer_server_selection) {
  emu_t e;
  emu_start(&e, 0, false);
  char uri[128];
  snprintf(uri, sizeof uri, "%s", e.uri);
  emu_stop(&e); /* the port is free: connections are refused */
  resv_store_t *s = emu_open(uri, (resv_options_t){.threads = 1, .timeout_ms = 6000});
  resv_type_t *t = test_fresh_type(s, "inline");
  resv_answer_t a = {0};
  resv_error_t err;
  for (int call = 0; call < 2; call++) { /* before any answer, and after one failed */
    resv_request_t r = reserve_of("k", "ann", 400);
    int64_t start = resv__monotonic_ms();
    bool ok = resv_call(t, &r, &a, &err);
    int64_t took = resv__monotonic_ms() - start;
    ck_assert_msg(!ok, "answered %s with no server", resv_status_name(a.status));
    ck_assert_msg(err.code == RESV_ETIMEOUT || err.code == RESV_EUNAVAILABLE, "%s: %s",
                  resv_code_name(err.code), err.message);
    ck_assert_msg(took <= 400 + GRACE_MS + SLACK_MS, "call %d took %lld ms (%s)", call,
                  (long long)took, err.message);
  }
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* ---- more callers than clients ---------------------------------------- */

enum { CALLERS = 6 };

/* threads = 1 lends one client to blocking calls: six callers at once
 * take turns and all answer. */
START_TEST(more_blocking_callers_than_clients_take_turns) {
  char app[64];
  app_name(app, sizeof app, "turns");
  resv_store_t *s = app_store(app, 1, 10000);
  resv_type_t *t = test_fresh_type(s, "inline");
  resv_answer_t a = {0};
  test_get(t, "setup", &a);
  caller_t c[CALLERS];
  for (int i = 0; i < CALLERS; i++) {
    char key[32];
    snprintf(key, sizeof key, "turn%d", i);
    caller_start(&c[i], t, key, 0);
  }
  for (int i = 0; i < CALLERS; i++) {
    caller_join(&c[i]);
    ck_assert_msg(c[i].ok, "caller %d: %s: %s", i, resv_code_name(c[i].err.code),
                  c[i].err.message);
    ck_assert_int_eq(c[i].answer.status, RESV_RESERVED);
    resv_answer_clear(&c[i].answer);
  }
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* The one client lent to callers is held on the server: the other callers
 * wait for it until their deadline and answer timeout then, none later
 * than its deadline and the grace, none hanging. */
START_TEST(blocking_callers_without_a_client_answer_timeout_at_their_deadline) {
  char app[64];
  app_name(app, sizeof app, "starved");
  resv_store_t *s = app_store(app, 1, 10000);
  resv_type_t *t = test_fresh_type(s, "inline");
  resv_answer_t a = {0};
  test_get(t, "setup", &a);
  fail_on(app, "{\"times\": 1}", "[\"findAndModify\"]", 3000);
  caller_t holder, c[CALLERS];
  caller_start(&holder, t, "holder", 5000);
  usleep(300 * 1000); /* the holder is on the server */
  for (int i = 0; i < CALLERS; i++) {
    char key[32];
    snprintf(key, sizeof key, "starved%d", i);
    caller_start(&c[i], t, key, 500);
  }
  int timeouts = 0;
  for (int i = 0; i < CALLERS; i++) {
    caller_join(&c[i]);
    ck_assert_msg(!c[i].ok, "caller %d answered %s", i, resv_status_name(c[i].answer.status));
    ck_assert_msg(c[i].err.code == RESV_ETIMEOUT, "caller %d: %s: %s", i,
                  resv_code_name(c[i].err.code), c[i].err.message);
    ck_assert_msg(c[i].took_ms <= 500 + GRACE_MS + SLACK_MS, "caller %d took %lld ms", i,
                  (long long)c[i].took_ms);
    timeouts++;
  }
  caller_join(&holder);
  ck_assert_msg(holder.ok, "holder: %s", holder.err.message);
  ck_assert_int_eq(holder.answer.status, RESV_RESERVED);
  resv_answer_clear(&holder.answer);
  fail_off();
  ck_assert_int_eq(timeouts, CALLERS);
  test_reserve(t, "after", "ann", "a", 60000, &a); /* the client came back */
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* ---- counters ---------------------------------------------------------- */

static resv_stats_t stats_of(resv_store_t *s) {
  resv_stats_t st;
  resv_error_t err;
  ck_assert_msg(resv_store_stats(s, &st, &err), "stats: %s", err.message);
  return st;
}

/* The same calls, blocking and submitted, count the same: by op and
 * status or code, one latency each, slow calls past slow_ms. */
START_TEST(blocking_calls_count_as_submitted_ones_do) {
  char app[64];
  app_name(app, sizeof app, "stats");
  char uri[512];
  emu_uri_with_app(test_mongo_uri(), app, uri, sizeof uri);
  resv_store_t *s = emu_open(uri, (resv_options_t){.threads = 1, .timeout_ms = 5000,
                                                   .slow_ms = 300});
  resv_type_t *t = test_fresh_type(s, "inline");
  resv_answer_t a = {0};
  resv_error_t err;
  test_get(t, "setup", &a);
  resv_stats_t base = stats_of(s);
  for (int way = 0; way < 2; way++) {
    resv_request_t mine = reserve_of(way ? "sub" : "call", "ann", 0);
    resv_request_t theirs = reserve_of(way ? "sub" : "call", "bob", 0);
    resv_request_t slow = reserve_of(way ? "slow-sub" : "slow-call", "ann", 0);
    resv_request_t quick = reserve_of(way ? "quick-sub" : "quick-call", "ann", 350);
    resv_request_t *reqs[] = {&mine, &theirs, &slow, &quick};
    for (int i = 0; i < 4; i++) {
      if (i == 2) fail_on(app, "{\"times\": 1}", "[\"findAndModify\"]", 400);
      if (i == 3) fail_on(app, "{\"times\": 1}", "[\"findAndModify\"]", 1000);
      if (way == 0) {
        resv_call(t, reqs[i], &a, &err);
      } else {
        resv_job_t *job = resv_submit(t, reqs[i], NULL, NULL);
        ck_assert(resv_job_wait(job, 10000));
        resv_job_destroy(job);
      }
      if (i == 3) {
        fail_off();
        usleep(800 * 1000); /* the held command ends on the server */
      }
    }
    resv_stats_t st = stats_of(s);
    ck_assert_uint_eq(st.calls[RESV_OP_RESERVE][RESV_RESERVED] -
                          base.calls[RESV_OP_RESERVE][RESV_RESERVED], 2);
    ck_assert_uint_eq(st.calls[RESV_OP_RESERVE][RESV_CONFLICT] -
                          base.calls[RESV_OP_RESERVE][RESV_CONFLICT], 1);
    ck_assert_uint_eq(st.errors[RESV_OP_RESERVE][RESV_ETIMEOUT] -
                          base.errors[RESV_OP_RESERVE][RESV_ETIMEOUT], 1);
    ck_assert_uint_eq(st.latency[RESV_OP_RESERVE][RESV_STATS_BUCKETS - 1] -
                          base.latency[RESV_OP_RESERVE][RESV_STATS_BUCKETS - 1], 4);
    ck_assert_uint_eq(st.duplicate_key_retries - base.duplicate_key_retries, 1);
    ck_assert_uint_eq(st.slow_calls - base.slow_calls, 2); /* the held two */
    ck_assert_int_eq(st.jobs_running, 0);
    base = st;
  }
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* ---- shutdown and close ------------------------------------------------ */

/* Shutdown while a blocking call is on the server and another waits for
 * the one client: the waiting one answers closed at once, shutdown waits
 * for the one inside (which answers), and every call after answers
 * closed. Close with a call inside tears the store down once it is out
 * (ASan checks no call touches a freed store). */
START_TEST(shutdown_and_close_wait_for_a_blocking_call_inside) {
  char app[64];
  app_name(app, sizeof app, "close");
  resv_store_t *s = app_store(app, 1, 10000);
  resv_type_t *t = test_fresh_type(s, "inline");
  resv_answer_t a = {0};
  resv_error_t err;
  test_get(t, "setup", &a);
  fail_on(app, "{\"times\": 1}", "[\"findAndModify\"]", 1500);
  caller_t inside, waiting;
  caller_start(&inside, t, "inside", 8000);
  usleep(300 * 1000);
  caller_start(&waiting, t, "waiting", 8000);
  usleep(200 * 1000);
  int64_t start = resv__monotonic_ms();
  resv_store_shutdown(s);
  int64_t took = resv__monotonic_ms() - start;
  caller_join(&waiting);
  ck_assert_msg(!waiting.ok && waiting.err.code == RESV_ECLOSED, "waiting: %s: %s",
                resv_code_name(waiting.err.code), waiting.err.message);
  ck_assert_msg(waiting.took_ms < 8000, "waiting took %lld ms", (long long)waiting.took_ms);
  caller_join(&inside);
  ck_assert_msg(inside.ok, "inside: %s: %s", resv_code_name(inside.err.code),
                inside.err.message);
  ck_assert_int_eq(inside.answer.status, RESV_RESERVED);
  resv_answer_clear(&inside.answer);
  fprintf(stderr, "inline: shutdown waited %lld ms for the call inside\n", (long long)took);
  resv_request_t r = reserve_of("after", "ann", 0);
  ck_assert(!resv_call(t, &r, &a, &err));
  ck_assert_int_eq(err.code, RESV_ECLOSED);
  fail_off();
  resv_store_close(s);

  app_name(app, sizeof app, "close2");
  s = app_store(app, 1, 10000);
  t = test_fresh_type(s, "inline");
  test_get(t, "setup", &a);
  fail_on(app, "{\"times\": 1}", "[\"findAndModify\"]", 1000);
  caller_start(&inside, t, "inside", 8000);
  usleep(300 * 1000);
  resv_store_close(s); /* a reaper waits for the call */
  caller_join(&inside);
  ck_assert_msg(inside.ok || inside.err.code == RESV_ECLOSED, "inside: %s: %s",
                resv_code_name(inside.err.code), inside.err.message);
  resv_answer_clear(&inside.answer);
  for (int i = 0; i < 500 && resv__store_reapers() > 0; i++) usleep(10 * 1000);
  ck_assert_int_eq(resv__store_reapers(), 0);
  fail_off();
  resv_answer_clear(&a);
}
END_TEST

/* ---- fork -------------------------------------------------------------- */

/* After blocking calls (a client lent and kept for the next), a child
 * forked then gets closed from the parent's store without touching its
 * clients, and works with a store of its own; the parent's store still
 * works after the child is gone. */
START_TEST(a_forked_child_never_uses_its_parents_blocking_clients) {
  resv_store_t *s = test_open(test_mongo_uri());
  resv_type_t *t = test_fresh_type(s, "inline");
  resv_answer_t a = {0};
  resv_error_t err;
  test_reserve(t, "parent", "ann", "a", 60000, &a);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    resv_request_t r = reserve_of("child", "ann", 0);
    int code = 0;
    if (resv_call(t, &r, &a, &err) || err.code != RESV_ECLOSED) code = 10;
    resv_store_close(s);
#ifndef __SANITIZE_THREAD__
    /* (ThreadSanitizer refuses threads made in a child of a process that
     * had threads: "dup thread with used id".) */
    resv_store_t *own = resv_store_open(&(resv_options_t){.uri = test_mongo_uri()}, &err);
    resv_type_t *ot = own ? resv_store_type(own, "inline", 6, "fork", 4, &err) : NULL;
    if (!code && (!ot || !resv_call(ot, &r, &a, &err) || a.status != RESV_RESERVED)) code = 11;
    resv_store_close(own);
#endif
    test_child_exit(code);
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %d", status);
  for (int i = 0; i < 3; i++) {
    char key[32];
    snprintf(key, sizeof key, "after%d", i);
    test_reserve(t, key, "ann", "a", 60000, &a);
    ck_assert_int_eq(a.status, RESV_RESERVED);
  }
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

Suite *mongo_inline_suite(void) {
  const TTest *tests[] = {
      a_blocking_call_answers_while_every_dispatcher_thread_is_held,
      a_blocking_call_held_on_the_server_answers_timeout_by_its_deadline,
      a_silent_server_costs_a_blocking_call_its_deadline_plus_the_grace,
      a_short_blocking_call_never_waits_out_a_longer_server_selection,
      more_blocking_callers_than_clients_take_turns,
      blocking_callers_without_a_client_answer_timeout_at_their_deadline,
      blocking_calls_count_as_submitted_ones_do,
      shutdown_and_close_wait_for_a_blocking_call_inside,
      a_forked_child_never_uses_its_parents_blocking_clients, NULL};
  return test_suite("mongo_inline", "inline", 120, NULL, NULL, tests);
}
