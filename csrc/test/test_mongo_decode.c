/* test_mongo_decode.c: the MongoDB backend's pieces that need no server.
 *
 * mongo_decode.c must read exactly the format-1 layout and answer
 * RESV_EFORMAT for anything else, never crash: each malformed case below
 * breaks one rule of docs/design.md section 3, and a fuzz loop flips bytes of a good
 * document. mongo_error.c must map driver errors onto docs/design.md section 8 and
 * keep the URI's password out of every message. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "mongo_internal.h"
#include "tests.h"


static const char *const pending_json =
    "{\"_id\": {\"t\": \"t1\", \"n\": \"email\", \"k\": \"ann\"},"
    " \"tenant_id\": \"t1\", \"key\": \"ann\","
    " \"owner\": {\"tenant_id\": \"t2\", \"id\": \"u1\"},"
    " \"expires_at\": {\"$numberLong\": \"1500\"},"
    " \"holds\": [\"a1\", \"a2\"]}";

static const char *const confirmed_json =
    "{\"_id\": {\"t\": \"\", \"n\": \"email\", \"k\": \"ann\"},"
    " \"tenant_id\": \"\", \"key\": \"ann\","
    " \"owner\": {\"tenant_id\": \"\", \"id\": \"u1\"},"
    " \"expires_at\": null, \"version\": {\"$numberLong\": \"7\"}}";

static bson_t *from_json(const char *json) {
  bson_error_t error;
  bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &error);
  ck_assert_msg(b != NULL, "bad test JSON: %s: %s", error.message, json);
  return b;
}

START_TEST(test_pending_document_decodes) {
  bson_t *b = from_json(pending_json);
  resv__doc_t d;
  resv_error_t err;
  ck_assert_msg(resv__doc_decode(b, &d, &err), "%s", err.message);
  ck_assert_int_eq(d.state, RESV_STATE_PENDING);
  ck_assert(test_str_is(d.key.tenant, "t1"));
  ck_assert(test_str_is(d.key.ns, "email"));
  ck_assert(test_str_is(d.key.key, "ann"));
  ck_assert(test_str_is(d.owner.tenant, "t2"));
  ck_assert(test_str_is(d.owner.id, "u1"));
  ck_assert_int_eq(d.expires_at, 1500);
  ck_assert_uint_eq(d.nholds, 2);
  ck_assert(test_str_is(d.holds[0], "a1"));
  ck_assert(test_str_is(d.holds[1], "a2"));

  resv_answer_t a = {0};
  ck_assert(resv__doc_answer(&d, RESV_PENDING, true, &a, &err));
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert_int_eq(a.expires_at, 1500);
  ck_assert_int_eq(a.version, 0);
  ck_assert(test_str_is(a.owner_id, "u1"));
  static const char *const holds[] = {"a1", "a2"};
  ck_assert(test_holds_are(&a, 2, holds));
  ck_assert(resv__doc_answer(&d, RESV_CONFLICT, false, &a, &err));
  ck_assert_uint_eq(a.nholds, 0);
  resv_answer_clear(&a);
  resv__doc_free(&d);
  bson_destroy(b);
}
END_TEST

START_TEST(test_confirmed_document_decodes) {
  bson_t *b = from_json(confirmed_json);
  resv__doc_t d;
  resv_error_t err;
  ck_assert_msg(resv__doc_decode(b, &d, &err), "%s", err.message);
  ck_assert_int_eq(d.state, RESV_STATE_CONFIRMED);
  ck_assert_int_eq(d.version, 7);
  ck_assert_uint_eq(d.nholds, 0);
  resv_owner_t me = test_owner("", "u1"), other = test_owner("x", "u1");
  ck_assert(resv__doc_owned_by(&d, &me));
  ck_assert(!resv__doc_owned_by(&d, &other));
  resv__doc_free(&d);
  bson_destroy(b);
}
END_TEST

START_TEST(test_empty_holds_decode) {
  /* abandon's pull can leave [] behind when its delete never runs */
  bson_t *b = from_json(
      "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\","
      " \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"},"
      " \"expires_at\": {\"$numberLong\": \"5\"}, \"holds\": []}");
  resv__doc_t d;
  resv_error_t err;
  ck_assert_msg(resv__doc_decode(b, &d, &err), "%s", err.message);
  ck_assert_uint_eq(d.nholds, 0);
  resv__doc_free(&d);
  bson_destroy(b);
}
END_TEST

/* A pending document with n holds "attempt-<i>"; hold dup_of (when below
 * n) is written again as the last one, making n + 1. */
static bson_t *pending_with_holds(size_t n, size_t dup_of) {
  bson_t *b = bson_new(), sub;
  char name[16], hold[32];
  const char *key;

  BSON_APPEND_DOCUMENT_BEGIN(b, "_id", &sub);
  BSON_APPEND_UTF8(&sub, "t", "");
  BSON_APPEND_UTF8(&sub, "n", "email");
  BSON_APPEND_UTF8(&sub, "k", "ann");
  bson_append_document_end(b, &sub);
  BSON_APPEND_UTF8(b, "tenant_id", "");
  BSON_APPEND_UTF8(b, "key", "ann");
  BSON_APPEND_DOCUMENT_BEGIN(b, "owner", &sub);
  BSON_APPEND_UTF8(&sub, "tenant_id", "");
  BSON_APPEND_UTF8(&sub, "id", "u1");
  bson_append_document_end(b, &sub);
  BSON_APPEND_INT64(b, "expires_at", 1500);
  BSON_APPEND_ARRAY_BEGIN(b, "holds", &sub);
  for (size_t i = 0; i <= n; i++) {
    if (i == n && dup_of >= n)
      break;
    bson_uint32_to_string((uint32_t)i, &key, name, sizeof name);
    snprintf(hold, sizeof hold, "attempt-%zu", i == n ? dup_of : i);
    BSON_APPEND_UTF8(&sub, key, hold);
  }
  bson_append_array_end(b, &sub);
  return b;
}

/* The least CPU time this thread spent decoding doc, over `runs` runs:
 * the thread's own clock, and the least of several, so other processes on
 * a loaded machine hardly show. */
static double decode_cpu_seconds(const bson_t *doc, int runs) {
  double best = 1e9;
  for (int r = 0; r < runs; r++) {
    struct timespec t0, t1;
    resv__doc_t d;
    resv_error_t err;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    ck_assert_msg(resv__doc_decode(doc, &d, &err), "%s", err.message);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    resv__doc_free(&d);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (s < best)
      best = s;
  }
  return best;
}

START_TEST(test_a_duplicate_hold_anywhere_is_format_error) {
  static const size_t dup_of[] = {0, 1, 500, 998, 999};
  for (size_t i = 0; i < sizeof dup_of / sizeof dup_of[0]; i++) {
    bson_t *b = pending_with_holds(1000, dup_of[i]);
    resv__doc_t d;
    resv_error_t err;
    ck_assert_msg(!resv__doc_decode(b, &d, &err), "duplicate of hold %zu not seen",
                  dup_of[i]);
    ck_assert_int_eq(err.code, RESV_EFORMAT);
    ck_assert_msg(strstr(err.message, "duplicate") != NULL, "%s", err.message);
    bson_destroy(b);
  }
}
END_TEST

START_TEST(test_decoding_holds_costs_n_log_n_not_n_squared) {
  /* Ten times the holds must cost about ten times the time (n log n: 12.7
   * times), not a hundred (the pairwise duplicate check was quadratic:
   * 100,000 holds took 19 s). */
  bson_t *small = pending_with_holds(5000, SIZE_MAX);
  bson_t *large = pending_with_holds(50000, SIZE_MAX);
  double ts = decode_cpu_seconds(small, 7), tl = decode_cpu_seconds(large, 3);
  ck_assert_msg(tl < 30 * ts, "5,000 holds: %.6f s, 50,000 holds: %.6f s: ratio %.1f, "
                "want under 30", ts, tl, tl / ts);
  bson_destroy(small);
  bson_destroy(large);
}
END_TEST

/* One malformed document per rule of the layout. */
static const char *const malformed[] = {
    "{}",
    "{\"_id\": \"x\"}",
    "{\"_id\": \"format\", \"format\": 1}",
    /* _id's fields out of order, missing, extra, not strings */
    "{\"_id\": {\"n\": \"e\", \"t\": \"\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\", \"x\": 1}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    "{\"_id\": {\"t\": 1, \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    /* tenant_id / key not the _id's, missing, swapped */
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"t\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"b\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"key\": \"a\", \"tenant_id\": \"\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    /* empty namespace or key */
    "{\"_id\": {\"t\": \"\", \"n\": \"\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    /* owner out of order, missing, empty id, a string */
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"id\": \"u\", \"tenant_id\": \"\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": \"u\", \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}}",
    /* expires_at missing, a string, a double */
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"holds\": [\"x\"]}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": \"soon\", \"holds\": [\"x\"]}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": 1.5, \"holds\": [\"x\"]}",
    /* pending: holds missing, not an array, a number in it, a duplicate, a version too */
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": {\"$numberLong\": \"5\"}}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": {\"$numberLong\": \"5\"}, \"holds\": \"x\"}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": {\"$numberLong\": \"5\"}, \"holds\": [\"x\", 3]}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": {\"$numberLong\": \"5\"}, \"holds\": [\"x\", \"x\"]}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": {\"$numberLong\": \"5\"}, \"holds\": [\"\"]}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": {\"$numberLong\": \"5\"}, \"holds\": [\"x\"], \"version\": {\"$numberLong\": \"1\"}}",
    /* confirmed: version missing, a double, negative, holds instead */
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"version\": 2.0}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"-1\"}}",
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"holds\": [\"x\"]}",
    /* an unknown field at the end */
    "{\"_id\": {\"t\": \"\", \"n\": \"e\", \"k\": \"a\"}, \"tenant_id\": \"\", \"key\": \"a\", \"owner\": {\"tenant_id\": \"\", \"id\": \"u\"}, \"expires_at\": null, \"version\": {\"$numberLong\": \"1\"}, \"note\": \"hi\"}",
};

START_TEST(test_malformed_document_is_format_error) {
  bson_t *b = from_json(malformed[_i]);
  resv__doc_t d;
  resv_error_t err = {0};
  ck_assert_msg(!resv__doc_decode(b, &d, &err), "decoded: %s", malformed[_i]);
  ck_assert_msg(err.code == RESV_EFORMAT, "case %d: code %d", _i, err.code);
  ck_assert_ptr_null(d.holds);
  bson_destroy(b);
}
END_TEST

/* Strings the JSON parser cannot spell: invalid UTF-8 and a NUL byte. */
START_TEST(test_bad_string_bytes_are_format_error) {
  static const char *const bad[] = {"\xc3\x28", "a\0b", "\xed\xa0\x80"};
  static const int lens[] = {2, 3, 3};
  for (int i = 0; i < 3; i++) {
    for (int where = 0; where < 2; where++) {
      bson_t b = BSON_INITIALIZER, id, owner, holds;
      bson_append_document_begin(&b, "_id", -1, &id);
      BSON_APPEND_UTF8(&id, "t", "");
      BSON_APPEND_UTF8(&id, "n", "e");
      BSON_APPEND_UTF8(&id, "k", "a");
      bson_append_document_end(&b, &id);
      BSON_APPEND_UTF8(&b, "tenant_id", "");
      BSON_APPEND_UTF8(&b, "key", "a");
      bson_append_document_begin(&b, "owner", -1, &owner);
      BSON_APPEND_UTF8(&owner, "tenant_id", "");
      if (where == 0)
        bson_append_utf8(&owner, "id", -1, bad[i], lens[i]);
      else
        BSON_APPEND_UTF8(&owner, "id", "u");
      bson_append_document_end(&b, &owner);
      BSON_APPEND_INT64(&b, "expires_at", 5);
      bson_append_array_begin(&b, "holds", -1, &holds);
      if (where == 1)
        bson_append_utf8(&holds, "0", -1, bad[i], lens[i]);
      else
        BSON_APPEND_UTF8(&holds, "0", "x");
      bson_append_array_end(&b, &holds);
      resv__doc_t d;
      resv_error_t err = {0};
      ck_assert_msg(!resv__doc_decode(&b, &d, &err), "case %d/%d", i, where);
      ck_assert_int_eq(err.code, RESV_EFORMAT);
      bson_destroy(&b);
    }
  }
}
END_TEST

/* Flipping bytes of a good document gives a good document or RESV_EFORMAT,
 * never a crash or a read out of bounds (run under ASan and valgrind). */
START_TEST(test_corrupted_bytes_never_crash) {
  bson_t *good = from_json(pending_json);
  uint32_t len = good->len;
  uint8_t *bytes = bson_malloc(len);
  uint64_t rng = 0x9e3779b97f4a7c15ULL;
  int decoded = 0, refused = 0;

  for (int round = 0; round < 20000; round++) {
    memcpy(bytes, bson_get_data(good), len);
    for (int flips = 1 + round % 3; flips > 0; flips--) {
      rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
      bytes[4 + rng % (len - 5)] = (uint8_t)(rng >> 32);
    }
    bson_t b;
    if (!bson_init_static(&b, bytes, len))
      continue;
    resv__doc_t d;
    resv_error_t err = {0};
    if (resv__doc_decode(&b, &d, &err)) {
      decoded++;
      resv__doc_free(&d);
    } else {
      ck_assert_int_eq(err.code, RESV_EFORMAT);
      refused++;
    }
  }
  ck_assert_int_gt(refused, 1000);
  bson_free(bytes);
  bson_destroy(good);
}
END_TEST

/* ---- errors ---------------------------------------------------------- */

static bson_error_t make_error(uint32_t domain, uint32_t code,
                               const char *message) {
  bson_error_t e;
  memset(&e, 0, sizeof e);
  e.domain = domain;
  e.code = code;
  bson_strncpy(e.message, message, sizeof e.message);
  return e;
}

START_TEST(test_duplicate_key_is_server_11000_only) {
  bson_error_t dup = make_error(MONGOC_ERROR_SERVER, 11000, "E11000");
  bson_error_t wc = make_error(MONGOC_ERROR_WRITE_CONCERN, 11000, "E11000");
  bson_error_t other = make_error(MONGOC_ERROR_SERVER, 11001, "x");
  ck_assert(resv__mongo_is_duplicate(&dup));
  ck_assert(!resv__mongo_is_duplicate(&wc));
  ck_assert(!resv__mongo_is_duplicate(&other));
}
END_TEST

START_TEST(test_errors_map_to_spec_codes) {
  resv__mongo_t m;
  resv_error_t err;
  int64_t future = resv__monotonic_ms() + 60000, past = resv__monotonic_ms() - 1;
  memset(&m, 0, sizeof m);

  bson_error_t e = make_error(MONGOC_ERROR_SERVER, 13, "not authorized");
  ck_assert(!resv__mongo_fail(&m, &err, &e, future, "reserve"));
  ck_assert_int_eq(err.code, RESV_ESERVER);
  ck_assert_int_eq(err.server_code, 13);
  ck_assert_msg(strstr(err.message, "not authorized"), "%s", err.message);

  e = make_error(MONGOC_ERROR_SERVER, 50, "operation exceeded time limit");
  ck_assert(!resv__mongo_fail(&m, &err, &e, future, "get"));
  ck_assert_int_eq(err.code, RESV_ETIMEOUT);

  e = make_error(MONGOC_ERROR_SERVER_SELECTION, MONGOC_ERROR_SERVER_SELECTION_FAILURE,
                 "No suitable servers found");
  ck_assert(!resv__mongo_fail(&m, &err, &e, future, "get"));
  ck_assert_int_eq(err.code, RESV_EUNAVAILABLE);
  /* No server could be selected: unavailable, also once the selection
   * waited out the deadline. */
  ck_assert(!resv__mongo_fail(&m, &err, &e, past, "get"));
  ck_assert_int_eq(err.code, RESV_EUNAVAILABLE);

  e = make_error(MONGOC_ERROR_STREAM, MONGOC_ERROR_STREAM_SOCKET, "socket error");
  ck_assert(!resv__mongo_fail(&m, &err, &e, future, "get"));
  ck_assert_int_eq(err.code, RESV_EUNAVAILABLE);
  ck_assert(!resv__mongo_fail(&m, &err, &e, past, "get"));
  ck_assert_int_eq(err.code, RESV_ETIMEOUT);

  /* docs/design.md section 12: a primary stepping down or a node shutting down is
   * unavailable (timeout once the deadline passed), a server out of time
   * a timeout; the server's code stays. */
  static const uint32_t unavailable[] = {10107, 189, 11602, 11600, 91, 13435, 13436};
  for (size_t i = 0; i < sizeof unavailable / sizeof unavailable[0]; i++) {
    e = make_error(MONGOC_ERROR_SERVER, unavailable[i], "not primary");
    ck_assert(!resv__mongo_fail(&m, &err, &e, future, "reserve"));
    ck_assert_msg(err.code == RESV_EUNAVAILABLE, "%u: %s", unavailable[i],
                  resv_code_name(err.code));
    ck_assert_int_eq(err.server_code, (int32_t)unavailable[i]);
    ck_assert(!resv__mongo_fail(&m, &err, &e, past, "reserve"));
    ck_assert_int_eq(err.code, RESV_ETIMEOUT);
    e = make_error(MONGOC_ERROR_WRITE_CONCERN, unavailable[i], "shutting down");
    ck_assert(!resv__mongo_fail(&m, &err, &e, future, "reserve"));
    ck_assert_int_eq(err.code, RESV_EUNAVAILABLE);
  }
  e = make_error(MONGOC_ERROR_SERVER, 262, "exceeded time limit");
  ck_assert(!resv__mongo_fail(&m, &err, &e, future, "reserve"));
  ck_assert_int_eq(err.code, RESV_ETIMEOUT);
  ck_assert_int_eq(err.server_code, 262);
  /* Any error the server labels RetryableWriteError. */
  bson_t *reply = BCON_NEW("ok", BCON_INT32(0), "code", BCON_INT32(9001),
                           "errorLabels", "[", "RetryableWriteError", "]");
  e = make_error(MONGOC_ERROR_SERVER, 9001, "socket exception");
  ck_assert(!resv__mongo_fail(&m, &err, &e, future, "reserve"));
  ck_assert_int_eq(err.code, RESV_ESERVER);
  ck_assert(!resv__mongo_fail_reply(&m, &err, &e, reply, future, "reserve"));
  ck_assert_int_eq(err.code, RESV_EUNAVAILABLE);
  ck_assert_int_eq(err.server_code, 9001);
  bson_destroy(reply);

  /* docs/design.md section 12: a write concern timeout is a timeout. */
  e = make_error(MONGOC_ERROR_WRITE_CONCERN, 64, "waiting for replication timed out");
  ck_assert(!resv__mongo_fail(&m, &err, &e, future, "confirm"));
  ck_assert_int_eq(err.code, RESV_ETIMEOUT);
  ck_assert_int_eq(err.server_code, 64);
}
END_TEST

START_TEST(test_password_is_scrubbed) {
  resv__mongo_t m;
  resv_error_t err;
  char secret[] = "p@ss:w", raw[] = "p%40ss%3Aw", one[] = "a";
  memset(&m, 0, sizeof m);
  m.secret = secret;
  m.secret_raw = raw;
  bson_error_t e = make_error(MONGOC_ERROR_CLIENT, MONGOC_ERROR_CLIENT_AUTHENTICATE,
                              "auth failed for mongodb://ann:p%40ss%3Aw@h/ (p@ss:w)");
  ck_assert(!resv__mongo_fail(&m, &err, &e, 0, "open"));
  ck_assert_msg(!strstr(err.message, "p@ss:w") && !strstr(err.message, "p%40ss"),
                "%s", err.message);
  ck_assert_msg(strstr(err.message, "ann:***@h/"), "%s", err.message);

  char short_secret[] = "xx a xx";
  m.secret = one;
  m.secret_raw = NULL;
  resv__mongo_scrub(&m, short_secret); /* cut where it would grow */
  ck_assert_msg(strncmp(short_secret, "xx ***", 6) == 0 &&
                    strlen(short_secret) <= 7,
                "%s", short_secret);
}
END_TEST

START_TEST(test_bad_uri_is_invalid_without_password) {
  resv_options_t o = {.uri = "mongodb://ann:hunter22@[::1/?x=", .timeout_ms = 1000};
  resv_error_t err;
  /* The driver's line on the bad port goes into the error, not to stderr. */
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_ptr_null(s);
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(!strstr(err.message, "hunter22"), "%s", err.message);
}
END_TEST

Suite *mongo_decode_suite(void) {
  Suite *s = suite_create("mongo_decode");
  TCase *tc = tcase_create("decode");
  tcase_add_test(tc, test_pending_document_decodes);
  tcase_add_test(tc, test_confirmed_document_decodes);
  tcase_add_test(tc, test_empty_holds_decode);
  tcase_add_test(tc, test_a_duplicate_hold_anywhere_is_format_error);
  tcase_add_test(tc, test_decoding_holds_costs_n_log_n_not_n_squared);
  tcase_add_loop_test(tc, test_malformed_document_is_format_error, 0,
                      (int)(sizeof malformed / sizeof malformed[0]));
  tcase_add_test(tc, test_bad_string_bytes_are_format_error);
  tcase_add_test(tc, test_corrupted_bytes_never_crash);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_add_test(tc, test_duplicate_key_is_server_11000_only);
  tcase_add_test(tc, test_errors_map_to_spec_codes);
  tcase_add_test(tc, test_password_is_scrubbed);
  tcase_add_test(tc, test_bad_uri_is_invalid_without_password);
  suite_add_tcase(s, tc);
  return s;
}
