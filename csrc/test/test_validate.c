/* test_validate.c: docs/design.md section 8's `invalid`: every bad argument is
 * refused with a message naming it, and nothing is written. Also the
 * collection-name rules of docs/design.md section 3 and the open options. */
#include <stdio.h>
#include <string.h>

#include "tests.h"

typedef struct bad_request {
  const char *why;
  const char *names; /* the argument the message must name */
  resv_request_t request;
} bad_request_t;

/* Brace initialisers, so the tables can be static. */
#define S(lit) {lit, sizeof(lit) - 1}
#define KEY(t, n, k) {S(t), S(n), S(k)}
#define OWNER(t, i) {S(t), S(i)}

static const bad_request_t bad_requests[] = {
    {"empty namespace", "key.namespace",
     {RESV_OP_RESERVE, KEY("", "", "k"), OWNER("", "o"), S("a"), 10, 0, 0, NULL, 0}},
    {"empty key", "key.key",
     {RESV_OP_RESERVE, KEY("", "n", ""), OWNER("", "o"), S("a"), 10, 0, 0, NULL, 0}},
    {"empty owner id", "owner.id",
     {RESV_OP_RESERVE, KEY("", "n", "k"), OWNER("", ""), S("a"), 10, 0, 0, NULL, 0}},
    {"empty attempt", "attempt",
     {RESV_OP_RESERVE, KEY("", "n", "k"), OWNER("", "o"), S(""), 10, 0, 0, NULL, 0}},
    {"empty attempt on abandon", "attempt",
     {RESV_OP_ABANDON, KEY("", "n", "k"), OWNER("", "o"), S(""), 0, 0, 0, NULL, 0}},
    {"zero ttl", "ttl",
     {RESV_OP_RESERVE, KEY("", "n", "k"), OWNER("", "o"), S("a"), 0, 0, 0, NULL, 0}},
    {"negative ttl", "ttl",
     {RESV_OP_RESERVE, KEY("", "n", "k"), OWNER("", "o"), S("a"), -5, 0, 0, NULL, 0}},
    {"huge ttl", "ttl",
     {RESV_OP_RESERVE, KEY("", "n", "k"), OWNER("", "o"), S("a"), INT64_MAX, 0, 0, NULL, 0}},
    {"negative timeout", "timeout_ms",
     {RESV_OP_GET, KEY("", "n", "k"), OWNER("", ""), S(""), 0, 0, -1, NULL, 0}},
    {"timeout over a day", "timeout_ms",
     {RESV_OP_GET, KEY("", "n", "k"), OWNER("", ""), S(""), 0, 0, 24 * 3600 * 1000 + 1, NULL, 0}},
    {"negative version", "version",
     {RESV_OP_CONFIRM, KEY("", "n", "k"), OWNER("", "o"), S(""), 0, -1, 0, NULL, 0}},
    {"NUL in key", "key.key",
     {RESV_OP_RESERVE, KEY("", "n", "a\0b"), OWNER("", "o"), S("a"), 10, 0, 0, NULL, 0}},
    {"NUL in tenant", "key.tenant",
     {RESV_OP_RESERVE, KEY("t\0", "n", "k"), OWNER("", "o"), S("a"), 10, 0, 0, NULL, 0}},
    {"bad UTF-8 in key", "key.key",
     {RESV_OP_RESERVE, KEY("", "n", "\xff"), OWNER("", "o"), S("a"), 10, 0, 0, NULL, 0}},
    {"overlong UTF-8", "key.key",
     {RESV_OP_RESERVE, KEY("", "n", "\xc0\xaf"), OWNER("", "o"), S("a"), 10, 0, 0, NULL, 0}},
    {"UTF-16 surrogate", "owner.id",
     {RESV_OP_RESERVE, KEY("", "n", "k"), OWNER("", "\xed\xa0\x80"), S("a"), 10, 0, 0, NULL, 0}},
    {"truncated UTF-8", "owner.tenant",
     {RESV_OP_RESERVE, KEY("", "n", "k"), OWNER("\xe2\x82", "o"), S("a"), 10, 0, 0, NULL, 0}},
    {"past U+10FFFF", "attempt",
     {RESV_OP_RESERVE, KEY("", "n", "k"), OWNER("", "o"), S("\xf4\x90\x80\x80"), 10, 0, 0, NULL, 0}},
    {"unknown op", "op",
     {99, KEY("", "n", "k"), OWNER("", "o"), S("a"), 10, 0, 0, NULL, 0}},
};

START_TEST(bad_request_is_invalid_and_writes_nothing) {
  const bad_request_t *bad = &bad_requests[_i];
  resv_store_t *store = test_open(NULL);
  resv_type_t *t = test_fresh_type(store, "validate");
  resv_answer_t a = {0};
  resv_error_t err;
  ck_assert_msg(!resv_call(t, &bad->request, &a, &err), "%s accepted", bad->why);
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, bad->names), "%s: message \"%s\" does not name %s",
                bad->why, err.message, bad->names);

  /* The job form refuses it the same way, at once. */
  resv_job_t *job = resv_submit(t, &bad->request, NULL, &err);
  ck_assert(job && resv_job_done(job));
  ck_assert_int_eq(resv_job_error(job)->code, RESV_EINVALID);
  ck_assert_ptr_null(resv_job_answer(job));
  resv_job_destroy(job);

  resv_request_t get = {.op = RESV_OP_GET, .key = KEY("", "n", "k"), .owner = OWNER("", "")};
  ck_assert(resv_call(t, &get, &a, &err));
  ck_assert_int_eq(a.status, RESV_ABSENT);
  resv_answer_clear(&a);
  resv_store_close(store);
}
END_TEST

START_TEST(strings_longer_than_max_string_are_invalid) {
  resv_options_t o = {.max_string = 8};
  resv_error_t err;
  resv_store_t *store = resv_store_open(&o, &err);
  resv_type_t *t = test_fresh_type(store, "v");
  resv_answer_t a = {0};
  resv_request_t r = {RESV_OP_RESERVE, KEY("", "n", "12345678"), OWNER("", "o"), S("a"), 10, 0, 0, NULL, 0};
  ck_assert(resv_call(t, &r, &a, &err));
  r.key.key = resv_cstr("123456789");
  ck_assert(!resv_call(t, &r, &a, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert(strstr(err.message, "longer than 8 bytes"));
  resv_answer_clear(&a);
  resv_store_close(store);
}
END_TEST

/* The key lists of the *_all ops: 1 to max_keys distinct valid keys;
 * the error names the key by its place (from 1). */
static const struct {
  size_t n;       /* keys listed */
  int dup;        /* >= 0: keys[n-1] repeats keys[dup] */
  int bad;        /* >= 0: keys[bad] has an empty key */
  const char *want;
} bad_lists[] = {
    {0, -1, -1, "keys: must list at least one key"},
    {5, -1, -1, "keys: at most 4 (max_keys), got 5"},
    {3, 0, -1, "keys[3]: the same key as keys[1]"},
    {2, -1, 1, "keys[2].key: must not be empty"},
};

START_TEST(bad_key_lists_are_invalid) {
  resv_key_t keys[8];
  char names[8][16];
  for (int i = 0; i < 8; i++) {
    snprintf(names[i], sizeof names[i], "k%d", i);
    keys[i] = (resv_key_t){resv_cstr(""), resv_cstr("n"), resv_cstr(names[i])};
  }
  size_t n = bad_lists[_i].n;
  if (bad_lists[_i].dup >= 0) keys[n - 1] = keys[bad_lists[_i].dup];
  if (bad_lists[_i].bad >= 0) keys[bad_lists[_i].bad].key = resv_cstr("");
  resv_request_t r = {.op = RESV_OP_RESERVE_ALL, .owner = OWNER("", "o"), .attempt = S("a"),
                      .ttl_ms = 10, .keys = keys, .nkeys = n};
  resv__limits_t limits = {64, 4};
  resv_error_t err;
  ck_assert(!resv__validate_request(&r, &limits, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_str_eq(err.message, bad_lists[_i].want);
  r.keys = keys;
  r.nkeys = 2;
  keys[0].key = resv_cstr("k0"), keys[1] = (resv_key_t){resv_cstr(""), resv_cstr("n"), resv_cstr("k1")};
  ck_assert(resv__validate_request(&r, &limits, &err));
  r.op = RESV_OP_CONFIRM_ALL, r.version = -1;
  ck_assert(!resv__validate_request(&r, &limits, &err));
  ck_assert_str_eq(err.message, "version: must not be negative, got -1");
  r.op = RESV_OP_ABANDON_ALL, r.attempt = resv_cstr("");
  ck_assert(!resv__validate_request(&r, &limits, &err));
  ck_assert_str_eq(err.message, "attempt: must not be empty");
}
END_TEST

START_TEST(valid_utf8_is_accepted) {
  ck_assert(resv__utf8_valid("", 0));
  ck_assert(resv__utf8_valid("ann@example.com", 15));
  ck_assert(resv__utf8_valid("\xc3\xa9", 2));         /* é */
  ck_assert(resv__utf8_valid("\xe2\x82\xac", 3));     /* € */
  ck_assert(resv__utf8_valid("\xf0\x9f\x98\x80", 4)); /* 😀 */
  ck_assert(resv__utf8_valid("\xf4\x8f\xbf\xbf", 4)); /* U+10FFFF */
  ck_assert(!resv__utf8_valid("\xe0\x80\x80", 3));    /* overlong */
  ck_assert(!resv__utf8_valid("\x80", 1));            /* lone continuation */
  ck_assert(!resv__utf8_valid("\xf0\x9f\x98", 3));    /* cut short */
}
END_TEST

/* The ASCII fast path reads eight bytes at a time: a bad byte at every
 * offset of a longer string, inside a word or in the tail, is still seen. */
START_TEST(a_bad_byte_at_any_offset_is_seen) {
  char s[21];
  for (size_t len = 1; len <= sizeof s; len++)
    for (size_t pos = 0; pos < len; pos++) {
      memset(s, 'a', sizeof s);
      ck_assert(resv__utf8_valid(s, len));
      s[pos] = '\0';
      ck_assert_msg(!resv__utf8_valid(s, len), "NUL at %zu of %zu", pos, len);
      s[pos] = (char)0x80;
      ck_assert_msg(!resv__utf8_valid(s, len), "0x80 at %zu of %zu", pos, len);
      s[pos] = (char)0x7f;
      ck_assert(resv__utf8_valid(s, len));
      if (pos + 1 < len) {
        s[pos] = (char)0xc3; /* é */
        s[pos + 1] = (char)0xa9;
        ck_assert_msg(resv__utf8_valid(s, len), "é at %zu of %zu", pos, len);
      }
    }
}
END_TEST

/* A request's strings pass an ASCII check of their own (whole words, two
 * overlapping halves from 4 to 7 bytes, single bytes under 4) before the
 * UTF-8 one: at every length and offset a NUL or a stray 0x80 in the key
 * is refused and named, and é is let through. */
START_TEST(a_bad_byte_in_a_request_string_is_refused_at_any_offset) {
  resv_store_t *store = test_open(NULL);
  resv_type_t *t = test_fresh_type(store, "validate");
  resv_answer_t a = {0};
  resv_error_t err;
  char s[21];
  for (size_t len = 1; len <= sizeof s; len++)
    for (size_t pos = 0; pos < len; pos++) {
      resv_request_t r = {RESV_OP_GET, KEY("", "n", ""), OWNER("", ""), S(""), 0, 0, 0, NULL, 0};
      r.key.key = (resv_str_t){s, len};
      memset(s, 'a', sizeof s);
      s[pos] = '\0';
      ck_assert_msg(!resv_call(t, &r, &a, &err), "NUL at %zu of %zu accepted", pos, len);
      ck_assert_str_eq(err.message, "key.key: contains a NUL byte");
      s[pos] = (char)0x80;
      ck_assert_msg(!resv_call(t, &r, &a, &err), "0x80 at %zu of %zu accepted", pos, len);
      ck_assert_str_eq(err.message, "key.key: not valid UTF-8");
      if (pos + 1 < len) {
        s[pos] = (char)0xc3; /* é */
        s[pos + 1] = (char)0xa9;
        ck_assert_msg(resv_call(t, &r, &a, &err), "é at %zu of %zu: %s", pos, len, err.message);
      }
    }
  resv_answer_clear(&a);
  resv_store_close(store);
}
END_TEST

typedef struct bad_type {
  const char *context;
  const char *aggregate;
  const char *names;
} bad_type_t;

static const bad_type_t bad_types[] = {
    {"", "user", "context"},      {"shop", "", "aggregate"},
    {"sh__op", "user", "\"__\""}, {"shop", "us__er", "\"__\""},
    {"sh.op", "user", "'.'"},     {"shop", "us$er", "'$'"},
    {"shop_", "user", "end with"}, {"shop", "_user", "start with"},
    {"shop", "\xff", "UTF-8"},
};

START_TEST(bad_type_names_are_invalid) {
  const bad_type_t *bad = &bad_types[_i];
  resv_store_t *store = test_open(NULL);
  resv_error_t err;
  ck_assert_ptr_null(resv_store_type(store, bad->context, strlen(bad->context),
                                     bad->aggregate, strlen(bad->aggregate), &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, bad->names), "\"%s\" lacks %s", err.message, bad->names);
  resv_store_close(store);
}
END_TEST

START_TEST(type_name_with_nul_is_invalid) {
  resv_store_t *store = test_open(NULL);
  resv_error_t err;
  ck_assert_ptr_null(resv_store_type(store, "sh\0p", 4, "user", 4, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  resv_store_close(store);
}
END_TEST

START_TEST(collection_name_follows_the_format) {
  resv_store_t *store = test_open(NULL);
  resv_type_t *t = resv_store_type(store, "shop", 4, "user", 4, NULL);
  ck_assert_str_eq(resv_type_collection(t), "wow_reservation__shop__user");
  ck_assert_ptr_eq(resv_store_type(store, "shop", 4, "user", 4, NULL), t);
  resv_store_close(store);
}
END_TEST

START_TEST(namespace_longer_than_255_bytes_is_invalid) {
  resv_options_t o = {.database = "app"};
  resv_store_t *store = resv_store_open(&o, NULL);
  char agg[300];
  /* "app." + "wow_reservation__" + "c" + "__" + agg: 4 + 17 + 1 + 2 = 24 */
  memset(agg, 'a', sizeof agg);
  resv_error_t err;
  ck_assert_ptr_nonnull(resv_store_type(store, "c", 1, agg, 255 - 24, &err));
  ck_assert_ptr_null(resv_store_type(store, "c", 1, agg, 256 - 24, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert(strstr(err.message, "longer than 255"));
  resv_store_close(store);
}
END_TEST

START_TEST(bad_options_are_invalid) {
  resv_error_t err;
  resv_options_t bad[] = {
      {.threads = -1}, {.queue = -1}, {.timeout_ms = -1},
      {.max_string = -2}, {.sharding = 7}, {.database = "a.b"},
      {.max_keys = -1}, {.max_keys = 1025},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_ptr_null(resv_store_open(&bad[i], &err));
    ck_assert_int_eq(err.code, RESV_EINVALID);
  }
}
END_TEST

START_TEST(names_are_stable) {
  ck_assert_str_eq(resv_code_name(RESV_EINVALID), "invalid");
  ck_assert_str_eq(resv_code_name(RESV_ECLOSED), "closed");
  ck_assert_str_eq(resv_status_name(RESV_EXPIRED), "expired");
  ck_assert_str_eq(resv_status_name(RESV_KEPT), "kept");
  ck_assert_str_eq(resv_state_name(RESV_STATE_CONFIRMED), "confirmed");
  ck_assert_str_eq(resv_code_name(1000), "unknown");
}
END_TEST

Suite *validate_suite(void) {
  Suite *s = suite_create("validate");
  TCase *tc = tcase_create("validate");
  tcase_add_loop_test(tc, bad_request_is_invalid_and_writes_nothing, 0,
                      sizeof bad_requests / sizeof bad_requests[0]);
  tcase_add_test(tc, strings_longer_than_max_string_are_invalid);
  tcase_add_loop_test(tc, bad_key_lists_are_invalid, 0, sizeof bad_lists / sizeof bad_lists[0]);
  tcase_add_test(tc, valid_utf8_is_accepted);
  tcase_add_test(tc, a_bad_byte_at_any_offset_is_seen);
  tcase_add_test(tc, a_bad_byte_in_a_request_string_is_refused_at_any_offset);
  tcase_add_loop_test(tc, bad_type_names_are_invalid, 0, sizeof bad_types / sizeof bad_types[0]);
  tcase_add_test(tc, type_name_with_nul_is_invalid);
  tcase_add_test(tc, collection_name_follows_the_format);
  tcase_add_test(tc, namespace_longer_than_255_bytes_is_invalid);
  tcase_add_test(tc, bad_options_are_invalid);
  tcase_add_test(tc, names_are_stable);
  suite_add_tcase(s, tc);
  return s;
}
