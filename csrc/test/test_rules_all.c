/* test_rules_all.c: reserve_all, confirm_all and abandon_all on the
 * embedded stores (design.md section 5, "Several keys at once").
 *
 * Each test runs on the memory store and on the file store with both
 * syncs: a reserve_all that answers reserved holds every key, one that
 * meets another owner on any key answers conflict naming that holder and
 * leaves none of its attempt's holds (a key the owner had confirmed stays
 * confirmed, another attempt's hold stays), an error on one key writes
 * nothing, confirm_all and abandon_all answer each key as the single-key
 * call would. Threads running reserve_alls over overlapping keys never
 * see a key with two live owners. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "tests.h"

static resv_store_t *store;
static resv_type_t *users;
static resv_answer_t a;
static char dir[256];

static void setup_memory(void) {
  dir[0] = 0;
  store = test_open(NULL);
  resv_store_set_time(store, 1000000);
  users = test_fresh_type(store, "all");
}

static void setup_file(int32_t sync) {
  test_temp_dir(dir, sizeof dir);
  store = test_open_file(dir, sync);
  resv_store_set_time(store, 1000000);
  users = test_fresh_type(store, "all");
}

static void setup_file_process(void) { setup_file(RESV_SYNC_PROCESS); }
static void setup_file_disk(void) { setup_file(RESV_SYNC_DISK); }

static void teardown(void) {
  resv_answer_clear(&a);
  resv_store_close(store);
  if (dir[0]) test_remove_dir(dir);
}

/* Up to 8 keys of namespace "email", from a NULL-terminated list. */
typedef struct keys {
  resv_key_t k[8];
  size_t n;
} keys_t;

static keys_t keys_of(const char *const *names) {
  keys_t ks = {.n = 0};
  while (names[ks.n]) {
    ks.k[ks.n] = test_key("email", names[ks.n]);
    ks.n++;
  }
  return ks;
}

#define KEYS(...) keys_of((const char *const[]){__VA_ARGS__, NULL})

static bool call_all(resv_type_t *t, int32_t op, const keys_t *ks, const char *owner,
                     const char *attempt, int64_t n, resv_answer_t *out, resv_error_t *err) {
  resv_request_t r = {.op = op, .keys = ks->k, .nkeys = ks->n,
                      .owner = test_owner("", owner), .attempt = resv_cstr(attempt),
                      .ttl_ms = op == RESV_OP_RESERVE_ALL ? n : 0,
                      .version = op == RESV_OP_CONFIRM_ALL ? n : 0};
  return resv_call(t, &r, out, err);
}

/* A call of several keys that must not fail. */
static void all(int32_t op, const keys_t *ks, const char *owner, const char *attempt,
                int64_t n) {
  resv_error_t err;
  ck_assert_msg(call_all(users, op, ks, owner, attempt, n, &a, &err), "op %d: %s: %s",
                (int)op, resv_code_name(err.code), err.message);
  ck_assert_uint_eq(a.nkeys, ks->n);
}

static int32_t status_of(const char *key) {
  resv_answer_t g = {0};
  test_get(users, key, &g);
  int32_t status = g.status;
  resv_answer_clear(&g);
  return status;
}

START_TEST(reserve_all_holds_every_key) {
  keys_t ks = KEYS("ann@x", "ann", "ann.b");
  all(RESV_OP_RESERVE_ALL, &ks, "A", "a1", 1000);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  for (size_t i = 0; i < ks.n; i++) {
    ck_assert_int_eq(a.keys[i].status, RESV_RESERVED);
    ck_assert_int_eq(a.keys[i].state, RESV_STATE_PENDING);
    ck_assert_int_eq(a.keys[i].expires_at, 1001000);
    ck_assert(test_str_is(a.keys[i].owner_id, "A"));
    ck_assert(test_holds_are(&a.keys[i], 1, (const char *const[]){"a1"}));
  }
  ck_assert_int_eq(status_of("ann"), RESV_PENDING);
  /* Again, by the same attempt: the same answer, nothing added. */
  all(RESV_OP_RESERVE_ALL, &ks, "A", "a1", 1000);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert(test_holds_are(&a.keys[2], 1, (const char *const[]){"a1"}));
}
END_TEST

/* Many calls of 8 new keys, each owner's: every key is written as its
 * own record, whether or not two keys of a call share a stripe or a
 * bucket of the memory store's table, and while the table grows under
 * the writes (the memory store keeps each key's slot from its read to
 * its write only when no other key of the call is in its stripe). */
START_TEST(many_reserve_alls_write_each_key_as_its_own) {
  enum { CALLS = 150, PER_CALL = 8 };
  char names[PER_CALL][32], owner[16];
  for (int c = 0; c < CALLS; c++) {
    keys_t ks = {.n = PER_CALL};
    for (int k = 0; k < PER_CALL; k++) {
      snprintf(names[k], sizeof names[k], "c%d-k%d", c, k);
      ks.k[k] = test_key("email", names[k]);
    }
    snprintf(owner, sizeof owner, "o%d", c);
    all(RESV_OP_RESERVE_ALL, &ks, owner, "a1", 1000);
    ck_assert_int_eq(a.status, RESV_RESERVED);
    if (c % 2) {
      all(RESV_OP_CONFIRM_ALL, &ks, owner, "", 7);
      ck_assert_int_eq(a.status, RESV_CONFIRMED);
    }
  }
  resv_answer_t g = {0};
  for (int c = 0; c < CALLS; c++) {
    snprintf(owner, sizeof owner, "o%d", c);
    for (int k = 0; k < PER_CALL; k++) {
      snprintf(names[k], sizeof names[k], "c%d-k%d", c, k);
      test_get(users, names[k], &g);
      ck_assert_msg(g.status == (c % 2 ? RESV_CONFIRMED : RESV_PENDING) &&
                        test_str_is(g.owner_id, owner),
                    "%s: %s of %.*s, expected the call's owner %s", names[k],
                    resv_status_name(g.status), (int)g.owner_id.len, g.owner_id.ptr, owner);
    }
  }
  resv_answer_clear(&g);
}
END_TEST

START_TEST(reserve_all_counts_the_owners_confirmed_keys) {
  test_confirm(users, "ann@x", "A", 3, &a);
  keys_t ks = KEYS("ann@x", "ann");
  all(RESV_OP_RESERVE_ALL, &ks, "A", "a1", 1000);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_int_eq(a.keys[0].status, RESV_CONFIRMED);
  ck_assert_int_eq(a.keys[0].version, 3);
  ck_assert_int_eq(a.keys[1].status, RESV_RESERVED);
}
END_TEST

START_TEST(a_conflict_names_the_holder_and_leaves_no_hold) {
  test_reserve(users, "ann", "B", "b1", 5000, &a);
  keys_t ks = KEYS("ann@x", "ann", "ann.b");
  all(RESV_OP_RESERVE_ALL, &ks, "A", "a1", 1000);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(a.keys[1].status, RESV_CONFLICT);
  ck_assert(test_str_is(a.keys[1].owner_id, "B"));
  ck_assert_int_eq(a.keys[1].expires_at, 1005000);
  ck_assert_uint_eq(a.keys[1].nholds, 0); /* never another owner's attempts */
  ck_assert_int_eq(a.keys[0].status, RESV_ABANDONED);
  ck_assert_int_eq(a.keys[2].status, RESV_ABANDONED);
  ck_assert_int_eq(status_of("ann@x"), RESV_ABSENT);
  ck_assert_int_eq(status_of("ann.b"), RESV_ABSENT);
  test_get(users, "ann", &a);
  ck_assert(test_str_is(a.owner_id, "B"));
  ck_assert(test_holds_are(&a, 1, (const char *const[]){"b1"}));
}
END_TEST

START_TEST(a_conflict_keeps_confirmed_keys_and_other_attempts) {
  test_confirm(users, "ann@x", "A", 7, &a);
  test_reserve(users, "ann.b", "A", "a0", 9000, &a);
  test_reserve(users, "ann.b", "A", "a1", 1000, &a);
  test_reserve(users, "ann.c", "A", "a1", 1000, &a); /* this attempt's, before the call */
  test_confirm(users, "ann", "B", 1, &a);
  keys_t ks = KEYS("ann@x", "ann.b", "ann.c", "ann");
  all(RESV_OP_RESERVE_ALL, &ks, "A", "a1", 1000);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(a.keys[0].status, RESV_KEPT);
  ck_assert_int_eq(a.keys[1].status, RESV_KEPT);
  ck_assert_int_eq(a.keys[2].status, RESV_ABANDONED);
  ck_assert_int_eq(a.keys[3].status, RESV_CONFLICT);
  ck_assert_int_eq(a.keys[3].state, RESV_STATE_CONFIRMED);
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  ck_assert_int_eq(a.version, 7);
  test_get(users, "ann.b", &a);
  ck_assert(test_holds_are(&a, 1, (const char *const[]){"a0"}));
  ck_assert_int_eq(a.expires_at, 1009000);
  ck_assert_int_eq(status_of("ann.c"), RESV_ABSENT);
}
END_TEST

START_TEST(a_conflict_takes_an_expired_reservation_away_too) {
  /* The reserve took C's expired reservation over; the abandon of its
   * attempt then deleted it, as on MongoDB. */
  test_reserve(users, "ann@x", "C", "c1", 100, &a);
  test_reserve(users, "ann", "B", "b1", 5000, &a);
  resv_store_set_time(store, 1000200);
  keys_t ks = KEYS("ann@x", "ann");
  all(RESV_OP_RESERVE_ALL, &ks, "A", "a1", 1000);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(a.keys[0].status, RESV_ABANDONED);
  ck_assert_int_eq(status_of("ann@x"), RESV_ABSENT);
}
END_TEST

START_TEST(an_error_on_one_key_writes_nothing) {
  /* A store of the same kind with max_holds = 1. */
  char small_dir[256] = "";
  if (dir[0]) test_temp_dir(small_dir, sizeof small_dir);
  resv_options_t o = {.path = small_dir[0] ? small_dir : NULL, .max_holds = 1,
                      .sync = RESV_SYNC_PROCESS};
  resv_store_t *small = resv_store_open(&o, NULL);
  ck_assert_ptr_nonnull(small);
  resv_type_t *t = test_fresh_type(small, "full");
  test_reserve(t, "ann", "A", "a0", 1000, &a);
  keys_t ks = KEYS("ann@x", "ann");
  resv_error_t err;
  ck_assert(!call_all(t, RESV_OP_RESERVE_ALL, &ks, "A", "a1", 1000, &a, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "max_holds"));
  test_get(t, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  test_get(t, "ann", &a);
  ck_assert(test_holds_are(&a, 1, (const char *const[]){"a0"}));
  resv_store_close(small);
  if (small_dir[0]) test_remove_dir(small_dir);
}
END_TEST

START_TEST(confirm_all_answers_each_key_and_takes_nothing_back) {
  test_reserve(users, "ann", "B", "b1", 5000, &a);
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  keys_t ks = KEYS("ann@x", "ann", "ann.b");
  all(RESV_OP_CONFIRM_ALL, &ks, "A", "", 4);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(a.keys[0].status, RESV_CONFIRMED);
  ck_assert_int_eq(a.keys[0].version, 4);
  ck_assert_int_eq(a.keys[1].status, RESV_CONFLICT);
  ck_assert(test_str_is(a.keys[1].owner_id, "B"));
  ck_assert_int_eq(a.keys[2].status, RESV_CONFIRMED);
  ck_assert_int_eq(status_of("ann@x"), RESV_CONFIRMED);
  ck_assert_int_eq(status_of("ann.b"), RESV_CONFIRMED);
  keys_t mine = KEYS("ann@x", "ann.b");
  all(RESV_OP_CONFIRM_ALL, &mine, "A", "", 2);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  ck_assert_int_eq(a.keys[1].version, 4); /* the larger version stays */
}
END_TEST

START_TEST(abandon_all_answers_each_key) {
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  test_reserve(users, "ann", "A", "a1", 1000, &a);
  test_reserve(users, "ann", "A", "a2", 1000, &a);
  test_confirm(users, "ann.c", "A", 1, &a);
  test_reserve(users, "ann.d", "B", "a1", 1000, &a);
  keys_t ks = KEYS("ann@x", "ann", "ann.b", "ann.c", "ann.d");
  all(RESV_OP_ABANDON_ALL, &ks, "A", "a1", 0);
  ck_assert_int_eq(a.status, RESV_ABANDONED);
  ck_assert_int_eq(a.keys[0].status, RESV_ABANDONED);
  ck_assert_int_eq(a.keys[1].status, RESV_KEPT);
  ck_assert_int_eq(a.keys[2].status, RESV_ABSENT);
  ck_assert_int_eq(a.keys[3].status, RESV_KEPT);
  ck_assert_int_eq(a.keys[4].status, RESV_ABSENT);
  ck_assert_int_eq(status_of("ann@x"), RESV_ABSENT);
  test_get(users, "ann", &a);
  ck_assert(test_holds_are(&a, 1, (const char *const[]){"a2"}));
  ck_assert_int_eq(status_of("ann.d"), RESV_PENDING);
}
END_TEST

START_TEST(abandon_all_on_a_type_never_written) {
  keys_t ks = KEYS("ann@x", "ann");
  all(RESV_OP_ABANDON_ALL, &ks, "A", "a1", 0);
  ck_assert_int_eq(a.status, RESV_ABANDONED);
  ck_assert_int_eq(a.keys[0].status, RESV_ABSENT);
  ck_assert_int_eq(a.keys[1].status, RESV_ABSENT);
}
END_TEST

/* ---- threads --------------------------------------------------------- */

#define RACE_KEYS 6
#define RACE_THREADS 4
#define RACE_ROUNDS 300

/* Which thread (1..RACE_THREADS) the store says holds each key, as the
 * threads learn it from their answers: a thread marks its keys after a
 * reserved and unmarks them before it abandons them, so a mark that is
 * not 0 when another thread's reserved comes is two live owners. */
static _Atomic int holder[RACE_KEYS];
static _Atomic int violations, reserved_calls;

static void *racer(void *arg) {
  int me = (int)(intptr_t)arg;
  char owner[16], attempt[16], names[RACE_KEYS][16];
  snprintf(owner, sizeof owner, "T%d", me);
  for (int i = 0; i < RACE_KEYS; i++) snprintf(names[i], sizeof names[i], "k%d", i);
  resv_answer_t mine = {0};
  resv_error_t err;
  for (int round = 0; round < RACE_ROUNDS; round++) {
    /* Three neighbouring keys from a place that moves with the round. */
    int first = (me + round) % RACE_KEYS;
    keys_t ks = {.n = 3};
    for (size_t i = 0; i < ks.n; i++)
      ks.k[i] = test_key("email", names[(first + (int)i * (me % 2 ? 1 : 2)) % RACE_KEYS]);
    snprintf(attempt, sizeof attempt, "r%d", round);
    if (!call_all(users, RESV_OP_RESERVE_ALL, &ks, owner, attempt, 60000, &mine, &err)) {
      atomic_fetch_add(&violations, 1000);
      break;
    }
    if (mine.status != RESV_RESERVED) continue;
    atomic_fetch_add(&reserved_calls, 1);
    int at[3];
    for (size_t i = 0; i < ks.n; i++) {
      at[i] = (first + (int)i * (me % 2 ? 1 : 2)) % RACE_KEYS;
      int none = 0;
      if (!atomic_compare_exchange_strong(&holder[at[i]], &none, me))
        atomic_fetch_add(&violations, 1);
    }
    for (size_t i = 0; i < ks.n; i++) {
      int self = me;
      atomic_compare_exchange_strong(&holder[at[i]], &self, 0);
    }
    if (!call_all(users, RESV_OP_ABANDON_ALL, &ks, owner, attempt, 0, &mine, &err) ||
        mine.status != RESV_ABANDONED)
      atomic_fetch_add(&violations, 1000);
  }
  resv_answer_clear(&mine);
  return NULL;
}

START_TEST(overlapping_reserve_alls_never_give_a_key_two_owners) {
  pthread_t th[RACE_THREADS];
  for (int i = 0; i < RACE_KEYS; i++) atomic_store(&holder[i], 0);
  atomic_store(&violations, 0);
  atomic_store(&reserved_calls, 0);
  for (int i = 0; i < RACE_THREADS; i++)
    ck_assert_int_eq(pthread_create(&th[i], NULL, racer, (void *)(intptr_t)(i + 1)), 0);
  for (int i = 0; i < RACE_THREADS; i++) pthread_join(th[i], NULL);
  ck_assert_int_eq(atomic_load(&violations), 0);
  ck_assert_int_gt(atomic_load(&reserved_calls), 0);
  /* Every hold was given back: a conflict left none behind. */
  for (int i = 0; i < RACE_KEYS; i++) {
    char name[16];
    snprintf(name, sizeof name, "k%d", i);
    ck_assert_msg(status_of(name) == RESV_ABSENT, "%s is still held", name);
  }
}
END_TEST

static TCase *all_case(const char *name, void (*setup)(void)) {
  TCase *tc = tcase_create(name);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, reserve_all_holds_every_key);
  tcase_add_test(tc, many_reserve_alls_write_each_key_as_its_own);
  tcase_add_test(tc, reserve_all_counts_the_owners_confirmed_keys);
  tcase_add_test(tc, a_conflict_names_the_holder_and_leaves_no_hold);
  tcase_add_test(tc, a_conflict_keeps_confirmed_keys_and_other_attempts);
  tcase_add_test(tc, a_conflict_takes_an_expired_reservation_away_too);
  tcase_add_test(tc, an_error_on_one_key_writes_nothing);
  tcase_add_test(tc, confirm_all_answers_each_key_and_takes_nothing_back);
  tcase_add_test(tc, abandon_all_answers_each_key);
  tcase_add_test(tc, abandon_all_on_a_type_never_written);
  tcase_add_test(tc, overlapping_reserve_alls_never_give_a_key_two_owners);
  return tc;
}

Suite *rules_all_suite(void) {
  Suite *s = suite_create("rules_all");
  suite_add_tcase(s, all_case("memory", setup_memory));
  suite_add_tcase(s, all_case("file_process", setup_file_process));
  suite_add_tcase(s, all_case("file_disk", setup_file_disk));
  return s;
}
