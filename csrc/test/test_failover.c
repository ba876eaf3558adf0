/* test_failover.c: a Jepsen-style failover test of the MongoDB store (issue
 * 12, docs/design.md sections 11 and 12).
 *
 * Many clients reserve, confirm, release and abandon a few hot keys on a
 * replica set whose primary is killed and stepped down again and again.
 * Each client records the time from a "reserved" answer to the start of the
 * call that gives the key up: the interval in which it believes it holds
 * the key. The checker then proves that no two owners' intervals of one
 * key overlap: at most one owner held a live reservation at once.
 *
 * The set is the emulator's (emulator/run.py --replset), whatever
 * RESV_TEST_URI names, because the test kills members (emulatorControl) and
 * sets the secondaries' replication lag (1 s): a write acknowledged with
 * w: 1 and not yet replicated when its primary dies is rolled back, as on
 * MongoDB. The set's default write concern is made w: 1
 * (setDefaultRWConcern), as on a primary-secondary-arbiter set, so a store
 * that sent no w would be granting on w: 1 too. With write_concern = 1 the
 * checker must find the double grant this causes (so the test can fail);
 * with the store's default, w: "majority", it must find none. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "emu.h"

#define CLIENTS 16
#define KEYS 10
#define LAG_MS 1000     /* RESV_TEST_SLOW (valgrind): 2000 */
#define MAX_INTERVALS 4096

typedef struct interval {
  int key, owner;
  int64_t start, end; /* monotonic microseconds */
} interval_t;

typedef struct run {
  resv_type_t *type;
  pthread_mutex_t mutex;
  interval_t intervals[MAX_INTERVALS];
  int n;
  int grants, errors;
  atomic_int stop;
} run_t;

typedef struct client {
  run_t *run;
  int id;
  unsigned seed;
} client_t;

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static bool call(run_t *run, resv_request_t *r, resv_answer_t *a) {
  resv_error_t err;
  if (resv_call(run->type, r, a, &err)) return true;
  pthread_mutex_lock(&run->mutex);
  run->errors++;
  pthread_mutex_unlock(&run->mutex);
  return false;
}

/* Gives the key up: confirm-then-release or abandon, retried until the
 * store answers (an error leaves the reservation live until it does). */
static void give_up(client_t *c, resv_key_t key, resv_owner_t owner, resv_str_t attempt,
                    bool confirmed, resv_answer_t *a) {
  resv_request_t r = {.op = confirmed ? RESV_OP_RELEASE : RESV_OP_ABANDON, .key = key,
                      .owner = owner, .attempt = attempt};
  for (int i = 0; i < 200 && !call(c->run, &r, a); i++) usleep(20 * 1000);
}

static void *client_main(void *arg) {
  client_t *c = arg;
  run_t *run = c->run;
  char owner_id[32], key_name[32];
  resv_answer_t a = {0};

  snprintf(owner_id, sizeof owner_id, "owner-%d", c->id);
  resv_owner_t owner = test_owner("", owner_id);
  for (int round = 0; !atomic_load(&run->stop); round++) {
    int k = rand_r(&c->seed) % KEYS;
    char attempt[32];
    snprintf(key_name, sizeof key_name, "hot-%d", k);
    snprintf(attempt, sizeof attempt, "a-%d", round);
    resv_key_t key = test_key("email", key_name);
    resv_request_t r = {.op = RESV_OP_RESERVE, .key = key, .owner = owner,
                        .attempt = resv_cstr(attempt), .ttl_ms = 600000};
    if (!call(run, &r, &a) || a.status != RESV_RESERVED) {
      usleep(20 * 1000);
      continue;
    }
    int64_t start = now_us();
    /* Hold it long enough to span a failover: 1.5 to 3 s. */
    bool confirm = rand_r(&c->seed) % 2;
    bool confirmed = false;
    usleep((useconds_t)(1500 + rand_r(&c->seed) % 1500) * 1000 / 2);
    if (confirm) {
      resv_request_t cr = {.op = RESV_OP_CONFIRM, .key = key, .owner = owner, .version = 1};
      confirmed = call(run, &cr, &a) && a.status == RESV_CONFIRMED;
    }
    usleep((useconds_t)(1500 + rand_r(&c->seed) % 1500) * 1000 / 2);
    int64_t end = now_us(); /* from here on, it no longer claims the key */
    pthread_mutex_lock(&run->mutex);
    if (run->n < MAX_INTERVALS)
      run->intervals[run->n++] = (interval_t){.key = k, .owner = c->id, .start = start,
                                              .end = end};
    run->grants++;
    pthread_mutex_unlock(&run->mutex);
    give_up(c, key, owner, resv_cstr(attempt), confirmed, &a);
  }
  resv_answer_clear(&a);
  return NULL;
}

/* Overlapping intervals of one key held by two owners (the first few
 * shown when verbose). */
static int double_grants(const run_t *run, bool verbose) {
  int found = 0;
  for (int i = 0; i < run->n; i++)
    for (int j = i + 1; j < run->n; j++) {
      const interval_t *x = &run->intervals[i], *y = &run->intervals[j];
      if (x->key == y->key && x->owner != y->owner && x->start < y->end &&
          y->start < x->end) {
        if (verbose && found < 3)
          fprintf(stderr, "failover: key hot-%d held by owner-%d and owner-%d at once "
                          "(%.3f-%.3f s, %.3f-%.3f s)\n",
                  x->key, x->owner, y->owner, x->start / 1e6, x->end / 1e6,
                  y->start / 1e6, y->end / 1e6);
        found++;
      }
    }
  return found;
}

/* One run: the clients work while the primary is killed (and restarted)
 * and stepped down, cycle after cycle; stops after max_cycles, or once a
 * double grant is seen when stop_at_first. Returns the double grants. */
static int failover_run(int32_t write_concern, int max_cycles, bool stop_at_first) {
  emu_t e;
  char killed[128];
  run_t *run = calloc(1, sizeof *run);
  client_t clients[CLIENTS];
  pthread_t threads[CLIENTS];
  int cycles = 0, found = 0, lag = getenv("RESV_TEST_SLOW") ? 2000 : LAG_MS;

  ck_assert_ptr_nonnull(run);
  emu_start_mode(&e, 0, "--replset");
  mongoc_client_t *admin = mongoc_client_new(e.uri);
  ck_assert_ptr_nonnull(admin);
  mongoc_client_set_error_api(admin, MONGOC_ERROR_API_VERSION_2);
  ck_assert(emu_admin(admin, BCON_NEW("emulatorControl", "lag", "ms", BCON_INT32(lag)),
                    false, NULL, NULL, 0));
  /* The cluster's own default is w: 1 (as on a primary-secondary-arbiter
   * set), so only the w the store sends protects it. */
  ck_assert(emu_admin(admin, BCON_NEW("setDefaultRWConcern", BCON_INT32(1),
                                    "defaultWriteConcern", "{", "w", BCON_INT32(1), "}"),
                    true, NULL, NULL, 0));
  resv_store_t *s = emu_open(e.uri, (resv_options_t){.threads = CLIENTS,
                                                     .timeout_ms = 5000,
                                                     .write_concern = write_concern});
  run->type = test_fresh_type(s, "failover");
  pthread_mutex_init(&run->mutex, NULL);
  for (int i = 0; i < CLIENTS; i++) {
    clients[i] = (client_t){.run = run, .id = i, .seed = (unsigned)(i * 7919 + 1)};
    pthread_create(&threads[i], NULL, client_main, &clients[i]);
  }
  sleep(1);
  while (cycles < max_cycles) {
    killed[0] = '\0';
    emu_admin(admin, BCON_NEW("emulatorControl", "kill", "member", "primary"), true, "killed",
            killed, sizeof killed);
    usleep(1200 * 1000);
    if (killed[0])
      emu_admin(admin, BCON_NEW("emulatorControl", "restart", "member", BCON_UTF8(killed)),
              false, NULL, NULL, 0);
    emu_admin(admin, BCON_NEW("replSetStepDown", BCON_INT32(1)), true, NULL, NULL, 0);
    usleep(800 * 1000);
    cycles++;
    if (stop_at_first) {
      pthread_mutex_lock(&run->mutex);
      found = double_grants(run, false);
      pthread_mutex_unlock(&run->mutex);
      if (found) break;
    }
  }
  atomic_store(&run->stop, 1);
  for (int i = 0; i < CLIENTS; i++) pthread_join(threads[i], NULL);
  found = double_grants(run, true);
  fprintf(stderr, "failover: w %s, lag %d ms, %d cycles of kill + step-down: %d grants, "
                  "%d call errors, %d double grants\n",
          write_concern == 1 ? "1" : "majority", lag, cycles, run->grants, run->errors, found);
  ck_assert_msg(run->grants >= 5, "only %d grants: the clients made no progress",
                run->grants);
  resv_store_close(s);
  mongoc_client_destroy(admin);
  emu_stop(&e);
  pthread_mutex_destroy(&run->mutex);
  free(run);
  return found;
}

START_TEST(majority_writes_never_grant_a_key_twice) {
  ck_assert_int_eq(failover_run(0, 6, false), 0);
}
END_TEST

/* The proof that the checker can fail: with w: 1 the rolled-back
 * reservations are granted again while their first owner holds them. */
START_TEST(w1_writes_are_granted_twice_after_a_failover) {
  ck_assert_msg(failover_run(1, 12, true) > 0,
                "no double grant found with write_concern = 1");
}
END_TEST

Suite *failover_suite(void) {
  const TTest *tests[] = {
      majority_writes_never_grant_a_key_twice, w1_writes_are_granted_twice_after_a_failover,
      NULL};
  return test_suite("failover", "failover", 120, NULL, NULL, tests);
}
