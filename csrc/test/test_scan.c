/* test_scan.c: resv_type_scan (docs/design.md section 13: the `resv` command's ls
 * and check stand on it), on the file store and on MongoDB (the emulator
 * or MONGODB_URI).
 *
 * Paged with a small limit, a scan sees every reservation of the type
 * exactly once, with get's status, ends with an empty cursor, and reads
 * the format record on its first page; a type never used scans empty
 * with format 0 and stays unused (a scan writes nothing); bad limits and
 * cursors are invalid; the memory store has no scan. resv_store_types
 * lists the types that hold something, sorted, and no type never used.
 * resv_type_put writes a free key exactly as given, answers same for the
 * same reservation and different (writing nothing) for another. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tests.h"

enum { FILE_STORE, MONGO };

typedef struct opened {
  resv_store_t *store;
  char dir[256];
} opened_t;

static void open_kind(opened_t *o, int kind) {
  o->dir[0] = '\0';
  if (kind == FILE_STORE) {
    test_temp_dir(o->dir, sizeof o->dir);
    o->store = test_open_file(o->dir, RESV_SYNC_PROCESS);
  } else {
    o->store = test_open(test_mongo_uri());
  }
}

static void close_kind(opened_t *o) {
  resv_store_close(o->store);
  if (o->dir[0]) test_remove_dir(o->dir);
}

#define KEYS 25

START_TEST(paged_scan_sees_every_reservation_once) {
  opened_t o;
  open_kind(&o, _i);
  resv_type_t *t = test_fresh_type(o.store, "scan");
  resv_answer_t a = {0};
  char key[32];
  for (int i = 0; i < KEYS; i++) {
    snprintf(key, sizeof key, "k%02d", i);
    if (i % 5 == 0)
      test_confirm(t, key, "owner", i, &a);
    else
      test_reserve(t, key, "owner", "a1", i % 5 == 1 ? 1 : 3600000, &a);
  }
  resv_answer_clear(&a);
  resv_store_set_time(o.store, resv_store_now(o.store) + 10);

  int seen[KEYS] = {0};
  int pages = 0, total = 0;
  char cursor[1024];
  size_t cursor_len = 0;
  resv_scan_t s = {0};
  resv_error_t err;
  do {
    ck_assert_msg(resv_type_scan(t, cursor_len, cursor, 7, &s, &err), "scan: %s", err.message);
    ck_assert_uint_le(s.count, 7);
    if (pages == 0) ck_assert_int_eq(s.format, 1);
    for (size_t i = 0; i < s.count; i++) {
      const resv_scan_entry_t *e = &s.entries[i];
      ck_assert_int_ne(e->status, RESV_NONE);
      ck_assert(test_str_is(e->ns, "email"));
      ck_assert(test_str_is(e->owner_id, "owner"));
      int k = 0;
      ck_assert_int_eq(sscanf(e->key.ptr, "k%d", &k), 1);
      ck_assert(k >= 0 && k < KEYS);
      seen[k]++;
      int32_t want = k % 5 == 0 ? RESV_CONFIRMED : k % 5 == 1 ? RESV_EXPIRED : RESV_PENDING;
      ck_assert_int_eq(e->status, want);
      if (want == RESV_CONFIRMED) {
        ck_assert_int_eq(e->version, k);
      } else {
        ck_assert_uint_eq(e->nholds, 1);
        ck_assert(test_str_is(e->holds[0], "a1"));
      }
      total++;
    }
    ck_assert_uint_lt(s.next.len, sizeof cursor);
    memcpy(cursor, s.next.ptr ? s.next.ptr : "", s.next.len);
    cursor_len = s.next.len;
    pages++;
  } while (cursor_len);
  resv_scan_clear(&s);
  ck_assert_int_eq(total, KEYS);
  for (int k = 0; k < KEYS; k++) ck_assert_int_eq(seen[k], 1);
  ck_assert_int_eq(pages, 4);
  close_kind(&o);
}
END_TEST

START_TEST(a_scan_writes_nothing) {
  opened_t o;
  open_kind(&o, _i);
  resv_type_t *t = test_fresh_type(o.store, "scanunused");
  resv_scan_t s = {0};
  resv_error_t err;
  for (int round = 0; round < 2; round++) {
    ck_assert_msg(resv_type_scan(t, 0, NULL, 10, &s, &err), "scan: %s", err.message);
    ck_assert_int_eq(s.format, 0);
    ck_assert_uint_eq(s.count, 0);
    ck_assert_uint_eq(s.next.len, 0);
  }
  resv_scan_clear(&s);
  close_kind(&o);
}
END_TEST

START_TEST(bad_limits_and_cursors_are_invalid) {
  opened_t o;
  open_kind(&o, _i);
  resv_type_t *t = test_fresh_type(o.store, "scanbad");
  resv_answer_t a = {0};
  test_reserve(t, "k", "owner", "a1", 3600000, &a);
  resv_answer_clear(&a);
  resv_scan_t s = {0};
  resv_error_t err;
  ck_assert(!resv_type_scan(t, 0, NULL, 0, &s, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert(!resv_type_scan(t, 0, NULL, 10001, &s, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  char junk[600];
  memset(junk, 'x', sizeof junk);
  ck_assert(!resv_type_scan(t, sizeof junk, junk, 10, &s, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_uint_eq(s.count, 0);
  resv_scan_clear(&s);
  close_kind(&o);
}
END_TEST

START_TEST(the_memory_store_has_no_scan) {
  resv_store_t *store = test_open(NULL);
  resv_type_t *t = test_fresh_type(store, "scanmem");
  resv_scan_t s = {0};
  resv_error_t err;
  ck_assert(!resv_type_scan(t, 0, NULL, 10, &s, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  resv_scan_clear(&s);
  resv_store_close(store);
}
END_TEST

START_TEST(the_store_lists_its_types_sorted) {
  opened_t o;
  open_kind(&o, _i);
  resv_type_t *t = test_fresh_type(o.store, "scanlist");
  resv_type_t *unused = test_fresh_type(o.store, "scanlistunused");
  resv_answer_t a = {0};
  test_reserve(t, "k", "owner", "a1", 3600000, &a);
  resv_answer_clear(&a);
  resv_type_names_t names = {0};
  resv_error_t err;
  ck_assert_msg(resv_store_types(o.store, &names, &err), "types: %s", err.message);
  int found = 0;
  for (size_t i = 0; i < names.count; i++) {
    const resv_type_name_t *n = &names.names[i];
    if (test_str_is(n->collection, resv_type_collection(t))) {
      found++;
      ck_assert(test_str_is(n->context, "test"));
      ck_assert_uint_eq(n->aggregate.len, strlen(resv_type_collection(t)) - strlen("wow_reservation__test__"));
    }
    ck_assert(!test_str_is(n->collection, resv_type_collection(unused)));
    if (i) {
      size_t m = n->collection.len < names.names[i - 1].collection.len
                     ? n->collection.len : names.names[i - 1].collection.len;
      ck_assert_int_ge(memcmp(n->collection.ptr, names.names[i - 1].collection.ptr, m), 0);
    }
  }
  ck_assert_int_eq(found, 1);
  resv_type_names_clear(&names);
  close_kind(&o);
}
END_TEST

START_TEST(put_writes_a_free_key_only) {
  opened_t o;
  open_kind(&o, _i);
  resv_type_t *t = test_fresh_type(o.store, "scanput");
  resv_answer_t a = {0};
  test_confirm(t, "taken", "someone", 3, &a);
  resv_str_t holds[] = {resv_cstr("h1"), resv_cstr("h2")};
  resv_scan_entry_t e = {.status = RESV_PENDING, .state = RESV_STATE_PENDING,
                         .expires_at = INT64_C(4102444800000), .tenant = resv_cstr(""),
                         .ns = resv_cstr("email"), .key = resv_cstr("free"),
                         .owner_tenant = resv_cstr("t1"), .owner_id = resv_cstr("o1"),
                         .holds = holds, .nholds = 2};
  int32_t outcome = 0;
  resv_error_t err;
  ck_assert_msg(resv_type_put(t, &e, &outcome, &err), "put: %s", err.message);
  ck_assert_int_eq(outcome, RESV_PUT_ADDED);
  test_get(t, "free", &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert_int_eq(a.expires_at, e.expires_at);
  ck_assert(test_holds_are(&a, 2, (const char *const[]){"h1", "h2"}));
  ck_assert(test_str_is(a.owner_tenant, "t1"));
  ck_assert(resv_type_put(t, &e, &outcome, &err));
  ck_assert_int_eq(outcome, RESV_PUT_SAME);
  e.nholds = 1; /* the same key, another reservation: left alone */
  ck_assert(resv_type_put(t, &e, &outcome, &err));
  ck_assert_int_eq(outcome, RESV_PUT_DIFFERENT);
  test_get(t, "free", &a);
  ck_assert_uint_eq(a.nholds, 2);
  resv_scan_entry_t c = {.status = RESV_CONFIRMED, .state = RESV_STATE_CONFIRMED,
                         .version = 9, .tenant = resv_cstr(""), .ns = resv_cstr("email"),
                         .key = resv_cstr("taken"), .owner_tenant = resv_cstr(""),
                         .owner_id = resv_cstr("me")};
  ck_assert(resv_type_put(t, &c, &outcome, &err));
  ck_assert_int_eq(outcome, RESV_PUT_DIFFERENT);
  test_get(t, "taken", &a);
  ck_assert(test_str_is(a.owner_id, "someone"));
  ck_assert_int_eq(a.version, 3);
  c.owner_id = resv_cstr("");
  ck_assert(!resv_type_put(t, &c, &outcome, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  c.owner_id = resv_cstr("me");
  c.status = RESV_NONE;
  ck_assert(!resv_type_put(t, &c, &outcome, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  resv_answer_clear(&a);
  close_kind(&o);
}
END_TEST

Suite *scan_suite(void) {
  const test_entry_t tests[] = {
      {paged_scan_sees_every_reservation_once, FILE_STORE, MONGO + 1},
      {a_scan_writes_nothing, FILE_STORE, MONGO + 1},
      {bad_limits_and_cursors_are_invalid, FILE_STORE, MONGO + 1},
      {the_store_lists_its_types_sorted, FILE_STORE, MONGO + 1},
      {put_writes_a_free_key_only, FILE_STORE, MONGO + 1},
      {the_memory_store_has_no_scan, 0, 0},
      {NULL, 0, 0}};
  return test_suite_loops("scan", "scan", 60, NULL, NULL, tests);
}
