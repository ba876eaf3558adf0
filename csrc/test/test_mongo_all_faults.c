/* test_mongo_all_faults.c: the *_all ops on MongoDB under failure and
 * concurrency, and their round trips (design.md section 5, "Several keys
 * at once"):
 *   - a fail point on the second batch of a conflicting reserve_all (the
 *     taking back fails): the error is answered, never reserved, and the
 *     holds it left expire at their ttl;
 *   - a key that changes hands between the batch and its read, sent again;
 *   - the commands each call sends, counted by MongoDB's failCommand fail
 *     point with {skip: N}: the N commands a call may send pass, the next
 *     command fails, so a call that needs more fails and one that sends
 *     fewer lets a later read pass (bench/roundtrips.c counts them with
 *     the driver's APM);
 *   - threads over overlapping key sets, reserve_all and single-key
 *     reserves mixed: never two live owners of a key, and every conflict
 *     leaves none of its holds behind;
 *   - on a mongos, one call's keys spread over the shards. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu.h"
#include "mongo_all_test.h"

/* The commands a call may send, as the fail point names them. */
#define DATA_COMMANDS "[\"update\", \"find\", \"delete\", \"getMore\", \"findAndModify\", \"insert\"]"

static resv_store_t *app_store(char *app, size_t size, const char *what) {
  static int n;
  char uri[512];
  snprintf(app, size, "resv-all-%s-%d-%d", what, (int)getpid(), n++);
  emu_uri_with_app(test_mongo_uri(), app, uri, sizeof uri);
  resv_store_t *s = emu_open(uri, (resv_options_t){.threads = 2, .timeout_ms = 5000});
  resv_store_set_time(s, ALL_T0);
  return s;
}

static void fail_on(const char *app, const char *mode, const char *commands, int code) {
  char data[512];
  snprintf(data, sizeof data, "{\"failCommands\": %s, \"appName\": \"%s\", \"errorCode\": %d}",
           commands, app, code);
  emu_failpoint(test_mongo_uri(), mode, data);
}

static void fail_off(void) { emu_failpoint(test_mongo_uri(), "\"off\"", NULL); }

START_TEST(t_take_back_fails) {
  char app[96];
  resv_store_t *s = app_store(app, sizeof app, "takeback");
  resv_type_t *t = test_fresh_type(s, "alltb");
  resv_answer_t a = {0}, g = {0};
  resv_error_t err;
  test_reserve(t, "b", "bob", "x", 60000, &g);
  /* The first update (the reserve batch) passes, the second (the pulls
   * that take the holds back) fails. */
  fail_on(app, "{\"skip\": 1}", "[\"update\"]", 2);
  const char *keys[] = {"a", "b", "c"};
  bool ok = all_call(t, RESV_OP_RESERVE_ALL, keys, 3, "ann", "s1", 1000, &a, &err);
  fail_off();
  ck_assert_msg(!ok, "answered %s", resv_status_name(a.status));
  ck_assert_int_eq(err.code, RESV_ESERVER);
  ck_assert_int_eq(err.server_code, 2);
  /* The holds stayed, and expire at their ttl. */
  test_get(t, "a", &g);
  ck_assert_int_eq(g.status, RESV_PENDING);
  ck_assert_int_eq(g.expires_at, ALL_T0 + 1000);
  resv_store_set_time(s, ALL_T0 + 1000);
  test_get(t, "c", &g);
  ck_assert_int_eq(g.status, RESV_EXPIRED);
  test_reserve(t, "a", "carl", "y", 1000, &g);
  ck_assert_int_eq(g.status, RESV_RESERVED);
  resv_answer_clear(&a);
  resv_answer_clear(&g);
  resv_store_close(s);
}
END_TEST

/* A key whose holder leaves between the batch and its read is sent
 * again: bob's hold stands in the way of ann's upsert (a duplicate key),
 * and is abandoned once her batch is in, while her read waits at the
 * server (a fail point blocks it); the read finds the key free, so its upsert runs once more
 * and the call answers reserved. */
typedef struct leaver {
  resv_type_t *t;
} leaver_t;

/* Once ann's batch is in (her hold on "a" shows), bob abandons "b". */
static void *leave(void *arg) {
  leaver_t *l = arg;
  resv_answer_t a = {0};
  struct timespec pause = {0, 5 * 1000 * 1000};
  for (int i = 0; i < 2000; i++) {
    test_get(l->t, "a", &a);
    if (a.status == RESV_PENDING) break;
    nanosleep(&pause, NULL);
  }
  test_abandon(l->t, "b", "bob", "x", &a);
  resv_answer_clear(&a);
  return NULL;
}

START_TEST(t_changed_hands_sent_again) {
  char app[96], data[512];
  resv_store_t *s = app_store(app, sizeof app, "hands");
  resv_type_t *t = test_fresh_type(s, "allhands");
  resv_store_t *other = test_open(test_mongo_uri());
  resv_store_set_time(other, ALL_T0);
  leaver_t l = {resv_store_type(other, t->context, t->context_len, t->aggregate,
                                t->aggregate_len, NULL)};
  ck_assert_ptr_nonnull(l.t);
  resv_answer_t a = {0};
  resv_stats_t before, after;
  resv_error_t err;
  test_reserve(l.t, "b", "bob", "x", 60000, &a);
  test_get(t, "b", &a); /* the type set up in this store: its find is not the one blocked */
  ck_assert(resv_store_stats(s, &before, &err));
  snprintf(data, sizeof data, "{\"failCommands\": [\"find\"], \"appName\": \"%s\", "
           "\"blockConnection\": true, \"blockTimeMS\": 3000}", app);
  emu_failpoint(test_mongo_uri(), "{\"times\": 1}", data);
  pthread_t thread;
  pthread_create(&thread, NULL, leave, &l);
  const char *keys[] = {"a", "b"};
  bool ok = all_call(t, RESV_OP_RESERVE_ALL, keys, 2, "ann", "s1", 1000, &a, &err);
  pthread_join(thread, NULL);
  fail_off();
  ck_assert_msg(ok, "%s", err.message);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert(test_str_is(a.keys[1].owner_id, "ann"));
  ck_assert(resv_store_stats(s, &after, &err));
  ck_assert_uint_gt(after.duplicate_key_retries, before.duplicate_key_retries);
  resv_answer_clear(&a);
  resv_store_close(other);
  resv_store_close(s);
}
END_TEST

/* Runs the call with the fail point letting `expected` commands pass,
 * then a get, which must be the one failed. */
static void expect_commands(resv_type_t *t, const char *app, int32_t op,
                            const char *const *keys, size_t n, const char *owner,
                            int64_t arg, int expected, int32_t status) {
  char mode[64];
  resv_answer_t a = {0}, g = {0};
  resv_error_t err;
  snprintf(mode, sizeof mode, "{\"skip\": %d}", expected);
  fail_on(app, mode, DATA_COMMANDS, 2);
  bool ok = all_call(t, op, keys, n, owner, "s1", arg, &a, &err);
  bool after = resv_call(t, &(resv_request_t){.op = RESV_OP_GET, .key = test_key("email", "zz")},
                         &g, &err);
  fail_off();
  ck_assert_msg(ok, "op %d of %zu keys sent more than %d commands", (int)op, n, expected);
  ck_assert_int_eq(a.status, status);
  ck_assert_msg(!after, "op %d of %zu keys sent fewer than %d commands", (int)op, n, expected);
  resv_answer_clear(&a);
  resv_answer_clear(&g);
}

/* A fresh type, set up (its first call's commands are not counted). */
static resv_type_t *warm_type(resv_store_t *s) {
  resv_type_t *t = test_fresh_type(s, "allrt");
  resv_answer_t g = {0};
  test_get(t, "warm", &g);
  resv_answer_clear(&g);
  return t;
}

START_TEST(t_round_trips) {
  static const size_t sizes[] = {1, 2, 8, 16};
  const char *names[16] = {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7",
                           "k8", "k9", "k10", "k11", "k12", "k13", "k14", "k15"};
  char app[96];
  resv_store_t *s = app_store(app, sizeof app, "rt");
  for (size_t i = 0; i < 4; i++) {
    size_t n = sizes[i];
    resv_type_t *t = warm_type(s), *u = warm_type(s);
    /* New keys: the update's reply tells all; then a confirm of the
     * holds the same; a key already held needs the read. */
    expect_commands(t, app, RESV_OP_RESERVE_ALL, names, n, "ann", 1000, 1, RESV_RESERVED);
    expect_commands(t, app, RESV_OP_RESERVE_ALL, names, n, "ann", 1000, 2, RESV_RESERVED);
    expect_commands(t, app, RESV_OP_CONFIRM_ALL, names, n, "ann", 3, 1, RESV_CONFIRMED);
    expect_commands(t, app, RESV_OP_CONFIRM_ALL, names, n, "ann", 5, 1, RESV_CONFIRMED);
    expect_commands(t, app, RESV_OP_CONFIRM_ALL, names, n, "ann", 4, 2, RESV_CONFIRMED);
    expect_commands(t, app, RESV_OP_ABANDON_ALL, names, n, "ann", 0, 2, RESV_ABANDONED);
    expect_commands(t, app, RESV_OP_CONFIRM_ALL, names, n, "bob", 3, 2, RESV_CONFLICT);
    expect_commands(u, app, RESV_OP_RESERVE_ALL, names, n, "ann", 1000, 1, RESV_RESERVED);
    expect_commands(u, app, RESV_OP_ABANDON_ALL, names, n, "ann", 0, 3, RESV_ABANDONED);
    expect_commands(u, app, RESV_OP_ABANDON_ALL, names, n, "ann", 0, 2, RESV_ABANDONED);
    /* A conflict abandons this attempt's holds: the pulls and the
     * deletes (none when the one key is the conflict). */
    resv_answer_t g = {0};
    test_reserve(u, names[n - 1], "carl", "c", 1000, &g);
    resv_answer_clear(&g);
    expect_commands(u, app, RESV_OP_RESERVE_ALL, names, n, "ann", 1000, n > 1 ? 4 : 2,
                    RESV_CONFLICT);
  }
  resv_store_close(s);
}
END_TEST

#define RACE_KEYS 6
#define RACE_THREADS 4
#define RACE_ROUNDS 60

static const char *race_names[RACE_KEYS] = {"r0", "r1", "r2", "r3", "r4", "r5"};
static _Atomic int race_holder[RACE_KEYS]; /* 0, or the thread holding it + 1 */

typedef struct racer {
  resv_type_t *t;
  int id;
  unsigned seed;
  int reserved, conflicts, violations;
  char failure[600];
} racer_t;

/* Takes the keys this racer was answered reserved for: nobody else may
 * hold one of them now. */
static void race_take(racer_t *r, const int *idx, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int none = 0;
    if (!atomic_compare_exchange_strong(&race_holder[idx[i]], &none, r->id + 1)) {
      r->violations++;
      snprintf(r->failure, sizeof r->failure, "%s held by racers %d and %d", race_names[idx[i]],
               none - 1, r->id);
    }
  }
}

static void *race(void *arg) {
  racer_t *r = arg;
  char owner[16], attempt[32];
  snprintf(owner, sizeof owner, "o%d", r->id);
  for (int round = 0; round < RACE_ROUNDS && !r->violations; round++) {
    int idx[3];
    const char *keys[3];
    size_t n = 1 + (size_t)(rand_r(&r->seed) % 3);
    for (size_t i = 0; i < n; i++) {
      idx[i] = (int)((size_t)rand_r(&r->seed) % RACE_KEYS);
      for (size_t j = 0; j < i; j++)
        if (idx[j] == idx[i]) idx[i] = (idx[i] + 1) % RACE_KEYS, j = (size_t)-1;
      keys[i] = race_names[idx[i]];
    }
    bool single = rand_r(&r->seed) % 4 == 0;
    snprintf(attempt, sizeof attempt, "a%d", round);
    resv_answer_t a = {0};
    resv_error_t err;
    bool ok;
    if (single) {
      n = 1;
      resv_request_t q = {.op = RESV_OP_RESERVE, .key = test_key("email", keys[0]),
                          .owner = test_owner("", owner), .attempt = resv_cstr(attempt),
                          .ttl_ms = 600000};
      ok = resv_call(r->t, &q, &a, &err);
    } else {
      ok = all_call(r->t, RESV_OP_RESERVE_ALL, keys, n, owner, attempt, 600000, &a, &err);
    }
    if (!ok) {
      snprintf(r->failure, sizeof r->failure, "reserve: %s", err.message);
      r->violations++;
    } else if (a.status == RESV_RESERVED) {
      r->reserved++;
      race_take(r, idx, n);
      for (size_t i = 0; i < n; i++) atomic_store(&race_holder[idx[i]], 0);
      ok = all_call(r->t, RESV_OP_ABANDON_ALL, keys, n, owner, attempt, 0, &a, &err);
      if (!ok || a.status != RESV_ABANDONED) {
        snprintf(r->failure, sizeof r->failure, "abandon_all: %s",
                 ok ? resv_status_name(a.status) : err.message);
        r->violations++;
      }
    } else {
      r->conflicts++;
    }
    resv_answer_clear(&a);
  }
  return NULL;
}

START_TEST(t_race_overlapping) {
  resv_store_t *s = emu_open(test_mongo_uri(), (resv_options_t){.threads = RACE_THREADS,
                                                                   .timeout_ms = 20000});
  resv_store_set_time(s, ALL_T0);
  resv_type_t *t = test_fresh_type(s, "allrace");
  racer_t racers[RACE_THREADS];
  pthread_t threads[RACE_THREADS];
  for (int i = 0; i < RACE_THREADS; i++) {
    racers[i] = (racer_t){.t = t, .id = i, .seed = 7u * (unsigned)i + 1};
    pthread_create(&threads[i], NULL, race, &racers[i]);
  }
  int reserved = 0, conflicts = 0;
  for (int i = 0; i < RACE_THREADS; i++) {
    pthread_join(threads[i], NULL);
    ck_assert_msg(!racers[i].violations, "racer %d: %s", i, racers[i].failure);
    reserved += racers[i].reserved;
    conflicts += racers[i].conflicts;
  }
  ck_assert_int_gt(reserved, 0);
  ck_assert_int_gt(conflicts, 0);
  /* Every reserved call abandoned its keys, every conflict took its holds
   * back: nothing is left. */
  resv_answer_t g = {0};
  for (int k = 0; k < RACE_KEYS; k++) {
    test_get(t, race_names[k], &g);
    ck_assert_msg(g.status == RESV_ABSENT, "%s left %s by %.*s", race_names[k],
                  resv_status_name(g.status), (int)g.owner_id.len, g.owner_id.ptr);
  }
  resv_answer_clear(&g);
  resv_store_close(s);
}
END_TEST

/* On a mongos (RESV_TEST_URI when it is one, else an emulator of this
 * test's own started with --mongos), with sharding on first use: the
 * keys of one call in several tenants, which the hashed shard key spreads
 * over the shards; the mongos refuses any statement that does not name
 * the whole shard key. */
START_TEST(t_mongos_keys_across_shards) {
  emu_t e = {0};
  resv_store_t *probe = test_open(test_mongo_uri());
  bool mongos = resv_store_is_sharded(probe);
  resv_store_close(probe);
  if (!mongos) emu_start(&e, 0, true);
  resv_store_t *s = test_open(mongos ? test_mongo_uri() : e.uri);
  resv_store_set_time(s, ALL_T0);
  ck_assert(resv_store_is_sharded(s));
  resv_type_t *t = test_fresh_type(s, "allshard");
  resv_key_t keys[12];
  char tenants[12][16];
  for (int i = 0; i < 12; i++) {
    snprintf(tenants[i], sizeof tenants[i], "t%d", i);
    keys[i] = (resv_key_t){resv_cstr(tenants[i]), resv_cstr("email"), resv_cstr("x@y")};
  }
  resv_answer_t a = {0};
  resv_error_t err;
  resv_request_t r = {.op = RESV_OP_RESERVE_ALL, .keys = keys, .nkeys = 12,
                      .owner = test_owner("", "ann"), .attempt = resv_cstr("s1"),
                      .ttl_ms = 1000};
  ck_assert_msg(resv_call(t, &r, &a, &err), "%s", err.message);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  /* Two free keys and one of ann's: bob's holds are taken back. */
  r.owner = test_owner("", "bob");
  resv_key_t more[3] = {{resv_cstr("u1"), resv_cstr("email"), resv_cstr("x@y")},
                        {resv_cstr("u2"), resv_cstr("email"), resv_cstr("x@y")}, keys[5]};
  r.keys = more;
  r.nkeys = 3;
  ck_assert_msg(resv_call(t, &r, &a, &err), "%s", err.message);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(a.keys[0].status, RESV_ABANDONED);
  ck_assert_int_eq(a.keys[2].status, RESV_CONFLICT);
  resv_request_t g = {.op = RESV_OP_GET, .key = more[1]};
  ck_assert(resv_call(t, &g, &a, &err));
  ck_assert_int_eq(a.status, RESV_ABSENT);
  r = (resv_request_t){.op = RESV_OP_CONFIRM_ALL, .keys = keys, .nkeys = 12,
                       .owner = test_owner("", "ann"), .version = 2};
  ck_assert_msg(resv_call(t, &r, &a, &err), "%s", err.message);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  r.op = RESV_OP_ABANDON_ALL;
  r.attempt = resv_cstr("s1");
  ck_assert_msg(resv_call(t, &r, &a, &err), "%s", err.message);
  ck_assert_int_eq(a.keys[3].status, RESV_KEPT);
  resv_answer_clear(&a);
  resv_store_close(s);
  if (!mongos) emu_stop(&e);
}
END_TEST

Suite *mongo_all_faults_suite(void) {
  const TTest *tests[] = {
      t_take_back_fails,
      t_changed_hands_sent_again,
      t_round_trips,
      t_race_overlapping,
      t_mongos_keys_across_shards, NULL};
  return test_suite("mongo_all_faults", "faults", 120, NULL, NULL, tests);
}
