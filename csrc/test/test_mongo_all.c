/* test_mongo_all.c: reserve_all, confirm_all and abandon_all on MongoDB
 * (design.md section 5, "Several keys at once"), rule by rule: all or
 * none, what a conflict takes back (every hold of the attempt, one from
 * before the call included) and what it leaves (other attempts' holds, a
 * reservation the owner confirmed), each key's answer, the top-level
 * status of confirm_all and abandon_all, a full
 * reservation and a foreign document in the batch. The store's clock is
 * frozen. test_mongo_all_faults.c has the fail points, the round trips
 * and the races. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "mongo_all_test.h"

static resv_store_t *store;
static resv_type_t *t;
static resv_answer_t a;

static void setup(void) {
  store = test_open(test_mongo_uri());
  resv_store_set_time(store, ALL_T0);
  t = test_fresh_type(store, "all");
}

static void teardown(void) {
  resv_answer_clear(&a);
  resv_store_close(store);
}

static void at(int64_t offset) { resv_store_set_time(store, ALL_T0 + offset); }

static void reserve_all(const char *const *keys, size_t n, const char *owner,
                        const char *attempt, int64_t ttl) {
  all_call_ok(t, RESV_OP_RESERVE_ALL, keys, n, owner, attempt, ttl, &a);
}

START_TEST(t_free_keys_reserved) {
  const char *keys[] = {"a", "b", "c"};
  reserve_all(keys, 3, "ann", "s1", 1000);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_uint_eq(a.nkeys, 3);
  for (size_t i = 0; i < 3; i++) {
    const char *one[] = {"s1"};
    ck_assert_int_eq(a.keys[i].status, RESV_RESERVED);
    ck_assert_int_eq(a.keys[i].state, RESV_STATE_PENDING);
    ck_assert_int_eq(a.keys[i].expires_at, ALL_T0 + 1000);
    ck_assert(test_str_is(a.keys[i].owner_id, "ann"));
    ck_assert(test_holds_are(&a.keys[i], 1, one));
  }
  resv_answer_t g = {0};
  test_get(t, "b", &g);
  ck_assert_int_eq(g.status, RESV_PENDING);
  ck_assert(test_str_is(g.owner_id, "ann"));
  resv_answer_clear(&g);
}
END_TEST

START_TEST(t_conflict_leaves_none) {
  resv_answer_t b = {0};
  test_reserve(t, "b", "bob", "x", 5000, &b);
  ck_assert_int_eq(b.status, RESV_RESERVED);
  const char *keys[] = {"a", "b", "c"};
  reserve_all(keys, 3, "ann", "s1", 1000);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(a.keys[0].status, RESV_ABANDONED);
  ck_assert_int_eq(a.keys[1].status, RESV_CONFLICT);
  ck_assert(test_str_is(a.keys[1].owner_id, "bob"));
  ck_assert_int_eq(a.keys[1].expires_at, ALL_T0 + 5000);
  ck_assert_uint_eq(a.keys[1].nholds, 0); /* never the holder's attempts */
  ck_assert_int_eq(a.keys[2].status, RESV_ABANDONED);
  test_get(t, "a", &b);
  ck_assert_int_eq(b.status, RESV_ABSENT);
  test_get(t, "c", &b);
  ck_assert_int_eq(b.status, RESV_ABSENT);
  test_get(t, "b", &b);
  ck_assert(test_str_is(b.owner_id, "bob"));
  resv_answer_clear(&b);
}
END_TEST

/* A conflict abandons each key by this attempt (design.md section 5): a
 * hold the attempt had before the call goes too; another attempt's hold
 * on the same reservation stays. */
START_TEST(t_conflict_abandons_the_attempt) {
  resv_answer_t b = {0};
  test_reserve(t, "a", "ann", "s1", 1000, &b);
  test_reserve(t, "c", "ann", "other", 1000, &b);
  test_reserve(t, "b", "bob", "x", 5000, &b);
  at(10);
  const char *keys[] = {"a", "b", "c", "d"};
  reserve_all(keys, 4, "ann", "s1", 1000);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(a.keys[0].status, RESV_ABANDONED);
  ck_assert_int_eq(a.keys[1].status, RESV_CONFLICT);
  ck_assert_int_eq(a.keys[2].status, RESV_KEPT);
  ck_assert_int_eq(a.keys[3].status, RESV_ABANDONED);
  const char *other[] = {"other"};
  test_get(t, "a", &b);
  ck_assert_int_eq(b.status, RESV_ABSENT);
  test_get(t, "c", &b);
  ck_assert_int_eq(b.status, RESV_PENDING);
  ck_assert(test_holds_are(&b, 1, other));
  test_get(t, "d", &b);
  ck_assert_int_eq(b.status, RESV_ABSENT);
  resv_answer_clear(&b);
}
END_TEST

/* Confirmed by this owner counts as held, and a conflict leaves it. */
START_TEST(t_confirmed_counts_as_held) {
  resv_answer_t b = {0};
  test_confirm(t, "a", "ann", 3, &b);
  const char *keys[] = {"a", "b"};
  reserve_all(keys, 2, "ann", "s1", 1000);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_int_eq(a.keys[0].status, RESV_CONFIRMED);
  ck_assert_int_eq(a.keys[0].version, 3);
  ck_assert_int_eq(a.keys[1].status, RESV_RESERVED);
  test_reserve(t, "c", "bob", "x", 5000, &b);
  const char *more[] = {"a", "c"};
  reserve_all(more, 2, "ann", "s2", 1000);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(a.keys[0].status, RESV_KEPT); /* as its abandon answers */
  test_get(t, "a", &b);
  ck_assert_int_eq(b.status, RESV_CONFIRMED);
  ck_assert_int_eq(b.version, 3);
  resv_answer_clear(&b);
}
END_TEST

/* Again with the same attempt: idempotent, the expiry the later one, as
 * a reserve of each key answers; an expired key of another owner is
 * taken over. */
START_TEST(t_again_and_expired) {
  resv_answer_t b = {0};
  test_reserve(t, "c", "bob", "x", 100, &b);
  const char *keys[] = {"a", "b"};
  reserve_all(keys, 2, "ann", "s1", 1000);
  at(500);
  reserve_all(keys, 2, "ann", "s1", 1000);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_int_eq(a.keys[1].expires_at, ALL_T0 + 1500);
  ck_assert_uint_eq(a.keys[1].nholds, 1);
  const char *all3[] = {"a", "b", "c"};
  reserve_all(all3, 3, "ann", "s2", 100);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_int_eq(a.keys[0].expires_at, ALL_T0 + 1500);
  ck_assert_uint_eq(a.keys[0].nholds, 2);
  ck_assert_int_eq(a.keys[2].expires_at, ALL_T0 + 600);
  ck_assert(test_str_is(a.keys[2].owner_id, "ann"));
  resv_answer_clear(&b);
}
END_TEST

/* A full reservation answers invalid, as reserve does, and the call's
 * other holds are taken back. */
START_TEST(t_full_takes_back) {
  resv_store_close(store);
  store = emu_open(test_mongo_uri(), (resv_options_t){.threads = 2, .max_holds = 2});
  resv_store_set_time(store, ALL_T0);
  t = test_fresh_type(store, "allfull");
  resv_answer_t b = {0};
  test_reserve(t, "b", "ann", "x", 1000, &b);
  test_reserve(t, "b", "ann", "y", 1000, &b);
  const char *keys[] = {"a", "b"};
  resv_error_t err;
  ck_assert(!all_call(t, RESV_OP_RESERVE_ALL, keys, 2, "ann", "s1", 1000, &a, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  test_get(t, "a", &b);
  ck_assert_int_eq(b.status, RESV_ABSENT);
  resv_answer_clear(&b);
}
END_TEST

/* A document that is not a reservation answers format, writes nothing to
 * it, and the call's other holds are taken back. */
START_TEST(t_foreign_document) {
  resv_answer_t b = {0};
  test_reserve(t, "z", "ann", "x", 1000, &b); /* the collection is set up */
  emu_raw_t raw;
  emu_raw_open(&raw, test_mongo_uri(), t->collection);
  emu_raw_insert(&raw, "{\"_id\": {\"t\": \"\", \"n\": \"email\", \"k\": \"bad\"},"
                       " \"tenant_id\": \"\", \"key\": \"bad\", \"junk\": 1}");
  const char *keys[] = {"a", "bad"};
  resv_error_t err;
  ck_assert(!all_call(t, RESV_OP_RESERVE_ALL, keys, 2, "ann", "s1", 1000, &a, &err));
  ck_assert_int_eq(err.code, RESV_EFORMAT);
  test_get(t, "a", &b);
  ck_assert_int_eq(b.status, RESV_ABSENT);
  ck_assert_int_eq(emu_raw_count(&raw, "{\"junk\": 1}"), 1);
  emu_raw_close(&raw);
  resv_answer_clear(&b);
}
END_TEST

/* confirm_all: each key as confirm answers it; confirmed when every key
 * is, else conflict. */
START_TEST(t_confirm_all) {
  resv_answer_t b = {0};
  test_reserve(t, "a", "ann", "s1", 1000, &b);
  test_reserve(t, "c", "bob", "x", 1000, &b);
  const char *keys[] = {"a", "b", "c"};
  all_call_ok(t, RESV_OP_CONFIRM_ALL, keys, 3, "ann", NULL, 7, &a);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(a.keys[0].status, RESV_CONFIRMED);
  ck_assert_int_eq(a.keys[0].version, 7);
  ck_assert_int_eq(a.keys[1].status, RESV_CONFIRMED);
  ck_assert_int_eq(a.keys[2].status, RESV_CONFLICT);
  ck_assert(test_str_is(a.keys[2].owner_id, "bob"));
  const char *mine[] = {"a", "b"};
  all_call_ok(t, RESV_OP_CONFIRM_ALL, mine, 2, "ann", NULL, 5, &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  ck_assert_int_eq(a.keys[1].version, 7); /* the larger one */
  test_get(t, "b", &b);
  ck_assert_int_eq(b.status, RESV_CONFIRMED);
  ck_assert_int_eq(b.version, 7);
  all_call_ok(t, RESV_OP_CONFIRM_ALL, mine, 2, "ann", NULL, 9, &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  ck_assert_int_eq(a.keys[0].version, 9);
  test_get(t, "a", &b);
  ck_assert_int_eq(b.version, 9);
  resv_answer_clear(&b);
}
END_TEST

/* abandon_all: each key as abandon answers it; the status abandoned. */
START_TEST(t_abandon_all) {
  resv_answer_t b = {0};
  test_reserve(t, "a", "ann", "s1", 1000, &b);
  test_reserve(t, "b", "ann", "s1", 1000, &b);
  test_reserve(t, "b", "ann", "s2", 1000, &b);
  test_confirm(t, "c", "ann", 1, &b);
  test_reserve(t, "e", "bob", "s1", 1000, &b);
  const char *keys[] = {"a", "b", "c", "d", "e"};
  all_call_ok(t, RESV_OP_ABANDON_ALL, keys, 5, "ann", "s1", 0, &a);
  ck_assert_int_eq(a.status, RESV_ABANDONED);
  ck_assert_int_eq(a.keys[0].status, RESV_ABANDONED);
  ck_assert_int_eq(a.keys[1].status, RESV_KEPT);
  ck_assert_int_eq(a.keys[2].status, RESV_KEPT);
  ck_assert_int_eq(a.keys[3].status, RESV_ABSENT);
  ck_assert_int_eq(a.keys[4].status, RESV_ABSENT);
  test_get(t, "a", &b);
  ck_assert_int_eq(b.status, RESV_ABSENT);
  const char *s2[] = {"s2"};
  test_get(t, "b", &b);
  ck_assert(test_holds_are(&b, 1, s2));
  test_get(t, "e", &b);
  ck_assert(test_str_is(b.owner_id, "bob"));
  const char *two[] = {"b", "e"};
  all_call_ok(t, RESV_OP_ABANDON_ALL, two, 2, "bob", "s1", 0, &a);
  ck_assert_int_eq(a.status, RESV_ABANDONED);
  ck_assert_int_eq(a.keys[0].status, RESV_ABSENT);
  ck_assert_int_eq(a.keys[1].status, RESV_ABANDONED);
  resv_answer_clear(&b);
}
END_TEST

Suite *mongo_all_suite(void) {
  const TTest *tests[] = {
      t_free_keys_reserved,
      t_conflict_leaves_none,
      t_conflict_abandons_the_attempt,
      t_confirmed_counts_as_held,
      t_again_and_expired,
      t_full_takes_back,
      t_foreign_document,
      t_confirm_all,
      t_abandon_all, NULL};
  return test_suite("mongo_all", "rules", 60, setup, teardown, tests);
}
