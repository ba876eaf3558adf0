/* test_no_create.c: the no_create option (the resv command opens its
 * stores with it), on the file store and on MongoDB (the emulator or
 * MONGODB_URI).
 *
 * A store opened with no_create makes nothing: a file store's directory
 * that is missing, or holds no store, is refused at open (invalid, naming
 * the path) and stays as it was; a call or a put on a type that does not
 * exist answers invalid naming the type, and the type is still not listed
 * afterwards (no database, no collection). A type that exists works as
 * usual, reads and writes. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "tests.h"

enum { FILE_STORE, MONGO };

/* A store opened as usual (it makes what it needs) and one with
 * no_create on the same directory or database. */
typedef struct pair {
  resv_store_t *maker;
  resv_store_t *looker;
  char dir[256];
} pair_t;

static void open_pair(pair_t *p, int kind) {
  resv_options_t o = {.threads = 2, .timeout_ms = 5000, .no_create = 1};
  resv_error_t err;
  p->dir[0] = '\0';
  if (kind == FILE_STORE) {
    test_temp_dir(p->dir, sizeof p->dir);
    p->maker = test_open_file(p->dir, RESV_SYNC_PROCESS);
    o.path = p->dir;
    o.sync = RESV_SYNC_PROCESS; /* one environment of a process has one sync */
  } else {
    p->maker = test_open(test_mongo_uri());
    o.uri = test_mongo_uri();
  }
  p->looker = resv_store_open(&o, &err);
  ck_assert_msg(p->looker != NULL, "open with no_create: %s", err.message);
}

static void close_pair(pair_t *p) {
  resv_store_close(p->looker);
  resv_store_close(p->maker);
  if (p->dir[0]) test_remove_dir(p->dir);
}

/* True when the store lists a type of that collection. */
static bool listed(resv_store_t *s, const char *collection) {
  resv_type_names_t names = {0};
  resv_error_t err;
  ck_assert_msg(resv_store_types(s, &names, &err), "types: %s", err.message);
  bool found = false;
  for (size_t i = 0; i < names.count; i++)
    found = found || test_str_is(names.names[i].collection, collection);
  resv_type_names_clear(&names);
  return found;
}

static bool empty_directory(const char *path) {
  char data[300];
  snprintf(data, sizeof data, "%s/data.mdb", path);
  struct stat st;
  return stat(data, &st) != 0;
}

START_TEST(a_missing_or_empty_directory_is_refused_and_left_alone) {
  char dir[256], missing[300];
  test_temp_dir(dir, sizeof dir);
  snprintf(missing, sizeof missing, "%s/none", dir);
  resv_options_t o = {.path = missing, .no_create = 1};
  resv_error_t err;
  ck_assert(resv_store_open(&o, &err) == NULL);
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, missing) != NULL, "%s", err.message);
  struct stat st;
  ck_assert_int_ne(stat(missing, &st), 0); /* not made */
  o.path = dir; /* exists, holds nothing */
  ck_assert(resv_store_open(&o, &err) == NULL);
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, "no file store in") != NULL, "%s", err.message);
  ck_assert(empty_directory(dir));
  test_remove_dir(dir);
}
END_TEST

START_TEST(a_missing_type_is_invalid_and_not_made) {
  pair_t p;
  open_pair(&p, _i);
  resv_type_t *t = test_fresh_type(p.looker, "nocreate");
  const char *collection = resv_type_collection(t);
  char name[128];
  snprintf(name, sizeof name, "no type test/%s", collection + strlen("wow_reservation__test__"));
  resv_answer_t a = {0};
  resv_error_t err;
  resv_request_t get = {.op = RESV_OP_GET, .key = test_key("email", "x")};
  resv_request_t reserve = {.op = RESV_OP_RESERVE, .key = test_key("email", "x"),
                            .owner = test_owner("", "o"), .attempt = resv_cstr("a"),
                            .ttl_ms = 60000};
  resv_request_t sweep = {.op = RESV_OP_SWEEP};
  const resv_request_t *calls[] = {&get, &reserve, &sweep};
  for (size_t i = 0; i < 3; i++) {
    ck_assert(!resv_call(t, calls[i], &a, &err));
    ck_assert_int_eq(err.code, RESV_EINVALID);
    ck_assert_msg(strstr(err.message, name) != NULL, "%s", err.message);
    ck_assert_msg(strstr(err.message, collection) != NULL, "%s", err.message);
  }
  resv_scan_entry_t e = {.status = RESV_CONFIRMED, .state = RESV_STATE_CONFIRMED,
                         .version = 1, .tenant = resv_cstr(""), .ns = resv_cstr("email"),
                         .key = resv_cstr("x"), .owner_tenant = resv_cstr(""),
                         .owner_id = resv_cstr("o")};
  int32_t outcome = 0;
  ck_assert(!resv_type_put(t, &e, &outcome, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert(!listed(p.looker, collection));
  ck_assert(!listed(p.maker, collection));
  resv_answer_clear(&a);
  close_pair(&p);
}
END_TEST

START_TEST(a_type_that_exists_works_as_usual) {
  pair_t p;
  open_pair(&p, _i);
  resv_type_t *made = test_fresh_type(p.maker, "nocreate");
  resv_answer_t a = {0};
  test_confirm(made, "taken", "someone", 3, &a);
  const char *collection = resv_type_collection(made);
  const char *aggregate = collection + strlen("wow_reservation__test__");
  resv_error_t err;
  resv_type_t *t = resv_store_type(p.looker, "test", 4, aggregate, strlen(aggregate), &err);
  ck_assert_msg(t != NULL, "%s", err.message);
  test_get(t, "taken", &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  ck_assert_int_eq(a.version, 3);
  test_reserve(t, "free", "me", "a1", 60000, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  test_release(t, "taken", "someone", &a);
  ck_assert_int_eq(a.status, RESV_RELEASED);
  test_get(made, "free", &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  resv_answer_clear(&a);
  close_pair(&p);
}
END_TEST

Suite *no_create_suite(void) {
  Suite *s = suite_create("no_create");
  const TTest *tests[] = {
      a_missing_or_empty_directory_is_refused_and_left_alone, NULL};
  TCase *tc = test_tcase(s, "no_create", 60, NULL, NULL, tests);
  tcase_add_loop_test(tc, a_missing_type_is_invalid_and_not_made, FILE_STORE, MONGO + 1);
  tcase_add_loop_test(tc, a_type_that_exists_works_as_usual, FILE_STORE, MONGO + 1);
  return s;
}
