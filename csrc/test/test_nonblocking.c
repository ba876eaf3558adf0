/* test_nonblocking.c: a store never blocks a host, and reads survive a
 * reader table full of the dead.
 *
 * A writer frozen inside a commit is the program resv_freeze (built beside
 * this runner, csrc/test/tools/freeze_committer.c): it takes the store's
 * write gate and LMDB's writer lock and stops itself. Meanwhile this
 * process's calls must answer by their deadline plus the grace: a call
 * submitted from a host that must not block returns at once (its write
 * waits on a dispatcher thread), a read answers from its snapshot, a
 * blocking call answers timeout at its deadline. A watchdog continues the
 * frozen writer after a few seconds, so that a store that does wait ends
 * the test with a failure instead of hanging it. */
#include <arpa/inet.h>
#include <errno.h>
#include <lmdb.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests.h"

#define TIMEOUT_MS 300
#define GRACE_MS 250   /* RESV__DEADLINE_GRACE_MS */
#define SLACK_MS 250   /* a loaded machine's scheduling */
#define WATCHDOG_MS 10000 /* far past every call's deadline, even under load */

static char dir[256];

static void setup(void) { test_temp_dir(dir, sizeof dir); }
static void teardown(void) { test_remove_dir(dir); }

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static resv_store_t *open_store(int32_t sync) {
  resv_options_t o = {.path = dir, .sync = sync, .threads = 2, .timeout_ms = TIMEOUT_MS,
                      .map_size = 64 << 20};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s != NULL, "open %s: %s", dir, err.message);
  return s;
}

static resv_request_t request(int32_t op, const char *key, const char *owner) {
  return (resv_request_t){.op = op, .key = test_key("email", key),
                          .owner = test_owner("", owner), .attempt = resv_cstr("a1"),
                          .ttl_ms = 60000};
}

/* ---- the frozen writer ------------------------------------------------ */

static pid_t frozen;
static atomic_bool continued;

/* Sends the frozen writer its one SIGCONT, from the watchdog or thaw,
 * whichever comes first. A second one could land while the writer is
 * exiting under LeakSanitizer, whose leak check attaches to the process
 * with ptrace: SIGCONT discards the attach's pending SIGSTOP, and the
 * check then waits forever for a stop that never comes. */
static void continue_once(void) {
  if (!atomic_exchange(&continued, true)) kill(frozen, SIGCONT);
}

/* Continues the frozen writer after WATCHDOG_MS, whatever happens. */
static void *watchdog(void *arg) {
  (void)arg;
  struct timespec step = {0, 10 * 1000000L};
  for (int ms = 0; ms < WATCHDOG_MS && !atomic_load(&continued); ms += 10) nanosleep(&step, NULL);
  continue_once();
  return NULL;
}

/* Starts resv_freeze on dir and returns once it is stopped holding the
 * locks, with the watchdog running. */
static void freeze_a_writer(pthread_t *dog) {
  char self[PATH_MAX], tool[PATH_MAX + 16];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  ck_assert(n > 0);
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  *slash = '\0';
  snprintf(tool, sizeof tool, "%s/resv_freeze", self);
  frozen = fork();
  ck_assert(frozen >= 0);
  if (frozen == 0) {
    freopen("/dev/null", "w", stdout);
    execl(tool, tool, dir, (char *)NULL);
    _exit(127);
  }
  int status;
  ck_assert_int_eq(waitpid(frozen, &status, WUNTRACED), frozen);
  ck_assert_msg(WIFSTOPPED(status), "resv_freeze did not stop (status %d)", status);
  atomic_store(&continued, false);
  ck_assert_int_eq(pthread_create(dog, NULL, watchdog, NULL), 0);
}

/* Continues the writer (if the watchdog has not) and reaps it. */
static void thaw(pthread_t dog) {
  continue_once();
  int status;
  ck_assert_int_eq(waitpid(frozen, &status, 0), frozen);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "resv_freeze: status %d",
                status);
  pthread_join(dog, NULL);
}

/* A job of a host that must not block: resv_submit returns before the
 * deadline, and the job is answered by its deadline plus the grace, with
 * want (a code, or RESV_OK and the status wanted_status). */
static void submit_answers(resv_type_t *t, resv_request_t r, int32_t want,
                           int32_t want_status) {
  resv_error_t err;
  int64_t t0 = now_ms();
  resv_job_t *job = resv_submit(t, &r, NULL, &err);
  int64_t returned = now_ms() - t0;
  ck_assert_ptr_nonnull(job);
  ck_assert_msg(returned < TIMEOUT_MS, "resv_submit blocked the host %lld ms",
                (long long)returned);
  bool done = resv_job_wait(job, TIMEOUT_MS + GRACE_MS + SLACK_MS - returned);
  int64_t answered = now_ms() - t0;
  ck_assert_msg(done, "no answer within the deadline and the grace (%lld ms)",
                (long long)answered);
  const resv_error_t *e = resv_job_error(job);
  ck_assert_msg(e->code == want, "answer %s (%s), want %s", resv_code_name(e->code),
                e->message, resv_code_name(want));
  if (want == RESV_OK) ck_assert_int_eq(resv_job_answer(job)->status, want_status);
  resv_job_destroy(job);
}

/* sync = "process" answers inline: a write from a host that must not
 * block goes to the dispatcher when the gate is taken and answers
 * timeout; a read and a write that changes nothing answer from the
 * snapshot; after the writer goes on, writes succeed inline again. */
START_TEST(test_frozen_committer_blocks_no_host) {
  resv_store_t *s = open_store(RESV_SYNC_PROCESS);
  resv_type_t *t = test_fresh_type(s, "gate");
  resv_answer_t a = {0};
  test_reserve(t, "taken@x", "o1", "a1", 60000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  pthread_t dog;
  freeze_a_writer(&dog);
  submit_answers(t, request(RESV_OP_RESERVE, "new@x", "o1"), RESV_ETIMEOUT, 0);
  submit_answers(t, request(RESV_OP_GET, "taken@x", ""), RESV_OK, RESV_PENDING);
  submit_answers(t, request(RESV_OP_RESERVE, "taken@x", "o2"), RESV_OK, RESV_CONFLICT);
  submit_answers(t, request(RESV_OP_SWEEP, "", ""), RESV_ETIMEOUT, 0);
  /* resv_try_call: a read answers here, a write says it would wait. */
  resv_error_t cerr;
  resv_request_t g = request(RESV_OP_GET, "taken@x", "");
  ck_assert(resv_try_call(t, &g, &a, &cerr));
  ck_assert_int_eq(a.status, RESV_PENDING);
  resv_request_t w0 = request(RESV_OP_RESERVE, "new@x", "o1");
  int64_t t1 = now_ms();
  ck_assert(!resv_try_call(t, &w0, &a, &cerr));
  ck_assert_int_eq(cerr.code, RESV_OK);
  ck_assert_msg(now_ms() - t1 < TIMEOUT_MS, "resv_try_call waited");
  /* A caller that may block waits until its deadline, no longer. */
  resv_request_t r = request(RESV_OP_RESERVE, "other@x", "o1");
  resv_error_t err;
  int64_t t0 = now_ms();
  ck_assert(!resv_call(t, &r, &a, &err));
  int64_t took = now_ms() - t0;
  ck_assert_int_eq(err.code, RESV_ETIMEOUT);
  ck_assert_msg(took < TIMEOUT_MS + GRACE_MS + SLACK_MS, "resv_call took %lld ms",
                (long long)took);
  /* The store closes at once with a call waiting on its dispatcher. */
  resv_request_t w = request(RESV_OP_RESERVE, "late@x", "o1");
  resv_job_t *job = resv_submit(t, &w, NULL, &err);
  ck_assert_ptr_nonnull(job);
  thaw(dog);
  submit_answers(t, request(RESV_OP_RESERVE, "new@x", "o1"), RESV_OK, RESV_RESERVED);
  resv_request_t w1 = request(RESV_OP_RESERVE, "next@x", "o1");
  ck_assert(resv_try_call(t, &w1, &a, &cerr));
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert(resv_job_wait(job, TIMEOUT_MS + GRACE_MS + SLACK_MS));
  resv_job_destroy(job);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* sync = "disk" runs writes on the dispatcher already; its group commit
 * waits for the gate until the call's deadline, and a blocking call too. */
START_TEST(test_frozen_committer_disk_answers_timeout) {
  resv_store_t *s = open_store(RESV_SYNC_DISK);
  resv_type_t *t = test_fresh_type(s, "gate");
  resv_answer_t a = {0};
  test_reserve(t, "taken@x", "o1", "a1", 60000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  pthread_t dog;
  freeze_a_writer(&dog);
  submit_answers(t, request(RESV_OP_RESERVE, "new@x", "o1"), RESV_ETIMEOUT, 0);
  submit_answers(t, request(RESV_OP_GET, "taken@x", ""), RESV_OK, RESV_PENDING);
  resv_request_t r = request(RESV_OP_RESERVE, "other@x", "o1");
  resv_error_t err;
  int64_t t0 = now_ms();
  ck_assert(!resv_call(t, &r, &a, &err));
  int64_t took = now_ms() - t0;
  ck_assert_int_eq(err.code, RESV_ETIMEOUT);
  ck_assert_msg(took < TIMEOUT_MS + GRACE_MS + SLACK_MS, "resv_call took %lld ms",
                (long long)took);
  thaw(dog);
  submit_answers(t, request(RESV_OP_RESERVE, "new@x", "o1"), RESV_OK, RESV_RESERVED);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* A store opens while a writer is frozen: opening an existing store only
 * reads. */
START_TEST(test_open_beside_a_frozen_committer) {
  resv_store_close(open_store(RESV_SYNC_PROCESS));
  pthread_t dog;
  freeze_a_writer(&dog);
  int64_t t0 = now_ms();
  resv_store_t *s = open_store(RESV_SYNC_PROCESS);
  int64_t took = now_ms() - t0;
  ck_assert_msg(took < TIMEOUT_MS, "open waited %lld ms for the writer", (long long)took);
  resv_store_close(s);
  thaw(dog);
}
END_TEST

/* ---- closing without waiting ------------------------------------------ */

/* A MongoDB store on a server that takes connections and never answers,
 * with calls in flight: resv_store_stop returns at once, the calls end
 * by their deadlines, and the store is freed whichever of the stopper
 * and resv_store_close lets go last (close_first). */
static void stop_with_calls_in_flight(bool close_first) {
  int hole = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof addr;
  ck_assert_int_eq(bind(hole, (struct sockaddr *)&addr, sizeof addr), 0);
  ck_assert_int_eq(listen(hole, 64), 0);
  ck_assert_int_eq(getsockname(hole, (struct sockaddr *)&addr, &len), 0);
  char uri[128];
  snprintf(uri, sizeof uri,
           "mongodb://127.0.0.1:%d/?serverSelectionTimeoutMS=1000&connectTimeoutMS=1000",
           ntohs(addr.sin_port));
  resv_options_t o = {.uri = uri, .threads = 4, .timeout_ms = 600};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s != NULL, "open: %s", err.message);
  resv_type_t *t = test_fresh_type(s, "stop");
  resv_job_t *jobs[8];
  for (int i = 0; i < 8; i++) {
    char key[16];
    snprintf(key, sizeof key, "k%d@x", i);
    resv_request_t r = request(RESV_OP_RESERVE, key, "o1");
    ck_assert_ptr_nonnull(jobs[i] = resv_submit(t, &r, NULL, &err));
  }
  struct timespec pause_ts = {0, 100 * 1000000L};
  nanosleep(&pause_ts, NULL); /* four calls on the dispatcher, four queued */
  int64_t t0 = now_ms();
  resv_store_stop(s);
  int64_t took = now_ms() - t0;
  ck_assert_msg(took < SLACK_MS, "resv_store_stop waited %lld ms", (long long)took);
  resv_request_t late = request(RESV_OP_RESERVE, "late@x", "o1");
  resv_answer_t a = {0};
  ck_assert(!resv_call(t, &late, &a, &err));
  ck_assert_int_eq(err.code, RESV_ECLOSED);
  if (close_first) resv_store_close(s); /* the stopper frees it */
  /* A waiter gives up at the job's deadline; one done has failed. */
  for (int i = 0; i < 8; i++) {
    int64_t left = resv_job_deadline(jobs[i]) - resv_clock_ms();
    if (resv_job_wait(jobs[i], left > 0 ? left : 0))
      ck_assert_int_ne(resv_job_error(jobs[i])->code, RESV_OK);
    resv_job_destroy(jobs[i]);
  }
  if (!close_first) {
    while (resv__store_reapers() > 0) nanosleep(&pause_ts, NULL);
    resv_store_close(s); /* the stopper is done: close frees it */
  }
  close(hole);
}

START_TEST(test_stop_returns_at_once_then_close) { stop_with_calls_in_flight(true); }
END_TEST

START_TEST(test_stop_returns_at_once_close_after_it_ended) {
  stop_with_calls_in_flight(false);
}
END_TEST

/* ---- reader slots ------------------------------------------------------- */

/* A process that only reads: another process took every free reader slot
 * and was killed holding them; the reader's next read that needs a slot
 * clears the dead ones instead of answering busy. */
START_TEST(test_reads_clear_dead_reader_slots) {
  resv_store_t *s = open_store(RESV_SYNC_PROCESS);
  resv_type_t *t = test_fresh_type(s, "readers");
  int ready[2];
  ck_assert_int_eq(pipe(ready), 0);
  pid_t child = fork();
  ck_assert(child >= 0);
  if (child == 0) { /* takes every free slot, then waits to be killed */
    MDB_env *env;
    MDB_txn *txn;
    int rc = mdb_env_create(&env);
    if (!rc) rc = mdb_env_set_maxdbs(env, 512);
    if (!rc) rc = mdb_env_open(env, dir, MDB_NOTLS | MDB_RDONLY, 0660);
    int held = 0;
    while (!rc && mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0) held++;
    char c = held > 0 ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(ready[1]);
  char c = 0;
  ck_assert_int_eq(read(ready[0], &c, 1), 1);
  close(ready[0]);
  ck_assert_int_eq(c, 'y');
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  resv_answer_t a = {0};
  resv_request_t r = request(RESV_OP_GET, "k@x", "");
  resv_error_t err;
  ck_assert_msg(resv_call(t, &r, &a, &err), "get: %s: %s", resv_code_name(err.code),
                err.message);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

Suite *nonblocking_suite(void) {
  Suite *s = suite_create("nonblocking");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  /* Each wait has its own bound, asserted; this one only stops a hang,
   * with room for ASan on a loaded 2-core machine. */
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_frozen_committer_blocks_no_host);
  tcase_add_test(tc, test_frozen_committer_disk_answers_timeout);
  tcase_add_test(tc, test_open_beside_a_frozen_committer);
  tcase_add_test(tc, test_reads_clear_dead_reader_slots);
  tcase_add_test(tc, test_stop_returns_at_once_then_close);
  tcase_add_test(tc, test_stop_returns_at_once_close_after_it_ended);
  suite_add_tcase(s, tc);
  return s;
}
