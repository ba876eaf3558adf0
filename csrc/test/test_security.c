/* test_security.c: what a hostile or careless input cannot do.
 *
 *   - Strings that look like MongoDB operators or field paths ("$gt",
 *     "$where", "$$ROOT", '{"$gt": ""}') are valid strings: stored and
 *     answered literally, as BSON strings, in every position (tenant,
 *     namespace, key, owner, attempt), never run as operators. The stored
 *     document is read back with a plain client.
 *   - One tenant's calls never read or change another tenant's
 *     reservations of the same namespace and key, however the tenant
 *     names look.
 *   - The URI's password never shows in an error, in describe, or in
 *     anything the driver logs, whether the server is unreachable or
 *     reachable (the emulator refuses the authentication).
 *   - A store used after fork() answers closed (test_faults.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"

static const char *const operator_like[] = {
    "$gt", "$where", "$$ROOT", "{\"$gt\": \"\"}", "$ne", "$expires_at",
    "$$REMOVE", "$literal", "holds.$", "a.b", "$", "$$NOW", "{$or: [{}]}",
};
#define N_OPERATOR_LIKE (int)(sizeof operator_like / sizeof operator_like[0])

static void raw_expect_strings(const char *uri, resv_type_t *t, const char *tenant,
                               const char *ns, const char *key, const char *owner_tenant,
                               const char *owner_id, const char *attempt) {
  emu_raw_t r;
  emu_raw_open(&r, uri, resv_type_collection(t));
  bson_t *filter = BCON_NEW("_id", "{", "t", BCON_UTF8(tenant), "n", BCON_UTF8(ns), "k",
                            BCON_UTF8(key), "}");
  mongoc_cursor_t *c = mongoc_collection_find_with_opts(r.coll, filter, NULL, NULL);
  const bson_t *doc;
  ck_assert_msg(mongoc_cursor_next(c, &doc), "no document for key %s", key);
  bson_iter_t it;
  const struct { const char *path; const char *want; } fields[] = {
      {"_id.t", tenant}, {"_id.n", ns}, {"_id.k", key}, {"tenant_id", tenant},
      {"key", key}, {"owner.tenant_id", owner_tenant}, {"owner.id", owner_id},
      {"holds.0", attempt}};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    ck_assert_msg(bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, fields[i].path, &it),
                  "%s missing", fields[i].path);
    ck_assert_msg(BSON_ITER_HOLDS_UTF8(&it), "%s is not a string", fields[i].path);
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), fields[i].want);
  }
  ck_assert(!bson_iter_init_find(&it, doc, "holds") ||
            (bson_iter_init(&it, doc) && !bson_iter_find_descendant(&it, "holds.1", &it)));
  mongoc_cursor_destroy(c);
  bson_destroy(filter);
  emu_raw_close(&r);
}

/* Every operator-looking string, in every position at once. */
static void operators_are_data(const char *uri) {
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "sec");
  resv_answer_t a = {0};
  resv_error_t err;
  for (int i = 0; i < N_OPERATOR_LIKE; i++) {
    const char *str = operator_like[i];
    const char *other = operator_like[(i + 1) % N_OPERATOR_LIKE];
    resv_key_t key = {resv_cstr(str), resv_cstr(str), resv_cstr(str)};
    resv_owner_t owner = {resv_cstr(str), resv_cstr(str)};
    resv_owner_t rival = {resv_cstr(str), resv_cstr(other)};
    ck_assert_msg(resv_reserve(t, &key, &owner, resv_cstr(str), 60000, &a, &err), "%s: %s", str,
                  err.message);
    ck_assert_int_eq(a.status, RESV_RESERVED);
    ck_assert(test_str_is(a.owner_id, str) && test_str_is(a.owner_tenant, str));
    ck_assert(a.nholds == 1 && test_str_is(a.holds[0], str));
    if (uri) raw_expect_strings(uri, t, str, str, str, str, str, str);
    /* The operator-looking owner does not match anyone else. */
    ck_assert(resv_reserve(t, &key, &rival, resv_cstr(str), 60000, &a, &err));
    ck_assert_msg(a.status == RESV_CONFLICT, "%s: %s", str, resv_status_name(a.status));
    ck_assert(resv_abandon(t, &key, &rival, resv_cstr(str), &a, &err));
    ck_assert_int_eq(a.status, RESV_ABSENT);
    ck_assert(resv_release(t, &key, &rival, &a, &err));
    ck_assert_int_eq(a.status, RESV_ABSENT);
    ck_assert(resv_confirm(t, &key, &owner, 3, &a, &err));
    ck_assert_int_eq(a.status, RESV_CONFIRMED);
    ck_assert(resv_get(t, &key, &a, &err));
    ck_assert(a.status == RESV_CONFIRMED && test_str_is(a.owner_id, str));
    /* A key that merely looks like the last one is another key. */
    resv_key_t near = {resv_cstr(str), resv_cstr(str), resv_cstr(other)};
    ck_assert(resv_get(t, &near, &a, &err));
    ck_assert_int_eq(a.status, RESV_ABSENT);
  }
  if (uri) {
    emu_raw_t r;
    emu_raw_open(&r, uri, resv_type_collection(t));
    ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": {\"$ne\": \"format\"}}"), N_OPERATOR_LIKE);
    emu_raw_close(&r);
  }
  resv_answer_clear(&a);
  resv_store_close(s);
}

START_TEST(operator_like_strings_are_stored_literally_on_memory) { operators_are_data(NULL); }
END_TEST

START_TEST(operator_like_strings_are_stored_literally_on_mongo) {
  operators_are_data(test_mongo_uri());
}
END_TEST

static void tenants_apart(const char *uri) {
  static const char *const tenants[] = {"", "t1", "t2", "$ne", "{\"$ne\": \"\"}", ".*", "t1 "};
  const int n = (int)(sizeof tenants / sizeof tenants[0]);
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "tenants");
  resv_answer_t a = {0};
  resv_error_t err;
  char id[32];
  /* Each tenant's owner reserves the same namespace and key. */
  for (int i = 0; i < n; i++) {
    resv_key_t key = {resv_cstr(tenants[i]), resv_cstr("email"), resv_cstr("ann@example.com")};
    snprintf(id, sizeof id, "user-%d", i);
    resv_owner_t owner = {resv_cstr(tenants[i]), resv_cstr(id)};
    ck_assert(resv_reserve(t, &key, &owner, resv_cstr("a"), 60000, &a, &err));
    ck_assert_msg(a.status == RESV_RESERVED, "tenant '%s': %s", tenants[i],
                  resv_status_name(a.status));
  }
  /* Every other tenant's owner tries every call on tenant i's key. */
  for (int i = 0; i < n; i++) {
    resv_key_t key = {resv_cstr(tenants[i]), resv_cstr("email"), resv_cstr("ann@example.com")};
    for (int j = 0; j < n; j++) {
      if (i == j) continue;
      snprintf(id, sizeof id, "user-%d", j);
      resv_owner_t intruder = {resv_cstr(tenants[j]), resv_cstr(id)};
      ck_assert(resv_abandon(t, &key, &intruder, resv_cstr("a"), &a, &err));
      ck_assert_int_eq(a.status, RESV_ABSENT);
      ck_assert(resv_release(t, &key, &intruder, &a, &err));
      ck_assert_int_eq(a.status, RESV_ABSENT);
      ck_assert(resv_confirm(t, &key, &intruder, 1, &a, &err));
      ck_assert_int_eq(a.status, RESV_CONFLICT);
    }
    snprintf(id, sizeof id, "user-%d", i);
    ck_assert(resv_get(t, &key, &a, &err));
    ck_assert_int_eq(a.status, RESV_PENDING);
    ck_assert_msg(test_str_is(a.owner_id, id) && test_str_is(a.owner_tenant, tenants[i]),
                  "tenant '%s' lost its reservation", tenants[i]);
  }
  /* Releasing one tenant's leaves the others'. */
  resv_key_t key0 = {resv_cstr(tenants[1]), resv_cstr("email"), resv_cstr("ann@example.com")};
  resv_owner_t owner0 = {resv_cstr(tenants[1]), resv_cstr("user-1")};
  ck_assert(resv_release(t, &key0, &owner0, &a, &err));
  ck_assert_int_eq(a.status, RESV_RELEASED);
  for (int i = 0; i < n; i++) {
    resv_key_t key = {resv_cstr(tenants[i]), resv_cstr("email"), resv_cstr("ann@example.com")};
    ck_assert(resv_get(t, &key, &a, &err));
    ck_assert_int_eq(a.status, i == 1 ? RESV_ABSENT : RESV_PENDING);
  }
  resv_answer_clear(&a);
  resv_store_close(s);
}

START_TEST(one_tenant_never_touches_another_on_memory) { tenants_apart(NULL); }
END_TEST

START_TEST(one_tenant_never_touches_another_on_mongo) { tenants_apart(test_mongo_uri()); }
END_TEST

/* ---- passwords --------------------------------------------------------- */

static void expect_no_secret(const char *what, const char *text) {
  static const char *const secrets[] = {"s3cret", "s3@cret", "s3%40cret", "hunter2"};
  for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
    ck_assert_msg(!strstr(text, secrets[i]), "%s shows the password: %s", what, text);
}

/* Opens uri, calls, describes: no password anywhere. */
static void try_uri(const char *uri) {
  resv_options_t o = {.uri = uri, .timeout_ms = 800, .threads = 2,
                      .log_level = RESV_LOG_DEBUG};
  resv_error_t err = {0};
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) {
    expect_no_secret("open's error", err.message);
    return;
  }
  char text[512];
  resv_store_describe(s, text, sizeof text);
  expect_no_secret("describe", text);
  resv_type_t *t = test_fresh_type(s, "pw");
  resv_answer_t a = {0};
  resv_key_t key = test_key("email", "k");
  resv_owner_t owner = test_owner("", "o");
  memset(&err, 0, sizeof err);
  if (!resv_reserve(t, &key, &owner, resv_cstr("a"), 1000, &a, &err))
    expect_no_secret("reserve's error", err.message);
  resv_answer_clear(&a);
  resv_store_close(s);
}

START_TEST(a_password_never_shows_in_errors_describe_or_logs) {
  char uri[512];
  const char *test_uri = test_mongo_uri();
  const char *hosts = strstr(test_uri, "://") + 3;
  /* Every driver line, through resv's handler, to stderr: kept here. */
  test_stderr_begin();
  try_uri("mongodb://ann:s3cret@127.0.0.1:1/");
  try_uri("mongodb://ann:s3%40cret@127.0.0.1:1/app?authSource=admin");
  try_uri("mongodb://ann:hunter2@[::1/?x=");
  try_uri("mongodb://ann:s3cret@127.0.0.1:1/?authMechanism=NOPE");
  /* Reachable: the emulator has no authentication, so the handshake
   * fails after connecting, the error path a wrong password takes. */
  snprintf(uri, sizeof uri, "mongodb://ann:s3cret@%s", hosts);
  try_uri(uri);
  snprintf(uri, sizeof uri, "mongodb://ann:s3%%40cret@%s", hosts);
  try_uri(uri);
  const char *logged = test_stderr_end();
  fprintf(stderr, "security: %zu bytes of driver log checked for the password\n",
          strlen(logged));
  ck_assert_msg(strstr(logged, "resv: mongodb "), "no driver line: %s", logged);
  expect_no_secret("the driver's log", logged);
}
END_TEST

Suite *security_suite(void) {
  const TTest *tests[] = {
      operator_like_strings_are_stored_literally_on_memory,
      operator_like_strings_are_stored_literally_on_mongo,
      one_tenant_never_touches_another_on_memory, one_tenant_never_touches_another_on_mongo,
      a_password_never_shows_in_errors_describe_or_logs, NULL};
  return test_suite("security", "security", 30, NULL, NULL, tests);
}
