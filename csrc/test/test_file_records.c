/* test_file_records.c: the file store's records on a bad day: a damaged
 * record answers format naming the type and key and is never decoded; a
 * store of format 1 (its records the BSON documents of the MongoDB layout,
 * without checksums) is upgraded at open and
 * answers what it held; every write keeps the chain of links between the
 * records whole; random bits flipped anywhere in data.mdb never give a
 * wrong answer (each get answers what was stored, or an error, or the
 * store is refused at open) and never crash the process (the walk at
 * open, file_walk.c, refuses the pages LMDB's cursor code would crash on).
 *
 * The bit-flip trials open each damaged copy in a child process, so a
 * crash is counted and fails the test at the end, after it has printed
 * what it counted. */
#include <bson/bson.h>
#include <fcntl.h>
#include <lmdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests.h"
#include "file_internal.h"
#include "file_record.h"

#define T0 1700000000000LL
#define HOUR (3600 * 1000)

static char dir[256];

static void setup(void) { test_temp_dir(dir, sizeof dir); }
static void teardown(void) { test_remove_dir(dir); }

static resv_type_t *type_of(resv_store_t *s, const char *aggregate) {
  resv_error_t err;
  resv_type_t *t = resv_store_type(s, "test", 4, aggregate, strlen(aggregate), &err);
  ck_assert_msg(t != NULL, "%s", err.message);
  return t;
}

static bool get(resv_type_t *t, const char *key, resv_answer_t *a, resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_GET, .key = test_key("email", key)};
  return resv_call(t, &r, a, err);
}

static bool reserve(resv_type_t *t, const char *key, const char *owner, resv_answer_t *a,
                    resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", key),
                      .owner = test_owner("", owner), .attempt = resv_cstr("a"),
                      .ttl_ms = HOUR};
  return resv_call(t, &r, a, err);
}

/* Runs fn in a write transaction on database db of the directory (no
 * store may have it open in this process). */
static void with_lmdb(const char *db, void (*fn)(MDB_txn *, MDB_dbi, void *), void *arg) {
  test_with_lmdb(dir, db, 0, (size_t)1 << 30, fn, arg);
}

/* ---- a damaged record ------------------------------------------------------- */

static const char bob_key[] = "\001\0email\0bob@x";

/* Flips one bit of bob@x's record: a byte of its owner id. */
static void damage_bob(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  MDB_val key = {sizeof bob_key - 1, (void *)bob_key}, val;
  ck_assert_int_eq(mdb_get(txn, dbi, &key, &val), 0);
  char copy[256];
  ck_assert_uint_le(val.mv_size, sizeof copy);
  memcpy(copy, val.mv_data, val.mv_size);
  ck_assert_int_eq(copy[7], 'B'); /* kind, link, "" (0), 1, 'B' */
  copy[7] ^= 0x01;                 /* 'C': another owner, if it were read */
  MDB_val bad = {val.mv_size, copy};
  ck_assert_int_eq(mdb_put(txn, dbi, &key, &bad, 0), 0);
}

START_TEST(a_damaged_record_answers_format_naming_type_and_key) {
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_store_set_time(s, T0);
  resv_type_t *t = type_of(s, "damaged");
  resv_answer_t a = {0};
  resv_error_t err;
  test_reserve(t, "ann@x", "A", "a", HOUR, &a);
  test_reserve(t, "bob@x", "B", "b", HOUR, &a);
  test_reserve(t, "cat@x", "C", "c", HOUR, &a);
  resv_store_close(s);
  with_lmdb("wow_reservation__test__damaged", damage_bob, NULL);

  s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_store_set_time(s, T0);
  t = type_of(s, "damaged");
  ck_assert(!get(t, "bob@x", &a, &err));
  ck_assert_int_eq(err.code, RESV_EFORMAT);
  ck_assert_msg(strstr(err.message, "wow_reservation__test__damaged") &&
                    strstr(err.message, "bob@x") && strstr(err.message, "checksum"),
                "%s", err.message);
  /* Never granted to another owner, nor taken by one. */
  ck_assert(!reserve(t, "bob@x", "C", &a, &err));
  ck_assert_int_eq(err.code, RESV_EFORMAT);
  /* Its neighbours answer; a key absent next to it cannot say absent. */
  ck_assert(get(t, "ann@x", &a, &err));
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert(test_str_is(a.owner_id, "A"));
  ck_assert(get(t, "cat@x", &a, &err));
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert(!get(t, "bob@y", &a, &err));
  ck_assert_int_eq(err.code, RESV_EFORMAT);

  /* A scan (resv check) lists it with why; a sweep leaves it. */
  resv_scan_t scan = {0};
  ck_assert(resv_type_scan(t, 0, NULL, 100, &scan, &err));
  ck_assert_uint_eq(scan.count, 3);
  ck_assert_int_eq(scan.entries[1].status, RESV_NONE);
  ck_assert(test_str_is(scan.entries[1].id, "{ \"t\" : \"\", \"n\" : \"email\", \"k\" : \"bob@x\" }"));
  ck_assert_msg(strstr(scan.entries[1].problem.ptr, "checksum"), "%s",
                scan.entries[1].problem.ptr);
  ck_assert_int_eq(scan.entries[0].status, RESV_PENDING);
  resv_scan_clear(&scan);
  resv_store_set_time(s, T0 + 10 * HOUR);
  resv_request_t sw = {.op = RESV_OP_SWEEP};
  ck_assert(resv_call(t, &sw, &a, &err));
  ck_assert_int_eq(a.count, 2);
  ck_assert(!get(t, "bob@x", &a, &err));
  ck_assert_int_eq(err.code, RESV_EFORMAT);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

typedef struct chain_count {
  size_t records, unlinked;
} chain_count_t;

static void check_chain(MDB_txn *txn, MDB_dbi dbi, void *arg);

/* ---- a store of format 1 ------------------------------------------------------ */

/* The BSON document of a record, as the store of format 1 wrote it. */
static void format1_document(const resv__file_rec_t *d, bson_t *b) {
  bson_t id, owner, holds;
  bson_init(b);
  bson_append_document_begin(b, "_id", 3, &id);
  bson_append_utf8(&id, "t", 1, d->key.tenant.ptr, (int)d->key.tenant.len);
  bson_append_utf8(&id, "n", 1, d->key.ns.ptr, (int)d->key.ns.len);
  bson_append_utf8(&id, "k", 1, d->key.key.ptr, (int)d->key.key.len);
  bson_append_document_end(b, &id);
  bson_append_utf8(b, "tenant_id", 9, d->key.tenant.ptr, (int)d->key.tenant.len);
  bson_append_utf8(b, "key", 3, d->key.key.ptr, (int)d->key.key.len);
  bson_append_document_begin(b, "owner", 5, &owner);
  bson_append_utf8(&owner, "tenant_id", 9, d->owner.tenant.ptr, (int)d->owner.tenant.len);
  bson_append_utf8(&owner, "id", 2, d->owner.id.ptr, (int)d->owner.id.len);
  bson_append_document_end(b, &owner);
  if (d->state == RESV_STATE_CONFIRMED) {
    bson_append_null(b, "expires_at", 10);
    bson_append_int64(b, "version", 7, d->version);
    return;
  }
  bson_append_int64(b, "expires_at", 10, d->expires_at);
  bson_append_array_begin(b, "holds", 5, &holds);
  for (size_t i = 0; i < d->nholds; i++) {
    char name[24];
    snprintf(name, sizeof name, "%zu", i);
    bson_append_utf8(&holds, name, -1, d->holds[i].ptr, (int)d->holds[i].len);
  }
  bson_append_array_end(b, &holds);
}

/* Every record of the type turned into its format-1 document. */
static void to_format1(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  MDB_cursor *c;
  MDB_val key, val;
  ck_assert_int_eq(mdb_cursor_open(txn, dbi, &c), 0);
  for (int rc = mdb_cursor_get(c, &key, &val, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(c, &key, &val, MDB_NEXT)) {
    bson_t b;
    resv__file_rec_t d;
    if (((const char *)key.mv_data)[0] == 0) {
      bson_init(&b);
      BSON_APPEND_UTF8(&b, "_id", "format");
      BSON_APPEND_INT32(&b, "format", 1);
    } else {
      ck_assert(resv__file_rec_decode(&key, &val, &d, NULL));
      format1_document(&d, &b);
      resv__file_rec_free(&d);
    }
    char at[RESV__FILE_KEY_MAX + 1];
    MDB_val k = {key.mv_size, at}, nv = {b.len, (void *)bson_get_data(&b)};
    memcpy(at, key.mv_data, key.mv_size);
    ck_assert_int_eq(mdb_put(txn, dbi, &k, &nv, 0), 0);
    ck_assert_int_eq(mdb_cursor_get(c, &k, &val, MDB_SET), 0);
    bson_destroy(&b);
  }
  mdb_cursor_close(c);
  /* And one that is no reservation, as a hand may have put there. */
  bson_t b = BSON_INITIALIZER;
  BSON_APPEND_UTF8(&b, "_id", "bad@x");
  BSON_APPEND_INT32(&b, "mine", 1);
  MDB_val k = {sizeof "\001\0email\0bad@x" - 1, (void *)"\001\0email\0bad@x"};
  MDB_val v = {b.len, (void *)bson_get_data(&b)};
  ck_assert_int_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
  bson_destroy(&b);
}

static void set_store_format(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  bson_t b = BSON_INITIALIZER;
  BSON_APPEND_INT32(&b, "format", *(int *)arg);
  MDB_val k = {6, (void *)"format"}, v = {b.len, (void *)bson_get_data(&b)};
  ck_assert_int_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
  bson_destroy(&b);
}

static void read_store_format(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  MDB_val k = {6, (void *)"format"}, v;
  bson_t b;
  bson_iter_t it;
  ck_assert_int_eq(mdb_get(txn, dbi, &k, &v), 0);
  ck_assert(bson_init_static(&b, v.mv_data, v.mv_size));
  ck_assert(bson_iter_init_find(&it, &b, "format"));
  *(int *)arg = bson_iter_int32(&it);
}

static void first_byte_of_ann(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  MDB_val k = {sizeof "\001\0email\0ann@x" - 1, (void *)"\001\0email\0ann@x"}, v;
  ck_assert_int_eq(mdb_get(txn, dbi, &k, &v), 0);
  *(char *)arg = ((const char *)v.mv_data)[0];
}

/* What the format-1 store held, read back after the upgrade. */
static void expect_upgraded(resv_type_t *t, const char *long_key) {
  resv_answer_t a = {0};
  resv_error_t err;
  ck_assert_msg(get(t, "ann@x", &a, &err), "%s", err.message);
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert_int_eq(a.expires_at, T0 + HOUR);
  ck_assert(test_holds_are(&a, 2, (const char *const[]){"a1", "a2"}));
  ck_assert(get(t, "bob@x", &a, &err));
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  ck_assert_int_eq(a.version, 7);
  ck_assert(test_str_is(a.owner_id, "B"));
  ck_assert(get(t, long_key, &a, &err));
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert(test_str_is(a.owner_id, "L"));
  ck_assert(!get(t, "bad@x", &a, &err)); /* not a reservation: as before */
  ck_assert_int_eq(err.code, RESV_EFORMAT);
  ck_assert(reserve(t, "new@x", "N", &a, &err));
  ck_assert_int_eq(a.status, RESV_RESERVED);
  resv_answer_clear(&a);
}

START_TEST(a_store_of_format_1_is_upgraded_at_open) {
  char long_key[601];
  memset(long_key, 'l', 600);
  long_key[600] = '\0';
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_store_set_time(s, T0);
  resv_type_t *t = type_of(s, "old");
  resv_answer_t a = {0};
  test_reserve(t, "ann@x", "A", "a1", HOUR, &a);
  test_reserve(t, "ann@x", "A", "a2", HOUR, &a);
  test_confirm(t, "bob@x", "B", 7, &a);
  test_reserve(t, long_key, "L", "l", HOUR, &a);
  resv_answer_clear(&a);
  resv_store_close(s);
  /* The directory as the store of format 1 left it. */
  with_lmdb("wow_reservation__test__old", to_format1, NULL);
  int format = 1;
  with_lmdb("resv", set_store_format, &format);

  s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_store_set_time(s, T0);
  expect_upgraded(type_of(s, "old"), long_key);
  resv_store_close(s);
  with_lmdb("resv", read_store_format, &format);
  ck_assert_int_eq(format, 2);
  char kind = 0;
  with_lmdb("wow_reservation__test__old", first_byte_of_ann, &kind);
  ck_assert_int_eq(kind, 'P');
  chain_count_t n;
  with_lmdb("wow_reservation__test__old", check_chain, &n);
  ck_assert_uint_eq(n.records, 1 + 5); /* the format record, 4 records, new@x */
  ck_assert_uint_eq(n.unlinked, 1);     /* bad@x, as it was */
  /* Opened again: format 2 as it is. */
  s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_store_set_time(s, T0);
  t = type_of(s, "old");
  ck_assert(get(t, "ann@x", &a, &(resv_error_t){0}));
  ck_assert_int_eq(a.status, RESV_PENDING);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* ---- the chain ------------------------------------------------------------------ */

/* Every record's link names the key before it; the format record's, the
 * last key. A record without a link (left by the upgrade: not a
 * reservation) is counted in unlinked, and the chain passes it. */
static void check_chain(MDB_txn *txn, MDB_dbi dbi, void *arg) {
  chain_count_t *n = arg;
  MDB_cursor *c;
  MDB_val key, val, prev = {0, NULL};
  uint32_t link, tail = 0;
  memset(n, 0, sizeof *n);
  ck_assert_int_eq(mdb_cursor_open(txn, dbi, &c), 0);
  for (int rc = mdb_cursor_get(c, &key, &val, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(c, &key, &val, MDB_NEXT), n->records++) {
    if (!resv__file_rec_link(&key, &val, &link))
      n->unlinked++;
    else if (n->records == 0)
      tail = link;
    else
      ck_assert_msg(link == resv__file_key_link(&prev), "record %zu is not linked", n->records);
    prev = key;
  }
  ck_assert_uint_eq(tail, resv__file_key_link(&prev));
  mdb_cursor_close(c);
}

/* Reserves, confirms, abandons, releases, reclaiming writes, a sweep and
 * puts, of short keys and of keys hashed for their length, in a random
 * order: the chain stays whole. */
START_TEST(every_write_keeps_the_chain_whole) {
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_store_set_time(s, T0);
  resv_type_t *t = type_of(s, "chain");
  resv_answer_t a = {0};
  resv_error_t err;
  unsigned seed = 7;
  char long_key[700];
  for (int i = 0; i < 3000; i++) {
    int k = rand_r(&seed) % 300;
    char key[720], owner[8];
    if (k % 10 == 0) {
      memset(long_key, 'x', 600);
      snprintf(long_key + 600, 100, "%d", k);
      snprintf(key, sizeof key, "%s", long_key);
    } else {
      snprintf(key, sizeof key, "k%03d", k);
    }
    snprintf(owner, sizeof owner, "o%d", rand_r(&seed) % 3);
    resv_request_t r = {.key = test_key("email", key), .owner = test_owner("", owner),
                        .attempt = resv_cstr(rand_r(&seed) % 2 ? "a" : "b"),
                        .ttl_ms = 1 + rand_r(&seed) % 5000, .version = 1};
    int op = rand_r(&seed) % 5;
    r.op = op == 0 ? RESV_OP_CONFIRM : op == 1 ? RESV_OP_ABANDON
           : op == 2 ? RESV_OP_RELEASE : RESV_OP_RESERVE;
    ck_assert_msg(resv_call(t, &r, &a, &err), "%s", err.message);
    if (i % 500 == 499) {
      resv_store_set_time(s, T0 + i * 10);
      resv_request_t sw = {.op = RESV_OP_SWEEP};
      ck_assert_msg(resv_call(t, &sw, &a, &err), "%s", err.message);
    }
  }
  /* And puts, as resv copy makes them. */
  for (int i = 0; i < 50; i++) {
    char key[16];
    snprintf(key, sizeof key, "p%02d", i);
    resv_scan_entry_t e = {.status = RESV_CONFIRMED, .state = RESV_STATE_CONFIRMED,
                           .version = 3, .tenant = resv_cstr(""), .ns = resv_cstr("email"),
                           .key = resv_cstr(key), .owner_tenant = resv_cstr(""),
                           .owner_id = resv_cstr("P")};
    int32_t outcome;
    ck_assert_msg(resv_type_put(t, &e, &outcome, &err), "%s", err.message);
    ck_assert_int_eq(outcome, RESV_PUT_ADDED);
  }
  resv_answer_clear(&a);
  resv_store_close(s);
  chain_count_t n;
  with_lmdb("wow_reservation__test__chain", check_chain, &n);
  ck_assert_uint_gt(n.records, 50);
  ck_assert_uint_eq(n.unlinked, 0);
}
END_TEST

/* One call of several keys (op) of owner on the keys named in names. */
static void call_all(resv_type_t *t, int32_t op, const char *const *names, size_t n,
                     const char *owner, int32_t want) {
  resv_key_t keys[4];
  for (size_t i = 0; i < n; i++) keys[i] = test_key("email", names[i]);
  resv_request_t r = {.op = op, .keys = keys, .nkeys = n, .owner = test_owner("", owner),
                      .attempt = resv_cstr("a"), .ttl_ms = HOUR, .version = 1};
  resv_answer_t a = {0};
  resv_error_t err;
  ck_assert_msg(resv_call(t, &r, &a, &err), "%s", err.message);
  ck_assert_msg(a.status == want, "op %d on %s answered %s", (int)op, names[0],
                resv_status_name(a.status));
  resv_answer_clear(&a);
}

/* Calls of several keys whose keys are neighbours, so that writing one
 * moves the place of the next, or relinks its record: new keys in one gap
 * in key order (between two keys, and past the last), a new key just
 * before a record of the same call, a long key (stored under its hash)
 * first, neighbours deleted together. The chain stays whole and every
 * key holds what the calls answered. */
START_TEST(calls_of_several_keys_on_neighbours_keep_the_chain_whole) {
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_store_set_time(s, T0);
  resv_type_t *t = type_of(s, "neighbours");
  resv_answer_t a = {0};
  char long_key[600];
  memset(long_key, 'x', sizeof long_key - 1);
  long_key[sizeof long_key - 1] = 0;
  test_reserve(t, "b", "o", "a", HOUR, &a);
  test_reserve(t, "h", "o", "a", HOUR, &a);
  test_reserve(t, "m", "o", "a", HOUR, &a);
  call_all(t, RESV_OP_RESERVE_ALL, (const char *[]){"c", "d", "e"}, 3, "A", RESV_RESERVED);
  call_all(t, RESV_OP_RESERVE_ALL, (const char *[]){"y", "z"}, 2, "A", RESV_RESERVED);
  call_all(t, RESV_OP_CONFIRM_ALL, (const char *[]){"g", "h"}, 2, "o", RESV_CONFIRMED);
  call_all(t, RESV_OP_RESERVE_ALL, (const char *[]){long_key, "i", "j"}, 3, "A",
           RESV_RESERVED);
  call_all(t, RESV_OP_CONFIRM_ALL, (const char *[]){"c", "d"}, 2, "A", RESV_CONFIRMED);
  call_all(t, RESV_OP_ABANDON_ALL, (const char *[]){"i", "j"}, 2, "A", RESV_ABANDONED);
  call_all(t, RESV_OP_RESERVE_ALL, (const char *[]){"k", "l"}, 2, "A", RESV_RESERVED);
  const struct {
    const char *key, *owner;
    int32_t status;
  } want[] = {{"b", "o", RESV_PENDING},   {"c", "A", RESV_CONFIRMED}, {"d", "A", RESV_CONFIRMED},
              {"e", "A", RESV_PENDING},   {"g", "o", RESV_CONFIRMED}, {"h", "o", RESV_CONFIRMED},
              {"i", NULL, RESV_ABSENT},   {"j", NULL, RESV_ABSENT},   {"k", "A", RESV_PENDING},
              {"l", "A", RESV_PENDING},   {"m", "o", RESV_PENDING},   {"y", "A", RESV_PENDING},
              {"z", "A", RESV_PENDING},   {long_key, "A", RESV_PENDING}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    test_get(t, want[i].key, &a);
    ck_assert_msg(a.status == want[i].status, "%.8s: %s", want[i].key,
                  resv_status_name(a.status));
    if (want[i].owner) ck_assert(test_str_is(a.owner_id, want[i].owner));
  }
  resv_answer_clear(&a);
  resv_store_close(s);
  chain_count_t n;
  with_lmdb("wow_reservation__test__neighbours", check_chain, &n);
  ck_assert_uint_eq(n.records, 13); /* the format record and 12 keys */
  ck_assert_uint_eq(n.unlinked, 0);
}
END_TEST

/* ---- the plan of a peek --------------------------------------------------------- */

/* The LMDB environment of the directory opened directly, and the state
 * of the type of database db as file_ops.c takes it. */
typedef struct direct {
  MDB_env *env;
  resv__file_type_t ft;
  char db[64];
} direct_t;

static void direct_open(direct_t *l, const char *db) {
  MDB_txn *txn;
  memset(l, 0, sizeof *l);
  snprintf(l->db, sizeof l->db, "%s", db);
  ck_assert_int_eq(mdb_env_create(&l->env), 0);
  mdb_env_set_maxdbs(l->env, 16);
  mdb_env_set_mapsize(l->env, (size_t)1 << 30);
  ck_assert_int_eq(mdb_env_open(l->env, dir, 0, 0660), 0);
  ck_assert_int_eq(mdb_txn_begin(l->env, NULL, 0, &txn), 0);
  ck_assert_int_eq(mdb_dbi_open(txn, l->db, 0, &l->ft.dbi), 0);
  ck_assert_int_eq(mdb_txn_commit(txn), 0);
  l->ft.collection = l->db;
}

/* The type aggregate (made of prefix and i) with key reserved by owner
 * (attempt "a") through a store, closed; then its database opened
 * directly into l. */
static void direct_type(const char *prefix, int i, const char *key, const char *owner,
                        char aggregate[16], direct_t *l) {
  char db[64];
  snprintf(aggregate, 16, "%s%d", prefix, i);
  snprintf(db, sizeof db, "wow_reservation__test__%s", aggregate);
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_answer_t a = {0};
  resv_store_set_time(s, T0);
  test_reserve(type_of(s, aggregate), key, owner, "a", HOUR, &a);
  resv_answer_clear(&a);
  resv_store_close(s);
  direct_open(l, db);
}

/* r run by resv__file_apply in a write transaction of l, committed; its
 * status. */
static int32_t direct_write(direct_t *l, const resv_request_t *r) {
  MDB_txn *txn;
  resv_answer_t a = {0};
  resv_error_t err;
  bool ok;
  ck_assert_int_eq(mdb_txn_begin(l->env, NULL, 0, &txn), 0);
  ck_assert_int_eq(resv__file_apply(txn, &l->ft, r, T0, 16, &a, &err, &ok, NULL), 0);
  ck_assert_msg(ok, "%s", err.message);
  ck_assert_int_eq(mdb_txn_commit(txn), 0);
  int32_t status = a.status;
  resv_answer_clear(&a);
  return status;
}

/* r peeked in a read-only transaction of l, as a store's write does
 * first: the plan in *peek, the answer in *a. */
static void direct_peek(direct_t *l, const resv_request_t *r, resv__file_peek_t *peek,
                        resv_answer_t *a) {
  MDB_txn *txn;
  resv_error_t err;
  bool ok;
  ck_assert_int_eq(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn), 0);
  ck_assert_int_eq(resv__file_apply(txn, &l->ft, r, T0, 16, a, &err, &ok, peek), 0);
  mdb_txn_abort(txn);
  ck_assert_msg(ok, "%s", err.message);
  ck_assert(peek->write_needed && peek->planned);
}

/* The write that follows a peek, committed: the plan when it is still on
 * its snapshot (true), else r decided again (*a its answer). */
static bool direct_write_planned(direct_t *l, const resv_request_t *r,
                                 const resv__file_peek_t *peek, resv_answer_t *a) {
  MDB_txn *txn;
  resv_error_t err;
  bool ok, done;
  ck_assert_int_eq(mdb_txn_begin(l->env, NULL, 0, &txn), 0);
  ck_assert_int_eq(resv__file_apply_planned(txn, &l->ft, r, peek, &err, &ok, &done), 0);
  if (!done) ck_assert_int_eq(resv__file_apply(txn, &l->ft, r, T0, 16, a, &err, &ok, NULL), 0);
  ck_assert_msg(ok, "%s", err.message);
  ck_assert_int_eq(mdb_txn_commit(txn), 0);
  return done;
}

/* direct_write_planned of r's plan, which must be written unless another
 * write came between; then LMDB's handle closed and the store opened on
 * the same files at T0, its type into *t. */
static resv_store_t *plan_then_open(direct_t *l, const resv_request_t *r,
                                    const resv__file_peek_t *peek, resv_answer_t *a,
                                    bool between, const char *aggregate, resv_type_t **t) {
  bool done = direct_write_planned(l, r, peek, a);
  ck_assert_msg(done == !between, "the plan was %swritten", done ? "" : "not ");
  mdb_env_close(l->env);
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_store_set_time(s, T0);
  *t = type_of(s, aggregate);
  return s;
}

/* The records the type's chain links, once the store s is closed. */
static size_t chain_records(resv_store_t *s, const direct_t *l) {
  resv_store_close(s);
  chain_count_t n;
  with_lmdb(l->db, check_chain, &n);
  return n.records;
}

/* A reserve_all of two new keys peeks (a read-only transaction) and plans
 * its writes; then, when another write commits between (a reserve of its
 * second key by another owner), the plan is not written (the write
 * decides again: a conflict, and the first key is not taken); when none
 * does, the plan is written and the peek's answer stands. */
START_TEST(a_plan_of_several_keys_is_written_only_on_its_own_snapshot) {
  bool between = _i;
  char aggregate[16];
  direct_t l;
  direct_type("plan", _i, "m", "o", aggregate, &l);
  resv_answer_t a = {0};
  resv_key_t keys[2] = {test_key("email", "a"), test_key("email", "b")};
  resv_request_t r = {.op = RESV_OP_RESERVE_ALL, .keys = keys, .nkeys = 2,
                      .owner = test_owner("", "A"), .attempt = resv_cstr("a"),
                      .ttl_ms = HOUR};
  resv__file_peek_t peek;
  direct_peek(&l, &r, &peek, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  if (between) {
    resv_request_t other = {.op = RESV_OP_RESERVE, .key = keys[1],
                            .owner = test_owner("", "B"), .attempt = resv_cstr("b"),
                            .ttl_ms = HOUR};
    ck_assert_int_eq(direct_write(&l, &other), RESV_RESERVED);
  }
  resv_type_t *t;
  resv_store_t *s = plan_then_open(&l, &r, &peek, &a, between, aggregate, &t);
  ck_assert_int_eq(a.status, between ? RESV_CONFLICT : RESV_RESERVED);
  test_get(t, "a", &a);
  ck_assert_int_eq(a.status, between ? RESV_ABSENT : RESV_PENDING);
  test_get(t, "b", &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert(test_str_is(a.owner_id, between ? "B" : "A"));
  resv_answer_clear(&a);
  ck_assert_uint_eq(chain_records(s, &l), between ? 3 : 4);
}
END_TEST

/* A confirm of one's pending reservation peeks and plans to rewrite the
 * record (without its holds); then, when another process's writes commit
 * between (the owner abandons, another reserves the key), the plan is not
 * written and the confirm, decided again, is a conflict that leaves the
 * other's reservation as it is; when none do, the plan confirms it. */
START_TEST(a_plan_of_one_key_is_written_only_on_its_own_snapshot) {
  bool between = _i;
  char aggregate[16];
  direct_t l;
  direct_type("one", _i, "c", "A", aggregate, &l);
  resv_answer_t a = {0};
  resv_request_t confirm = {.op = RESV_OP_CONFIRM, .key = test_key("email", "c"),
                            .owner = test_owner("", "A")};
  resv__file_peek_t peek;
  direct_peek(&l, &confirm, &peek, &a);
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  if (between) {
    resv_request_t abandon = {.op = RESV_OP_ABANDON, .key = confirm.key,
                              .owner = confirm.owner, .attempt = resv_cstr("a")};
    resv_request_t other = {.op = RESV_OP_RESERVE, .key = confirm.key,
                            .owner = test_owner("", "B"), .attempt = resv_cstr("b"),
                            .ttl_ms = HOUR};
    ck_assert_int_eq(direct_write(&l, &abandon), RESV_ABANDONED);
    ck_assert_int_eq(direct_write(&l, &other), RESV_RESERVED);
  }
  resv_type_t *t;
  resv_store_t *s = plan_then_open(&l, &confirm, &peek, &a, between, aggregate, &t);
  ck_assert_int_eq(a.status, between ? RESV_CONFLICT : RESV_CONFIRMED);
  test_get(t, "c", &a);
  ck_assert_int_eq(a.status, between ? RESV_PENDING : RESV_CONFIRMED);
  ck_assert(test_str_is(a.owner_id, between ? "B" : "A"));
  resv_answer_clear(&a);
  ck_assert_uint_eq(chain_records(s, &l), 2);
}
END_TEST

/* ---- flipped bits --------------------------------------------------------------- */

#define FLIP_KEYS 2000
#define FLIP_ABSENT 200
#define FLIP_TRIALS 300

typedef struct tally {
  int right, errors, wrong;
  bool opened;
} tally_t;

static void key_name(char *buf, size_t size, int i) { snprintf(buf, size, "key%05d@x", i); }

/* The store of the trials: FLIP_KEYS reservations, a third confirmed. */
static void fill_store(void) {
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_store_set_time(s, T0);
  resv_type_t *t = type_of(s, "flip");
  resv_answer_t a = {0};
  for (int i = 0; i < FLIP_KEYS; i++) {
    char key[32], owner[16];
    key_name(key, sizeof key, i);
    snprintf(owner, sizeof owner, "o%d", i);
    if (i % 3 == 0)
      test_confirm(t, key, owner, i + 1, &a);
    else
      test_reserve(t, key, owner, "a", HOUR, &a);
  }
  resv_answer_clear(&a);
  resv_store_close(s);
}

/* In the child: every key's get against what was stored. */
static tally_t read_all(const char *path) {
  tally_t n = {0};
  resv_options_t o = {.path = path, .sync = RESV_SYNC_PROCESS, .threads = 1};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) return n;
  n.opened = true;
  resv_store_set_time(s, T0);
  resv_type_t *t = resv_store_type(s, "test", 4, "flip", 4, &err);
  resv_answer_t a = {0};
  for (int i = 0; t && i < FLIP_KEYS + FLIP_ABSENT; i++) {
    char key[32], owner[16];
    key_name(key, sizeof key, i);
    snprintf(owner, sizeof owner, "o%d", i);
    if (!get(t, key, &a, &err)) {
      n.errors++;
      continue;
    }
    bool right = i >= FLIP_KEYS ? a.status == RESV_ABSENT
                 : i % 3 == 0   ? a.status == RESV_CONFIRMED && a.version == i + 1 &&
                                    test_str_is(a.owner_id, owner)
                                : a.status == RESV_PENDING && a.expires_at == T0 + HOUR &&
                                    test_str_is(a.owner_id, owner) && a.nholds == 1;
    if (right)
      n.right++;
    else
      n.wrong++;
  }
  if (!t) n.errors = FLIP_KEYS + FLIP_ABSENT;
  resv_answer_clear(&a);
  resv_store_close(s);
  return n;
}

static void write_file(const char *path, const unsigned char *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0660);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, p, n), (ssize_t)n);
  close(fd);
}

/* One trial: the file with bits flipped, read in a child. Returns the
 * child's tally, or opened false and *crashed set when it died. */
static tally_t trial(const unsigned char *orig, size_t size, int bits, unsigned seed,
                     bool *crashed) {
  char tdir[300], file[320];
  snprintf(tdir, sizeof tdir, "%s/t", dir);
  mkdir(tdir, 0770);
  snprintf(file, sizeof file, "%s/lock.mdb", tdir);
  unlink(file);
  unsigned char *copy = malloc(size);
  memcpy(copy, orig, size);
  for (int b = 0; b < bits; b++) {
    size_t bit = ((size_t)rand_r(&seed) << 16 ^ (size_t)rand_r(&seed)) % (size * 8);
    copy[bit / 8] ^= (unsigned char)(1u << (bit % 8));
  }
  snprintf(file, sizeof file, "%s/data.mdb", tdir);
  write_file(file, copy, size);
  free(copy);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    alarm(30);
    tally_t n = read_all(tdir);
    ssize_t w = write(fds[1], &n, sizeof n);
    _exit(w == (ssize_t)sizeof n ? 0 : 1);
  }
  close(fds[1]);
  tally_t n = {0};
  ssize_t r = read(fds[0], &n, sizeof n);
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  *crashed = r != (ssize_t)sizeof n || !WIFEXITED(status);
  if (*crashed) memset(&n, 0, sizeof n);
  return n;
}

static void flip_trials(int bits) {
  fill_store();
  char file[300];
  snprintf(file, sizeof file, "%s/data.mdb", dir);
  FILE *f = fopen(file, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  size_t size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *orig = malloc(size);
  ck_assert_uint_eq(fread(orig, 1, size, f), size);
  fclose(f);
  /* With MDB_WRITEMAP data.mdb is as long as the map, zeros past the pages
   * in use: the trials write and damage only the pages in use (LMDB sizes
   * the file again at open), or most flips would land in pages never read. */
  size_t used = (size_t)test_lmdb_pages(file) * (size_t)sysconf(_SC_PAGESIZE);
  ck_assert_uint_le(used, size);
  size = used;
  int wrong_trials = 0, error_trials = 0, refused = 0, crashed_trials = 0, clean = 0;
  long wrong = 0;
  for (int i = 0; i < FLIP_TRIALS; i++) {
    bool crashed;
    tally_t n = trial(orig, size, bits, (unsigned)(i * 7919 + bits), &crashed);
    if (crashed)
      crashed_trials++;
    else if (!n.opened)
      refused++;
    else if (n.wrong)
      wrong_trials++;
    else if (n.errors)
      error_trials++;
    else
      clean++;
    wrong += n.wrong;
  }
  free(orig);
  printf("flip_trials: %d bits, %d trials on a %zu-byte file: %d answered wrongly (%ld "
         "answers), %d answered some errors and no wrong answer, %d refused at open, "
         "%d crashed, %d answered all right\n", bits, FLIP_TRIALS, size, wrong_trials, wrong,
         error_trials, refused, crashed_trials, clean);
  fflush(stdout);
  ck_assert_msg(wrong_trials == 0, "%d of %d trials with %d flipped bits answered wrongly",
                wrong_trials, FLIP_TRIALS, bits);
  ck_assert_msg(crashed_trials == 0, "%d of %d trials with %d flipped bits crashed",
                crashed_trials, FLIP_TRIALS, bits);
}

START_TEST(flipped_bits_never_give_a_wrong_answer_or_a_crash_8) { flip_trials(8); }
END_TEST

START_TEST(flipped_bits_never_give_a_wrong_answer_or_a_crash_64) { flip_trials(64); }
END_TEST

/* The bytes of a record as file_record.h lays them out: a pending one
 * under a direct key (a hold longer than 127 bytes, its length two bytes
 * of varint, and the record past the buffer's inline bytes), a confirmed
 * one under a hashed key (its key's parts inside). */
static void expect_bytes(const resv__file_buf_t *b, const MDB_val *key,
                         const unsigned char *want, size_t n) {
  uint32_t crc = resv__crc32c(resv__crc32c(0, key->mv_data, key->mv_size), want, n);
  ck_assert_uint_eq(b->len, n + 4);
  ck_assert_msg(memcmp(b->p, want, n) == 0, "the record's bytes differ");
  for (int i = 0; i < 4; i++) ck_assert_uint_eq(b->p[n + (size_t)i], (crc >> (8 * i)) & 0xff);
}

START_TEST(a_record_is_encoded_as_its_layout_says) {
  static char longer[300];
  memset(longer, 'x', sizeof longer);
  unsigned char dkey[] = {1, 't', 0, 'n', 0, 'k'};
  MDB_val key = {sizeof dkey, dkey};
  resv_key_t k = {resv_cstr("t"), resv_cstr("n"), resv_cstr("k")};
  resv_owner_t o = {resv_cstr("ot"), resv_cstr("oid")};
  resv_str_t holds[] = {resv_cstr("a1"), {longer, sizeof longer}};
  resv__file_buf_t b;
  ck_assert(resv__file_rec_encode(&b, &key, &k, &o, false, INT64_C(0x0102030405060708), 0,
                                  holds, 2, 0xdeadbeefu));
  unsigned char want[1 + 4 + 3 + 4 + 8 + 1 + 3 + 2 + sizeof longer] = {
      'P', 0xef, 0xbe, 0xad, 0xde, 2, 'o', 't', 3, 'o', 'i', 'd',
      8, 7, 6, 5, 4, 3, 2, 1, 2, 2, 'a', '1', 0xac, 0x02};
  memset(want + 26, 'x', sizeof longer);
  expect_bytes(&b, &key, want, sizeof want);
  resv__file_buf_free(&b);
  unsigned char hkey[21] = {2};
  memset(hkey + 1, 0xab, 20);
  MDB_val hashed = {sizeof hkey, hkey};
  ck_assert(resv__file_rec_encode(&b, &hashed, &k, &o, true, 0, 7, NULL, 0, 0x01020304u));
  const unsigned char hwant[] = {'c', 4, 3, 2, 1, 1, 't', 1, 'n', 1, 'k', 2, 'o', 't',
                                 3, 'o', 'i', 'd', 7, 0, 0, 0, 0, 0, 0, 0};
  expect_bytes(&b, &hashed, hwant, sizeof hwant);
  resv__file_buf_free(&b);
}
END_TEST

/* The record of key (dkey's) that encode makes of these values, with the
 * right checksum: must decode refuse it, with format? */
static void expect_refused(const resv_key_t *k, const resv_owner_t *o, bool confirmed,
                           int64_t version, const resv_str_t *holds, size_t nholds,
                           const char *what) {
  unsigned char dkey[64] = {1};
  size_t n = 1;
  memcpy(dkey + n, k->tenant.ptr, k->tenant.len), n += k->tenant.len, dkey[n++] = 0;
  memcpy(dkey + n, k->ns.ptr, k->ns.len), n += k->ns.len, dkey[n++] = 0;
  memcpy(dkey + n, k->key.ptr, k->key.len), n += k->key.len;
  MDB_val key = {n, dkey};
  resv__file_buf_t b;
  ck_assert(resv__file_rec_encode(&b, &key, k, o, confirmed, 1000, version, holds, nholds, 0));
  MDB_val val = {b.len, b.p};
  resv__file_rec_t d;
  resv_error_t err = {0};
  ck_assert(resv__file_rec_sound(&key, &val));
  ck_assert_msg(!resv__file_rec_decode(&key, &val, &d, &err), "decoded %s", what);
  ck_assert_int_eq(err.code, RESV_EFORMAT);
  resv__file_buf_free(&b);
}

/* A record's checksum proves it unchanged since it was written, not that
 * what wrote it kept the layout's rules: those are checked on every read
 * as a MongoDB document's are (found by fuzz/fuzz_record.c), and one
 * record has one encoding (no varint longer than it needs). */
START_TEST(a_record_the_layout_does_not_allow_is_refused_though_its_checksum_matches) {
  resv_key_t k = {resv_cstr("t"), resv_cstr("n"), resv_cstr("k")};
  resv_owner_t o = {resv_cstr("ot"), resv_cstr("oid")};
  resv_str_t one[] = {resv_cstr("a1")}, twice[] = {resv_cstr("a1"), resv_cstr("a1")};
  resv_str_t empty[] = {resv_cstr("")}, not_utf8[] = {{"\xff", 1}};
  expect_refused(&k, &(resv_owner_t){resv_cstr("ot"), resv_cstr("")}, false, 0, one, 1,
                 "an empty owner id");
  expect_refused(&(resv_key_t){resv_cstr("t"), resv_cstr(""), resv_cstr("k")}, &o, false, 0,
                 one, 1, "an empty namespace");
  expect_refused(&(resv_key_t){resv_cstr("t"), resv_cstr("n"), {"k\0", 2}}, &o, true, 1,
                 NULL, 0, "a key with a NUL byte");
  expect_refused(&k, &(resv_owner_t){{"\xc0\xaf", 2}, resv_cstr("oid")}, true, 1, NULL, 0,
                 "an owner tenant not UTF-8");
  expect_refused(&k, &o, true, -1, NULL, 0, "a negative version");
  expect_refused(&k, &o, false, 0, twice, 2, "two holds the same");
  expect_refused(&k, &o, false, 0, empty, 1, "an empty hold");
  expect_refused(&k, &o, false, 0, not_utf8, 1, "a hold not UTF-8");

  /* The owner's tenant "ot" with its length as two bytes (0x82 0x00). */
  unsigned char dkey[] = {1, 't', 0, 'n', 0, 'k'};
  MDB_val key = {sizeof dkey, dkey};
  resv__file_buf_t b;
  ck_assert(resv__file_rec_encode(&b, &key, &k, &o, true, 0, 7, NULL, 0, 0));
  MDB_val val = {b.len, b.p};
  resv__file_rec_t d;
  resv_error_t err = {0};
  ck_assert(resv__file_rec_decode(&key, &val, &d, &err)); /* as written: sound */
  unsigned char longer[64];
  ck_assert_uint_eq(b.p[5], 2);
  memcpy(longer, b.p, 5);
  longer[5] = 0x82, longer[6] = 0x00;
  memcpy(longer + 7, b.p + 6, b.len - 10);
  size_t n = b.len - 4 + 1;
  uint32_t crc = resv__crc32c(resv__crc32c(0, dkey, sizeof dkey), longer, n);
  for (int i = 0; i < 4; i++) longer[n + (size_t)i] = (unsigned char)(crc >> (8 * i));
  MDB_val stretched = {n + 4, longer};
  ck_assert(resv__file_rec_sound(&key, &stretched));
  ck_assert(!resv__file_rec_decode(&key, &stretched, &d, &err));
  ck_assert_int_eq(err.code, RESV_EFORMAT);
  resv__file_buf_free(&b);
}
END_TEST

Suite *file_records_suite(void) {
  const TTest *tests[] = {
      a_damaged_record_answers_format_naming_type_and_key,
      a_record_is_encoded_as_its_layout_says,
      a_record_the_layout_does_not_allow_is_refused_though_its_checksum_matches,
      a_store_of_format_1_is_upgraded_at_open, every_write_keeps_the_chain_whole,
      calls_of_several_keys_on_neighbours_keep_the_chain_whole,
      flipped_bits_never_give_a_wrong_answer_or_a_crash_8, flipped_bits_never_give_a_wrong_answer_or_a_crash_64,
      NULL};
  Suite *s = test_suite("file_records", "records", 300, setup, teardown, tests);
  TCase *plan = test_tcase(s, "plan", 60, setup, teardown, (const TTest *[]){NULL});
  tcase_add_loop_test(plan, a_plan_of_several_keys_is_written_only_on_its_own_snapshot, 0, 2);
  tcase_add_loop_test(plan, a_plan_of_one_key_is_written_only_on_its_own_snapshot, 0, 2);
  return s;
}
