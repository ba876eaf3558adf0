/* test_file_store_data.c: the file store's data, in the file_store suite:
 * the records' layout (compact, strings as they are, long keys apart),
 * bad options and foreign data refused (other files, not LMDB, another
 * database, another format, a record that is no reservation), a full map
 * answering nomem while reads go on, and expired reservations reclaimed
 * after the grace (docs/design.md section 6). */
#include <bson/bson.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests.h"
#include "file_record.h"
#include "file_store_test.h"

/* ---- the layout -------------------------------------------------------- */

/* Opens the directory's LMDB environment directly (no store may have it
 * open in this process) and runs fn in a write transaction on db. */
static void with_lmdb(const char *db, void (*fn)(MDB_txn *, MDB_dbi, void *), void *arg) {
  test_with_lmdb(dir, db, MDB_CREATE, 0, fn, arg);
}

static const char ann_key[] = "\001\0email\0ann@x";
static const char bad_key[] = "\001\0email\0bad@x";

typedef struct bytes {
  unsigned char p[256];
  size_t len;
} bytes_t;

static void read_record(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  bytes_t *out = arg;
  MDB_val key = {sizeof ann_key - 1, (void *)ann_key}, val;
  ck_assert_int_eq(mdb_get(txn, dbi, &key, &val), 0);
  ck_assert_uint_le(val.mv_size, sizeof out->p);
  memcpy(out->p, val.mv_data, val.mv_size);
  out->len = val.mv_size;
}

/* The record of ann@x: its kind, then its link (the key before it is the
 * format record's), then want[0..n), then the checksum: the CRC32C of the
 * key and the bytes before it. */
static void expect_record_of_ann(char kind, const char *want, size_t n) {
  bytes_t r;
  with_lmdb("wow_reservation__test__layout", read_record, &r);
  ck_assert_uint_eq(r.len, 1 + 4 + n + 4);
  ck_assert_int_eq(r.p[0], kind);
  uint32_t link = resv__crc32c(0, "\0format", 7);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(r.p[1 + i], (unsigned char)(link >> (8 * i)));
  ck_assert_msg(memcmp(r.p + 5, want, n) == 0, "the record's bytes differ");
  uint32_t crc = resv__crc32c(resv__crc32c(0, ann_key, sizeof ann_key - 1), r.p, 5 + n);
  unsigned char c[4] = {(unsigned char)crc, (unsigned char)(crc >> 8),
                        (unsigned char)(crc >> 16), (unsigned char)(crc >> 24)};
  ck_assert(memcmp(r.p + 5 + n, c, 4) == 0);
}

/* The record: its kind, its link, the owner's two strings, the expiry (8
 * bytes, little endian) and the holds, or the version; strings as they
 * are. */
START_TEST(records_are_compact_with_their_strings_as_they_are) {
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_store_set_time(s, T0);
  resv_type_t *t = type_of(s, "layout");
  resv_answer_t a = {0};
  test_reserve(t, "ann@x", "A", "a1", 1000, &a);
  test_reserve(t, "ann@x", "A", "a2", 1000, &a);
  resv_store_close(s);
  /* 1700000001000 = 0x18bcfe56be8 */
  static const char pending[] = "\0\1A\xe8\x6b\xe5\xcf\x8b\x01\0\0\2\2a1\2a2";
  expect_record_of_ann('P', pending, sizeof pending - 1);
  s = test_open_file(dir, RESV_SYNC_PROCESS);
  test_confirm(type_of(s, "layout"), "ann@x", "A", 7, &a);
  resv_store_close(s);
  static const char confirmed[] = "\0\1A\7\0\0\0\0\0\0\0";
  expect_record_of_ann('C', confirmed, sizeof confirmed - 1);
  resv_answer_clear(&a);
}
END_TEST

START_TEST(long_keys_are_kept_apart) {
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_type_t *t = type_of(s, "long");
  char k1[1001], k2[1001];
  memset(k1, 'x', 1000);
  k1[1000] = '\0';
  memcpy(k2, k1, sizeof k1);
  k2[999] = 'y';
  resv_answer_t a = {0};
  test_reserve(t, k1, "A", "a", HOUR, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  test_reserve(t, k2, "B", "b", HOUR, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  test_reserve(t, k1, "B", "b", HOUR, &a);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert(test_str_is(a.owner_id, "A"));
  test_release(t, k1, "A", &a);
  ck_assert_int_eq(a.status, RESV_RELEASED);
  test_get(t, k1, &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  test_get(t, k2, &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert(test_str_is(a.owner_id, "B"));
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* ---- bad input and foreign data ------------------------------------------ */

static void expect_refused(resv_options_t o, int32_t code, const char *words) {
  resv_error_t err;
  resv_store_t *s = open_with(o, &err);
  ck_assert_msg(s == NULL, "opened; wanted %s", resv_code_name(code));
  ck_assert_msg(err.code == code, "%s: %s", resv_code_name(err.code), err.message);
  ck_assert_msg(strstr(err.message, words), "'%s' does not say %s", err.message, words);
}

START_TEST(bad_options_are_invalid) {
  expect_refused((resv_options_t){.uri = "mongodb://127.0.0.1:1"}, RESV_EINVALID, "uri");
  expect_refused((resv_options_t){.map_size = 4096}, RESV_EINVALID, "map_size");
  expect_refused((resv_options_t){.map_size = -1}, RESV_EINVALID, "map_size");
  expect_refused((resv_options_t){.sync = 7}, RESV_EINVALID, "sync");
  expect_refused((resv_options_t){.sweep_grace_ms = -1}, RESV_EINVALID, "sweep_grace_ms");
  char file[300];
  snprintf(file, sizeof file, "%s/x", dir);
  resv_options_t o = {.path = "/nonexistent-resv-dir/sub"};
  resv_error_t err;
  ck_assert_ptr_null(resv_store_open(&o, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, "path"), "%s", err.message);
}
END_TEST

START_TEST(a_directory_with_other_files_is_refused) {
  char file[300];
  snprintf(file, sizeof file, "%s/notes.txt", dir);
  FILE *f = fopen(file, "w");
  fputs("mine\n", f);
  fclose(f);
  expect_refused((resv_options_t){0}, RESV_EFORMAT, "not a resv store");
  /* A regular file as the path. */
  resv_options_t o = {.path = file};
  resv_error_t err;
  ck_assert_ptr_null(resv_store_open(&o, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, "not a directory"), "%s", err.message);
}
END_TEST

START_TEST(a_data_file_that_is_not_lmdb_is_refused) {
  char file[300];
  snprintf(file, sizeof file, "%s/data.mdb", dir);
  FILE *f = fopen(file, "w");
  for (int i = 0; i < 1000; i++) fputs("not an LMDB file at all\n", f);
  fclose(f);
  expect_refused((resv_options_t){0}, RESV_EFORMAT, "not a resv store");
}
END_TEST

static void put_foreign(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  MDB_val key = {3, (void *)"abc"}, val = {3, (void *)"xyz"};
  ck_assert_int_eq(mdb_put(txn, dbi, &key, &val, 0), 0);
}

START_TEST(another_lmdb_database_is_refused) {
  with_lmdb(NULL, put_foreign, NULL);
  expect_refused((resv_options_t){0}, RESV_EFORMAT, "not a resv store");
}
END_TEST

static void put_format(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  const char *key_bytes = arg;
  MDB_val key = {strlen(key_bytes + 1) + 1, (void *)key_bytes};
  if (key_bytes[0]) key.mv_size = strlen(key_bytes);
  bson_t b = BSON_INITIALIZER;
  if (!key_bytes[0]) BSON_APPEND_UTF8(&b, "_id", "format");
  BSON_APPEND_INT32(&b, "format", 3);
  MDB_val val = {b.len, (void *)bson_get_data(&b)};
  ck_assert_int_eq(mdb_put(txn, dbi, &key, &val, 0), 0);
  bson_destroy(&b);
}

/* A type's format record of format 2 (a sound record). */
static void put_type_format(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  MDB_val key = {7, (void *)"\0format"};
  resv__file_buf_t w;
  ck_assert(resv__file_format_encode(&w, &key, 2, resv__file_key_link(&key)));
  MDB_val val = {w.len, w.p};
  ck_assert_int_eq(mdb_put(txn, dbi, &key, &val, 0), 0);
  resv__file_buf_free(&w);
}

START_TEST(a_store_of_another_format_is_refused) {
  resv_store_close(test_open_file(dir, RESV_SYNC_PROCESS));
  with_lmdb("resv", put_format, (void *)"format");
  expect_refused((resv_options_t){0}, RESV_EFORMAT, "format 3");
}
END_TEST

static void count_entries(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  MDB_stat st;
  ck_assert_int_eq(mdb_stat(txn, dbi, &st), 0);
  *(size_t *)arg = st.ms_entries;
}

START_TEST(a_type_of_another_format_answers_format_and_is_not_written) {
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_answer_t a = {0};
  test_get(type_of(s, "other"), "x", &a); /* sets the type up */
  resv_store_close(s);
  with_lmdb("wow_reservation__test__other", put_type_format, NULL);
  s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_type_t *t = type_of(s, "other");
  resv_error_t err;
  ck_assert(!call(t, RESV_OP_RESERVE, "x", "A", "a", HOUR, &a, &err));
  ck_assert_int_eq(err.code, RESV_EFORMAT);
  ck_assert_msg(strstr(err.message, "format 2"), "%s", err.message);
  resv_store_close(s);
  size_t entries = 0;
  with_lmdb("wow_reservation__test__other", count_entries, &entries);
  ck_assert_uint_eq(entries, 1); /* the format record alone */
  resv_answer_clear(&a);
}
END_TEST

/* A sound record (its checksum right, chained in as the only record
 * after the format record) that is no reservation: its fields do not fit. */
static void put_not_a_reservation(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  MDB_val key = {sizeof bad_key - 1, (void *)bad_key};
  MDB_val fkey = {7, (void *)"\0format"}, fval;
  uint32_t link = resv__file_key_link(&fkey);
  char v[13] = {'P', (char)link, (char)(link >> 8), (char)(link >> 16), (char)(link >> 24),
                'm', 'i', 'n', 'e'};
  uint32_t crc = resv__crc32c(resv__crc32c(0, bad_key, sizeof bad_key - 1), v, 9);
  for (int i = 0; i < 4; i++) v[9 + i] = (char)(crc >> (8 * i));
  MDB_val val = {sizeof v, v};
  ck_assert(resv__file_rec_sound(&key, &val));
  ck_assert_int_eq(mdb_put(txn, dbi, &key, &val, 0), 0);
  ck_assert_int_eq(mdb_get(txn, dbi, &fkey, &fval), 0);
  resv__file_buf_t w;
  ck_assert(resv__file_rec_relink(&w, &fkey, &fval, resv__file_key_link(&key)));
  MDB_val nv = {w.len, w.p};
  ck_assert_int_eq(mdb_put(txn, dbi, &fkey, &nv, 0), 0);
  resv__file_buf_free(&w);
}

static void read_bad(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  MDB_val key = {sizeof bad_key - 1, (void *)bad_key}, val;
  ck_assert_int_eq(mdb_get(txn, dbi, &key, &val), 0);
  ck_assert_uint_eq(val.mv_size, 13);
  ck_assert(memcmp((const char *)val.mv_data + 5, "mine", 4) == 0);
  *(bool *)arg = true;
}

START_TEST(a_record_that_is_no_reservation_answers_format_and_stays) {
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_answer_t a = {0};
  test_get(type_of(s, "planted"), "x", &a);
  resv_store_close(s);
  with_lmdb("wow_reservation__test__planted", put_not_a_reservation, NULL);
  s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_store_set_time(s, T0 + 10 * HOUR);
  resv_type_t *t = type_of(s, "planted");
  static const int32_t ops[] = {RESV_OP_RESERVE, RESV_OP_CONFIRM, RESV_OP_ABANDON,
                                RESV_OP_RELEASE, RESV_OP_GET};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    resv_error_t err;
    ck_assert(!call(t, ops[i], "bad@x", "A", "a", HOUR, &a, &err));
    ck_assert_int_eq(err.code, RESV_EFORMAT);
  }
  /* Writes elsewhere pass over it while reclaiming: it stays too. */
  for (int i = 0; i < 20; i++) {
    char key[32];
    snprintf(key, sizeof key, "ok%d", i);
    test_reserve(t, key, "A", "a", 1, &a);
  }
  resv_store_close(s);
  bool stayed = false;
  with_lmdb("wow_reservation__test__planted", read_bad, &stayed);
  ck_assert(stayed);
  resv_answer_clear(&a);
}
END_TEST

/* ---- a full map, and reclaiming ----------------------------------------- */

START_TEST(a_full_map_answers_nomem_naming_map_size_and_reads_go_on) {
  resv_store_t *s = open_with((resv_options_t){.map_size = 1 << 20, .sweep_grace_ms = 1000},
                              NULL);
  ck_assert_ptr_nonnull(s);
  resv_store_set_time(s, T0);
  resv_type_t *t = type_of(s, "full");
  char attempt[600], key[32];
  memset(attempt, 'a', sizeof attempt - 1);
  attempt[sizeof attempt - 1] = '\0';
  resv_answer_t a = {0};
  resv_error_t err = {0};
  int n = 0;
  while (call(t, RESV_OP_RESERVE, (snprintf(key, sizeof key, "k%d", n), key), "A",
              attempt, 100, &a, &err))
    ck_assert_msg(++n < 100000, "the map never filled");
  ck_assert_int_eq(err.code, RESV_ENOMEM);
  ck_assert_msg(strstr(err.message, "map_size"), "%s", err.message);
  ck_assert(n > 100);
  test_get(t, "k0", &a); /* reads keep working */
  ck_assert_int_eq(a.status, RESV_PENDING);
  /* Once they are expired past the grace, a write reclaims them. */
  resv_store_set_time(s, T0 + 100 + 1000);
  ck_assert_msg(call(t, RESV_OP_RESERVE, "new", "B", attempt, 100, &a, &err), "%s",
                err.message);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

START_TEST(expired_reservations_are_reclaimed_after_the_grace) {
  resv_store_t *s = open_with((resv_options_t){.sweep_grace_ms = 1000}, NULL);
  ck_assert_ptr_nonnull(s);
  resv_store_set_time(s, T0);
  resv_type_t *t = type_of(s, "reclaim");
  resv_answer_t a = {0};
  char key[32];
  for (int i = 0; i < 100; i++) {
    snprintf(key, sizeof key, "old%d", i);
    test_reserve(t, key, "A", "a", 10, &a);
  }
  test_confirm(t, "kept", "A", 1, &a);
  /* Within the grace: writes pass over them and keep them. */
  resv_store_set_time(s, T0 + 500);
  for (int i = 0; i < 200; i++) {
    snprintf(key, sizeof key, "x%d", i);
    test_reserve(t, key, "B", "b", HOUR, &a);
  }
  test_get(t, "old7", &a);
  ck_assert_int_eq(a.status, RESV_EXPIRED);
  /* Past it: the next writes reclaim them, a few per write. */
  resv_store_set_time(s, T0 + 10 + 1000);
  for (int i = 0; i < 200; i++) {
    snprintf(key, sizeof key, "y%d", i);
    test_reserve(t, key, "B", "b", HOUR, &a);
  }
  for (int i = 0; i < 100; i++) {
    snprintf(key, sizeof key, "old%d", i);
    test_get(t, key, &a);
    ck_assert_msg(a.status == RESV_ABSENT, "old%d is %s", i, resv_status_name(a.status));
  }
  test_get(t, "kept", &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  test_get(t, "x5", &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

void file_store_data_tcase(Suite *s) {
  const TTest *tests[] = {
      records_are_compact_with_their_strings_as_they_are, long_keys_are_kept_apart,
      bad_options_are_invalid, a_directory_with_other_files_is_refused,
      a_data_file_that_is_not_lmdb_is_refused, another_lmdb_database_is_refused,
      a_store_of_another_format_is_refused,
      a_type_of_another_format_answers_format_and_is_not_written,
      a_record_that_is_no_reservation_answers_format_and_stays,
      a_full_map_answers_nomem_naming_map_size_and_reads_go_on,
      expired_reservations_are_reclaimed_after_the_grace, NULL};
  test_tcase(s, "data", 120, setup, teardown, tests);
}
