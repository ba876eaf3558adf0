/* test_rules.c: docs/design.md section 5, one test per rule, on the memory store, on
 * MongoDB and on the file store with sync process and disk (the same test
 * bodies; only the store they open differs). The store's clock is frozen,
 * so every expiry is exact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests.h"

#define T0 1700000000000LL

static const char *rules_uri; /* NULL: memory */
static resv_store_t *store;
static resv_type_t *users;
static resv_answer_t a;

static void setup_memory(void) {
  rules_uri = NULL;
  store = test_open(NULL);
  resv_store_set_time(store, T0);
  users = test_fresh_type(store, "rules");
}

static void setup_mongo(void) {
  rules_uri = test_mongo_uri();
  store = test_open(rules_uri);
  resv_store_set_time(store, T0);
  users = test_fresh_type(store, "rules");
}

static char file_dir[256]; /* "": not the file store */
static int32_t file_sync;

static void setup_file(int32_t sync) {
  rules_uri = NULL;
  test_temp_dir(file_dir, sizeof file_dir);
  file_sync = sync;
  store = test_open_file(file_dir, sync);
  resv_store_set_time(store, T0);
  users = test_fresh_type(store, "rules");
}

static void setup_file_process(void) { setup_file(RESV_SYNC_PROCESS); }
static void setup_file_disk(void) { setup_file(RESV_SYNC_DISK); }

static void teardown(void) {
  resv_answer_clear(&a);
  resv_store_close(store);
  if (file_dir[0]) test_remove_dir(file_dir);
  file_dir[0] = '\0';
}

static void at(int64_t offset) { resv_store_set_time(store, T0 + offset); }

static void assert_owner(const resv_answer_t *ans, const char *id) {
  ck_assert_msg(test_str_is(ans->owner_id, id), "owner %.*s, want %s",
                (int)ans->owner_id.len, ans->owner_id.ptr, id);
}

START_TEST(fresh_reserve_is_pending_and_ours) {
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_int_eq(a.state, RESV_STATE_PENDING);
  assert_owner(&a, "A");
  ck_assert(test_str_is(a.owner_tenant, ""));
  ck_assert_int_eq(a.expires_at, T0 + 1000);
  ck_assert(test_holds_are(&a, 1, (const char *[]){"a1"}));
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert_int_eq(a.expires_at, T0 + 1000);
}
END_TEST

START_TEST(same_attempt_again_is_idempotent) {
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_int_eq(a.expires_at, T0 + 1000);
  ck_assert(test_holds_are(&a, 1, (const char *[]){"a1"}));
}
END_TEST

START_TEST(second_attempt_joins_and_expiry_takes_the_later) {
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  at(500);
  test_reserve(users, "ann@x", "A", "a2", 100, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_int_eq(a.expires_at, T0 + 1000); /* the old expiry is later */
  ck_assert(test_holds_are(&a, 2, (const char *[]){"a1", "a2"}));
  test_reserve(users, "ann@x", "A", "a3", 1000, &a);
  ck_assert_int_eq(a.expires_at, T0 + 1500); /* the new one is later */
  ck_assert(test_holds_are(&a, 3, (const char *[]){"a1", "a2", "a3"}));
}
END_TEST

START_TEST(other_owner_meets_pending_holder_as_conflict) {
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  at(999);
  test_reserve(users, "ann@x", "B", "b1", 1000, &a);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(a.state, RESV_STATE_PENDING);
  assert_owner(&a, "A");
  ck_assert_int_eq(a.expires_at, T0 + 1000);
  ck_assert_uint_eq(a.nholds, 0); /* another owner's attempts stay private */
  test_confirm(users, "ann@x", "B", 1, &a);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  assert_owner(&a, "A");
}
END_TEST

START_TEST(other_owner_meets_confirmed_holder_as_conflict) {
  test_confirm(users, "ann@x", "A", 7, &a);
  at(1000000);
  test_reserve(users, "ann@x", "B", "b1", 1000, &a);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(a.state, RESV_STATE_CONFIRMED);
  ck_assert_int_eq(a.version, 7);
  assert_owner(&a, "A");
  test_confirm(users, "ann@x", "B", 9, &a);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(a.version, 7);
}
END_TEST

START_TEST(expired_pending_is_taken_over_by_another_owner) {
  test_reserve(users, "ann@x", "A", "a1", 100, &a);
  at(100); /* expires_at <= now: expired */
  test_reserve(users, "ann@x", "B", "b1", 1000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  assert_owner(&a, "B");
  ck_assert_int_eq(a.expires_at, T0 + 1100);
  ck_assert(test_holds_are(&a, 1, (const char *[]){"b1"}));
}
END_TEST

START_TEST(own_expired_pending_starts_afresh) {
  test_reserve(users, "ann@x", "A", "a1", 100, &a);
  at(200);
  test_reserve(users, "ann@x", "A", "a2", 100, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_int_eq(a.expires_at, T0 + 300);
  ck_assert(test_holds_are(&a, 1, (const char *[]){"a2"}));
}
END_TEST

START_TEST(reserve_keeps_own_confirmed_as_it_is) {
  test_confirm(users, "ann@x", "A", 3, &a);
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  ck_assert_int_eq(a.version, 3);
  ck_assert_uint_eq(a.nholds, 0);
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  ck_assert_int_eq(a.version, 3);
  ck_assert_int_eq(a.expires_at, 0);
}
END_TEST

START_TEST(confirm_keeps_the_larger_version) {
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  test_confirm(users, "ann@x", "A", 5, &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  ck_assert_int_eq(a.version, 5);
  test_confirm(users, "ann@x", "A", 3, &a);
  ck_assert_int_eq(a.version, 5);
  test_confirm(users, "ann@x", "A", 9, &a);
  ck_assert_int_eq(a.version, 9);
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  ck_assert_int_eq(a.version, 9);
  ck_assert_uint_eq(a.nholds, 0);
}
END_TEST

START_TEST(confirm_after_own_expiry_succeeds_when_untaken) {
  test_reserve(users, "ann@x", "A", "a1", 100, &a);
  at(5000);
  test_confirm(users, "ann@x", "A", 1, &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  assert_owner(&a, "A");
  ck_assert_int_eq(a.version, 1);
}
END_TEST

START_TEST(confirm_of_a_free_key_creates_it_confirmed) {
  test_confirm(users, "ann@x", "A", 4, &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  ck_assert_int_eq(a.version, 4);
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  assert_owner(&a, "A");
}
END_TEST

START_TEST(confirm_takes_over_an_expired_pending_of_another) {
  test_reserve(users, "ann@x", "A", "a1", 100, &a);
  at(100);
  test_confirm(users, "ann@x", "B", 2, &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  assert_owner(&a, "B");
  ck_assert_int_eq(a.version, 2);
}
END_TEST

START_TEST(abandon_of_the_last_hold_deletes) {
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  test_abandon(users, "ann@x", "A", "a1", &a);
  ck_assert_int_eq(a.status, RESV_ABANDONED);
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  test_reserve(users, "ann@x", "B", "b1", 1000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
}
END_TEST

START_TEST(abandon_keeps_a_reservation_other_attempts_hold) {
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  test_reserve(users, "ann@x", "A", "a2", 1000, &a);
  test_abandon(users, "ann@x", "A", "a1", &a);
  ck_assert_int_eq(a.status, RESV_KEPT);
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert(test_holds_are(&a, 1, (const char *[]){"a2"}));
  test_abandon(users, "ann@x", "A", "a2", &a);
  ck_assert_int_eq(a.status, RESV_ABANDONED);
}
END_TEST

START_TEST(abandon_of_an_unknown_attempt_keeps) {
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  test_abandon(users, "ann@x", "A", "a9", &a);
  ck_assert_int_eq(a.status, RESV_KEPT);
  test_get(users, "ann@x", &a);
  ck_assert(test_holds_are(&a, 1, (const char *[]){"a1"}));
}
END_TEST

START_TEST(abandon_never_deletes_a_confirmed_reservation) {
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  test_confirm(users, "ann@x", "A", 1, &a);
  test_abandon(users, "ann@x", "A", "a1", &a);
  ck_assert_int_eq(a.status, RESV_KEPT);
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
}
END_TEST

START_TEST(abandon_without_own_reservation_is_absent) {
  test_abandon(users, "ann@x", "A", "a1", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  test_abandon(users, "ann@x", "B", "a1", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  assert_owner(&a, "A");
}
END_TEST

START_TEST(abandon_of_own_expired_pending_deletes) {
  test_reserve(users, "ann@x", "A", "a1", 100, &a);
  at(1000);
  test_abandon(users, "ann@x", "A", "a1", &a);
  ck_assert_int_eq(a.status, RESV_ABANDONED);
}
END_TEST

START_TEST(release_deletes_pending_and_confirmed_of_the_owner_only) {
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  test_release(users, "ann@x", "B", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  test_release(users, "ann@x", "A", &a);
  ck_assert_int_eq(a.status, RESV_RELEASED);
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  test_confirm(users, "bob@x", "A", 1, &a);
  test_release(users, "bob@x", "A", &a);
  ck_assert_int_eq(a.status, RESV_RELEASED);
  test_release(users, "bob@x", "A", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
}
END_TEST

START_TEST(get_tells_pending_from_expired) {
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  test_reserve(users, "ann@x", "A", "a1", 100, &a);
  at(99);
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  at(100);
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_EXPIRED);
  assert_owner(&a, "A");
  ck_assert_int_eq(a.expires_at, T0 + 100);
  ck_assert(test_holds_are(&a, 1, (const char *[]){"a1"}));
}
END_TEST

START_TEST(tenant_and_namespace_make_distinct_keys) {
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", "ann@x"),
                      .owner = test_owner("", "A"), .attempt = resv_cstr("a1"),
                      .ttl_ms = 1000};
  resv_error_t err;
  ck_assert(resv_call(users, &r, &a, &err));
  r.owner = test_owner("", "B");
  r.key.tenant = resv_cstr("t1");
  ck_assert(resv_call(users, &r, &a, &err));
  ck_assert_int_eq(a.status, RESV_RESERVED);
  r.key.tenant = resv_cstr("");
  r.key.ns = resv_cstr("login");
  ck_assert(resv_call(users, &r, &a, &err));
  ck_assert_int_eq(a.status, RESV_RESERVED);
}
END_TEST

START_TEST(owner_tenant_is_part_of_the_owner) {
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", "ann@x"),
                      .owner = test_owner("t1", "u1"), .attempt = resv_cstr("a1"),
                      .ttl_ms = 1000};
  resv_error_t err;
  ck_assert(resv_call(users, &r, &a, &err));
  ck_assert(test_str_is(a.owner_tenant, "t1"));
  r.owner = test_owner("t2", "u1");
  ck_assert(resv_call(users, &r, &a, &err));
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert(test_str_is(a.owner_tenant, "t1"));
}
END_TEST

START_TEST(types_keep_keys_apart) {
  resv_type_t *other = test_fresh_type(store, "other");
  test_reserve(users, "ann@x", "A", "a1", 1000, &a);
  test_reserve(other, "ann@x", "B", "b1", 1000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
}
END_TEST

START_TEST(an_expiry_past_int64_is_refused) {
  /* A clock set near INT64_MAX: now + ttl wrapped into the past made the
   * reservation expired at birth, and a second owner got it too. */
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", "ann@x"),
                      .owner = test_owner("", "A"), .attempt = resv_cstr("a1"),
                      .ttl_ms = 1000};
  resv_error_t err;
  resv_store_set_time(store, INT64_MAX - 100);
  ck_assert(!resv_call(users, &r, &a, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, "9223372036854775707 + 1000") != NULL,
                "the message names the values: %s", err.message);
  r.owner = test_owner("", "B");
  ck_assert(!resv_call(users, &r, &a, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  test_get(users, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  /* Up to INT64_MAX itself is an expiry like any other. */
  r.ttl_ms = 100;
  ck_assert(resv_call(users, &r, &a, &err));
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_int_eq(a.expires_at, INT64_MAX);
  r.owner = test_owner("", "A");
  r.ttl_ms = 1;
  ck_assert(resv_call(users, &r, &a, &err));
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  assert_owner(&a, "B");
}
END_TEST

START_TEST(a_reservation_holds_at_most_100_attempts_by_default) {
  /* Holds were unbounded, and every call costs O(holds): 50,000 holds
   * took 66 s of memory-store calls to make. */
  char attempt[16];
  for (int i = 0; i < 100; i++) {
    snprintf(attempt, sizeof attempt, "a%d", i);
    test_reserve(users, "ann@x", "A", attempt, 1000, &a);
    ck_assert_int_eq(a.status, RESV_RESERVED);
  }
  ck_assert_uint_eq(a.nholds, 100);
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", "ann@x"),
                      .owner = test_owner("", "A"), .attempt = resv_cstr("a100"),
                      .ttl_ms = 1000};
  resv_error_t err;
  ck_assert(!resv_call(users, &r, &a, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, "100 holds (max_holds)") != NULL, "%s", err.message);
  test_reserve(users, "ann@x", "A", "a42", 1000, &a); /* one already there */
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_uint_eq(a.nholds, 100);
}
END_TEST

START_TEST(a_full_reservation_refuses_a_new_attempt_and_nothing_else) {
  resv_options_t o = {.uri = rules_uri, .threads = 2, .max_holds = 3,
                      .path = file_dir[0] ? file_dir : NULL, .sync = file_sync};
  resv_error_t err;
  resv_store_t *small = resv_store_open(&o, &err);
  ck_assert_msg(small != NULL, "%s", err.message);
  resv_store_set_time(small, T0);
  resv_type_t *t = test_fresh_type(small, "full");
  test_reserve(t, "ann@x", "A", "a1", 1000, &a);
  test_reserve(t, "ann@x", "A", "a2", 1000, &a);
  test_reserve(t, "ann@x", "A", "a3", 1000, &a);
  ck_assert(test_holds_are(&a, 3, (const char *[]){"a1", "a2", "a3"}));
  /* A fourth attempt, with a later expiry: refused, and nothing changes. */
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", "ann@x"),
                      .owner = test_owner("", "A"), .attempt = resv_cstr("a4"),
                      .ttl_ms = 5000};
  ck_assert(!resv_call(t, &r, &a, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, "3 holds (max_holds)") != NULL, "%s", err.message);
  test_get(t, "ann@x", &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert_int_eq(a.expires_at, T0 + 1000);
  ck_assert(test_holds_are(&a, 3, (const char *[]){"a1", "a2", "a3"}));
  /* An attempt already there is still idempotent, and still extends. */
  test_reserve(t, "ann@x", "A", "a2", 2000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_int_eq(a.expires_at, T0 + 2000);
  ck_assert(test_holds_are(&a, 3, (const char *[]){"a1", "a2", "a3"}));
  /* Another owner still meets a conflict, the owner can still confirm
   * another full one, and an abandon makes room. */
  test_reserve(t, "ann@x", "B", "b1", 1000, &a);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  test_abandon(t, "ann@x", "A", "a1", &a);
  ck_assert_int_eq(a.status, RESV_KEPT);
  test_reserve(t, "ann@x", "A", "a4", 1000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert(test_holds_are(&a, 3, (const char *[]){"a2", "a3", "a4"}));
  test_reserve(t, "bob@x", "A", "a1", 1000, &a);
  test_reserve(t, "bob@x", "A", "a2", 1000, &a);
  test_reserve(t, "bob@x", "A", "a3", 1000, &a);
  test_confirm(t, "bob@x", "A", 7, &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  /* Once expired, a full reservation is taken afresh by a new attempt. */
  resv_store_set_time(small, T0 + 2000);
  test_reserve(t, "ann@x", "A", "a5", 1000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert(test_holds_are(&a, 1, (const char *[]){"a5"}));
  resv_store_close(small);
}
END_TEST

static TCase *rules_case(const char *name, void (*setup)(void)) {
  TCase *tc = tcase_create(name);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, fresh_reserve_is_pending_and_ours);
  tcase_add_test(tc, same_attempt_again_is_idempotent);
  tcase_add_test(tc, second_attempt_joins_and_expiry_takes_the_later);
  tcase_add_test(tc, other_owner_meets_pending_holder_as_conflict);
  tcase_add_test(tc, other_owner_meets_confirmed_holder_as_conflict);
  tcase_add_test(tc, expired_pending_is_taken_over_by_another_owner);
  tcase_add_test(tc, own_expired_pending_starts_afresh);
  tcase_add_test(tc, reserve_keeps_own_confirmed_as_it_is);
  tcase_add_test(tc, confirm_keeps_the_larger_version);
  tcase_add_test(tc, confirm_after_own_expiry_succeeds_when_untaken);
  tcase_add_test(tc, confirm_of_a_free_key_creates_it_confirmed);
  tcase_add_test(tc, confirm_takes_over_an_expired_pending_of_another);
  tcase_add_test(tc, abandon_of_the_last_hold_deletes);
  tcase_add_test(tc, abandon_keeps_a_reservation_other_attempts_hold);
  tcase_add_test(tc, abandon_of_an_unknown_attempt_keeps);
  tcase_add_test(tc, abandon_never_deletes_a_confirmed_reservation);
  tcase_add_test(tc, abandon_without_own_reservation_is_absent);
  tcase_add_test(tc, abandon_of_own_expired_pending_deletes);
  tcase_add_test(tc, release_deletes_pending_and_confirmed_of_the_owner_only);
  tcase_add_test(tc, get_tells_pending_from_expired);
  tcase_add_test(tc, tenant_and_namespace_make_distinct_keys);
  tcase_add_test(tc, owner_tenant_is_part_of_the_owner);
  tcase_add_test(tc, types_keep_keys_apart);
  tcase_add_test(tc, an_expiry_past_int64_is_refused);
  tcase_add_test(tc, a_reservation_holds_at_most_100_attempts_by_default);
  tcase_add_test(tc, a_full_reservation_refuses_a_new_attempt_and_nothing_else);
  return tc;
}

Suite *rules_memory_suite(void) {
  Suite *s = suite_create("rules_memory");
  suite_add_tcase(s, rules_case("memory", setup_memory));
  return s;
}

Suite *rules_mongo_suite(void) {
  Suite *s = suite_create("rules_mongo");
  suite_add_tcase(s, rules_case("mongo", setup_mongo));
  return s;
}

Suite *rules_file_suite(void) {
  Suite *s = suite_create("rules_file");
  suite_add_tcase(s, rules_case("file_process", setup_file_process));
  suite_add_tcase(s, rules_case("file_disk", setup_file_disk));
  return s;
}
