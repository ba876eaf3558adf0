/* test_sweep.c: reclaiming and sweep (docs/design.md sections 5 "sweep" and 6).
 *
 * The memory store reclaims on its own: a churn of distinct keys with a
 * short ttl and a clock moving on keeps its live entries and bytes
 * bounded, and a reclaimed key answers absent. sweep, on every store
 * (memory, file, MongoDB through the emulator or MONGODB_URI): deletes
 * exactly the pending reservations expired for at least the grace,
 * answers the count, never touches a confirmed one, a live one, the
 * format record or a document that is not a reservation; and racing
 * reserves of the same keys from other threads, it never deletes one of
 * them that is live. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

#define T0 INT64_C(1700000000000)
#define GRACE 1000

typedef enum { MEMORY, FILE_STORE, MONGO } kind_t;

static const char *kind_name(int kind) {
  return kind == MEMORY ? "memory" : kind == FILE_STORE ? "file" : "mongodb";
}

typedef struct opened {
  resv_store_t *store;
  char dir[256]; /* the file store's directory, else "" */
} opened_t;

static void open_kind(opened_t *o, int kind, int64_t grace) {
  resv_options_t opt = {.threads = 4, .timeout_ms = 10000, .sweep_grace_ms = grace};
  o->dir[0] = '\0';
  if (kind == FILE_STORE) {
    test_temp_dir(o->dir, sizeof o->dir);
    opt.path = o->dir;
    opt.map_size = 64 << 20;
  } else if (kind == MONGO) {
    opt.uri = test_mongo_uri();
  }
  resv_error_t err;
  o->store = resv_store_open(&opt, &err);
  ck_assert_msg(o->store != NULL, "open %s: %s", kind_name(kind), err.message);
}

static void close_kind(opened_t *o) {
  resv_store_close(o->store);
  if (o->dir[0]) test_remove_dir(o->dir);
}

static int64_t sweep_count(resv_type_t *t) {
  resv_answer_t a = {0};
  resv_error_t err;
  ck_assert_msg(resv_sweep(t, &a, &err), "sweep: %s: %s", resv_code_name(err.code),
                err.message);
  ck_assert_int_eq(a.status, RESV_SWEPT);
  int64_t n = a.count;
  resv_answer_clear(&a);
  return n;
}

static int32_t get_status(resv_type_t *t, const char *key) {
  resv_answer_t a = {0};
  test_get(t, key, &a);
  int32_t s = a.status;
  resv_answer_clear(&a);
  return s;
}

/* ---- the memory store reclaims on its own ----------------------------- */

/* A memory store whose reservations may be reclaimed grace_ms after they
 * expire. */
static resv_store_t *memory_with_grace(int64_t grace_ms) {
  resv_options_t opt = {.sweep_grace_ms = grace_ms};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&opt, &err);
  ck_assert_msg(s != NULL, "%s", err.message);
  return s;
}

/* n gets of keys nobody holds: the calls that drive the reclaiming walk. */
static void calls_elsewhere(resv_type_t *t, int n) {
  resv_answer_t a = {0};
  char key[32];
  for (int i = 0; i < n; i++) {
    snprintf(key, sizeof key, "other%d", i);
    test_get(t, key, &a);
  }
  resv_answer_clear(&a);
}

START_TEST(test_memory_churn_stays_bounded_and_reclaimed_keys_are_absent) {
  resv_store_t *s = memory_with_grace(100);
  resv_type_t *t = test_fresh_type(s, "churn");
  resv_answer_t a = {0};
  int64_t now = T0, entries, bytes, peak_entries = 0, peak_bytes = 0;
  char key[32];
  /* One key a millisecond, ttl 100 ms, grace 100 ms: about 200 entries
   * are live or within the grace at any time. */
  for (int i = 0; i < 200000; i++) {
    resv_store_set_time(s, now++);
    snprintf(key, sizeof key, "k%d@example.com", i);
    test_reserve(t, key, "o", "a", 100, &a);
    ck_assert_int_eq(a.status, RESV_RESERVED);
    if (i % 1000 == 999) {
      ck_assert(resv__store_usage(s, &entries, &bytes));
      if (i >= 10000) { /* past the first rounds */
        if (entries > peak_entries) peak_entries = entries;
        if (bytes > peak_bytes) peak_bytes = bytes;
      }
    }
  }
  /* Without reclaiming there would be 200,000 entries and ~40 MB. */
  ck_assert_msg(peak_entries < 3000, "entries grew to %" PRId64, peak_entries);
  ck_assert_msg(peak_bytes < 1000000, "bytes grew to %" PRId64, peak_bytes);
  /* The first keys went long ago: absent, not expired. */
  ck_assert_int_eq(get_status(t, "k0@example.com"), RESV_ABSENT);
  ck_assert_int_eq(get_status(t, "k5000@example.com"), RESV_ABSENT);
  /* The last one is live. */
  ck_assert_int_eq(get_status(t, "k199999@example.com"), RESV_PENDING);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

START_TEST(test_memory_reclaims_neither_confirmed_nor_within_the_grace) {
  resv_store_t *s = memory_with_grace(100);
  resv_type_t *t = test_fresh_type(s, "keep");
  resv_answer_t a = {0};
  resv_store_set_time(s, T0);
  test_confirm(t, "confirmed", "o", 3, &a);
  test_reserve(t, "in-grace", "o", "a", 10, &a);
  /* In the grace: expired, but kept whatever the walk visits. */
  resv_store_set_time(s, T0 + 10 + 99);
  calls_elsewhere(t, 20000);
  ck_assert_int_eq(get_status(t, "in-grace"), RESV_EXPIRED);
  /* Past it, many calls later: gone; the confirmed one stays. */
  resv_store_set_time(s, T0 + 10 + 100);
  calls_elsewhere(t, 20000);
  ck_assert_int_eq(get_status(t, "in-grace"), RESV_ABSENT);
  ck_assert_int_eq(get_status(t, "confirmed"), RESV_CONFIRMED);
  resv_store_set_time(s, T0 + INT64_C(1000000000));
  ck_assert_int_eq(sweep_count(t), 0);
  ck_assert_int_eq(get_status(t, "confirmed"), RESV_CONFIRMED);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

START_TEST(test_memory_reclaims_short_ttls_behind_long_ones) {
  /* The walk is skipped while no pending entry of a stripe can be past the
   * grace (its bound); entries with a long ttl, then short ones, then the
   * clock past the short ones: the short ones go, the long ones stay. */
  resv_store_t *s = memory_with_grace(100);
  resv_type_t *t = test_fresh_type(s, "mixed");
  resv_answer_t a = {0};
  int64_t entries = 0, bytes = 0;
  char key[32];
  resv_store_set_time(s, T0);
  for (int i = 0; i < 2000; i++) {
    snprintf(key, sizeof key, "long%d", i);
    test_reserve(t, key, "o", "a", 3600000, &a);
  }
  /* Past the long ones' first rounds: calls that reclaim nothing. */
  resv_store_set_time(s, T0 + 1000);
  calls_elsewhere(t, 20000);
  for (int i = 0; i < 2000; i++) {
    snprintf(key, sizeof key, "short%d", i);
    test_reserve(t, key, "o", "a", 10, &a);
  }
  resv_store_set_time(s, T0 + 1000 + 10 + 100);
  calls_elsewhere(t, 40000);
  ck_assert(resv__store_usage(s, &entries, &bytes));
  ck_assert_int_eq(entries, 2000);
  ck_assert_int_eq(get_status(t, "short0"), RESV_ABSENT);
  ck_assert_int_eq(get_status(t, "short1999"), RESV_ABSENT);
  ck_assert_int_eq(get_status(t, "long0"), RESV_PENDING);
  ck_assert_int_eq(get_status(t, "long1999"), RESV_PENDING);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

START_TEST(test_sweep_grace_ms_out_of_range_is_invalid) {
  resv_options_t opt = {.sweep_grace_ms = -1};
  resv_error_t err;
  ck_assert_ptr_null(resv_store_open(&opt, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_ptr_nonnull(strstr(err.message, "sweep_grace_ms"));
  opt.sweep_grace_ms = (INT64_C(1) << 53) + 1;
  ck_assert_ptr_null(resv_store_open(&opt, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
}
END_TEST

/* ---- sweep on every store ---------------------------------------------- */

START_TEST(test_sweep_deletes_exactly_the_expired_past_the_grace) {
  opened_t o;
  open_kind(&o, _i, GRACE);
  resv_type_t *t = test_fresh_type(o.store, "sweep");
  resv_answer_t a = {0};
  char key[32];
  resv_store_set_time(o.store, T0);
  ck_assert_int_eq(sweep_count(t), 0); /* a type with nothing in it */
  for (int i = 0; i < 30; i++) { /* expire at T0 + 10 */
    snprintf(key, sizeof key, "old%d", i);
    test_reserve(t, key, "o", "a", 10, &a);
  }
  for (int i = 0; i < 5; i++) { /* expire at T0 + 10 + GRACE + 1 */
    snprintf(key, sizeof key, "young%d", i);
    test_reserve(t, key, "o", "a", 10 + GRACE + 1, &a);
  }
  for (int i = 0; i < 4; i++) {
    snprintf(key, sizeof key, "sure%d", i);
    test_confirm(t, key, "o", i, &a);
  }
  resv_store_set_time(o.store, T0 + 10 + GRACE - 1); /* within the grace */
  ck_assert_int_eq(sweep_count(t), 0);
  resv_store_set_time(o.store, T0 + 10 + GRACE); /* exactly the grace */
  ck_assert_int_eq(sweep_count(t), 30);
  ck_assert_int_eq(sweep_count(t), 0);
  ck_assert_int_eq(get_status(t, "old0"), RESV_ABSENT);
  ck_assert_int_eq(get_status(t, "old29"), RESV_ABSENT);
  ck_assert_int_eq(get_status(t, "young4"), RESV_PENDING); /* one ms left */
  ck_assert_int_eq(get_status(t, "sure3"), RESV_CONFIRMED);
  resv_store_set_time(o.store, T0 + INT64_C(1000000000));
  ck_assert_int_eq(sweep_count(t), 5);
  ck_assert_int_eq(get_status(t, "sure0"), RESV_CONFIRMED);
  /* A swept key is free: anyone takes it. */
  test_reserve(t, "old0", "p", "b", 10, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert(test_str_is(a.owner_id, "p"));
  resv_answer_clear(&a);
  close_kind(&o);
}
END_TEST

/* A bad timeout is refused as for any call; a sweep takes no key. */
START_TEST(test_sweep_needs_no_key_and_checks_its_timeout) {
  resv_store_t *s = test_open(NULL);
  resv_type_t *t = test_fresh_type(s, "sweepargs");
  resv_request_t r = {.op = RESV_OP_SWEEP, .timeout_ms = -1};
  resv_answer_t a = {0};
  resv_error_t err;
  ck_assert(!resv_call(t, &r, &a, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  r.timeout_ms = 0;
  ck_assert(resv_call(t, &r, &a, &err));
  ck_assert_int_eq(a.status, RESV_SWEPT);
  ck_assert_int_eq(a.count, 0);
  ck_assert_str_eq(resv_status_name(RESV_SWEPT), "swept");
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* ---- sweep racing reserve ------------------------------------------------ */

#define RACE_KEYS 200

typedef struct racer {
  resv_type_t *type;
  int reserved; /* answers reserved */
  bool done;
} racer_t;

/* Takes every "race<i>" over with a live reservation (ttl far past the
 * clock), while the main thread sweeps. */
static void *take_over(void *arg) {
  racer_t *r = arg;
  resv_answer_t a = {0};
  char key[32];
  for (int i = 0; i < RACE_KEYS; i++) {
    snprintf(key, sizeof key, "race%d", i);
    test_reserve(r->type, key, "taker", "t", INT64_C(1000000000), &a);
    if (a.status == RESV_RESERVED && test_str_is(a.owner_id, "taker")) r->reserved++;
  }
  resv_answer_clear(&a);
  __atomic_store_n(&r->done, true, __ATOMIC_RELEASE);
  return NULL;
}

START_TEST(test_sweep_racing_reserve_never_deletes_a_live_reservation) {
  opened_t o;
  open_kind(&o, _i, GRACE);
  resv_type_t *t = test_fresh_type(o.store, "race");
  resv_answer_t a = {0};
  char key[32];
  resv_store_set_time(o.store, T0);
  for (int i = 0; i < RACE_KEYS; i++) { /* the keys the taker takes over */
    snprintf(key, sizeof key, "race%d", i);
    test_reserve(t, key, "first", "f", 10, &a);
  }
  for (int i = 0; i < 50; i++) { /* expired and never taken: all swept */
    snprintf(key, sizeof key, "gone%d", i);
    test_reserve(t, key, "first", "f", 10, &a);
  }
  for (int i = 0; i < 20; i++) { /* confirmed: never swept */
    snprintf(key, sizeof key, "kept%d", i);
    test_confirm(t, key, "first", 1, &a);
  }
  /* Every pending one is now expired past the grace. */
  resv_store_set_time(o.store, T0 + 10 + GRACE + 5);
  racer_t r = {.type = t};
  pthread_t thread;
  ck_assert_int_eq(pthread_create(&thread, NULL, take_over, &r), 0);
  int64_t swept = 0;
  int sweeps = 0;
  do {
    swept += sweep_count(t);
    sweeps++;
  } while (!__atomic_load_n(&r.done, __ATOMIC_ACQUIRE));
  pthread_join(thread, NULL);
  ck_assert_int_eq(r.reserved, RACE_KEYS);
  /* Every key the taker took is there, live and the taker's. */
  for (int i = 0; i < RACE_KEYS; i++) {
    snprintf(key, sizeof key, "race%d", i);
    test_get(t, key, &a);
    ck_assert_msg(a.status == RESV_PENDING && test_str_is(a.owner_id, "taker"),
                  "%s on %s: %s after %d sweeps", key, kind_name(_i),
                  resv_status_name(a.status), sweeps);
  }
  for (int i = 0; i < 20; i++) {
    snprintf(key, sizeof key, "kept%d", i);
    ck_assert_int_eq(get_status(t, key), RESV_CONFIRMED);
  }
  /* The count: the 50 never taken, plus the ones a sweep got before the
   * taker did, at most; nothing is left to sweep. */
  swept += sweep_count(t);
  ck_assert_msg(swept <= 50 + RACE_KEYS, "swept %" PRId64, swept);
  /* The embedded stores reclaim a few as the taker writes, uncounted. */
  ck_assert_msg(_i != MONGO || swept >= 50, "swept %" PRId64, swept);
  ck_assert_int_eq(sweep_count(t), 0);
  for (int i = 0; i < 50; i++) {
    snprintf(key, sizeof key, "gone%d", i);
    ck_assert_int_eq(get_status(t, key), RESV_ABSENT);
  }
  int64_t entries, bytes;
  if (resv__store_usage(o.store, &entries, &bytes))
    ck_assert_int_eq(entries, RACE_KEYS + 20);
  resv_answer_clear(&a);
  close_kind(&o);
}
END_TEST

/* ---- what a sweep never deletes on MongoDB ------------------------------- */

START_TEST(test_mongo_sweep_leaves_foreign_documents_and_the_format_record) {
  opened_t o;
  open_kind(&o, MONGO, GRACE);
  resv_type_t *t = test_fresh_type(o.store, "foreign");
  resv_answer_t a = {0};
  resv_store_set_time(o.store, T0);
  test_reserve(t, "real", "o", "a", 10, &a); /* sets the collection up */
  emu_raw_t raw;
  emu_raw_open(&raw, test_mongo_uri(), resv_type_collection(t));
  /* Expired long ago by their expires_at, but not format-1 reservations. */
  emu_raw_insert(&raw, "{\"_id\": {\"t\": \"\", \"n\": \"email\", \"k\": \"bad1\"},"
                       " \"tenant_id\": \"\", \"key\": \"bad1\","
                       " \"owner\": {\"tenant_id\": \"\", \"id\": \"o\"},"
                       " \"expires_at\": {\"$numberLong\": \"5\"}, \"holds\": \"a\"}");
  emu_raw_insert(&raw, "{\"_id\": {\"t\": \"\", \"n\": \"email\", \"k\": \"bad2\"},"
                       " \"tenant_id\": \"\", \"key\": \"bad2\","
                       " \"owner\": {\"tenant_id\": \"\", \"id\": \"o\"},"
                       " \"expires_at\": {\"$numberLong\": \"5\"}, \"holds\": [\"a\"],"
                       " \"extra\": 1}");
  emu_raw_insert(&raw, "{\"_id\": \"other\", \"expires_at\": {\"$numberLong\": \"5\"}}");
  resv_store_set_time(o.store, T0 + INT64_C(1000000000));
  ck_assert_int_eq(sweep_count(t), 1); /* "real" only */
  ck_assert_int_eq(emu_raw_count(&raw, "{\"_id\": \"format\"}"), 1);
  ck_assert_int_eq(emu_raw_count(&raw, "{\"_id.k\": {\"$in\": [\"bad1\", \"bad2\"]}}"), 2);
  ck_assert_int_eq(emu_raw_count(&raw, "{\"_id\": \"other\"}"), 1);
  emu_raw_close(&raw);
  resv_answer_clear(&a);
  close_kind(&o);
}
END_TEST

/* A file store's sweep leaves a record that is not a reservation too;
 * test_file_store.c plants them (reclaiming is tested there). Here: a
 * sweep over more records than one of its transactions visits. */
START_TEST(test_file_sweep_covers_more_than_one_chunk) {
  opened_t o;
  open_kind(&o, FILE_STORE, GRACE);
  resv_type_t *t = test_fresh_type(o.store, "chunks");
  resv_answer_t a = {0};
  char key[32];
  resv_store_set_time(o.store, T0);
  for (int i = 0; i < 3000; i++) {
    snprintf(key, sizeof key, "c%d", i);
    if (i % 3)
      test_reserve(t, key, "o", "a", 10, &a);
    else
      test_confirm(t, key, "o", 1, &a);
  }
  /* Writes reclaim a few as they go: count from a clock past the grace
   * only now, so they could not. */
  resv_store_set_time(o.store, T0 + 10 + GRACE);
  ck_assert_int_eq(sweep_count(t), 2000);
  ck_assert_int_eq(sweep_count(t), 0);
  ck_assert_int_eq(get_status(t, "c0"), RESV_CONFIRMED);
  ck_assert_int_eq(get_status(t, "c1"), RESV_ABSENT);
  resv_answer_clear(&a);
  close_kind(&o);
}
END_TEST

Suite *sweep_suite(void) {
  const test_entry_t tests[] = {
      {test_memory_churn_stays_bounded_and_reclaimed_keys_are_absent, 0, 0},
      {test_memory_reclaims_neither_confirmed_nor_within_the_grace, 0, 0},
      {test_memory_reclaims_short_ttls_behind_long_ones, 0, 0},
      {test_sweep_grace_ms_out_of_range_is_invalid, 0, 0},
      {test_sweep_deletes_exactly_the_expired_past_the_grace, MEMORY, MONGO + 1},
      {test_sweep_needs_no_key_and_checks_its_timeout, 0, 0},
      {test_sweep_racing_reserve_never_deletes_a_live_reservation, MEMORY, MONGO + 1},
      {test_mongo_sweep_leaves_foreign_documents_and_the_format_record, 0, 0},
      {test_file_sweep_covers_more_than_one_chunk, 0, 0},
      {NULL, 0, 0}};
  return test_suite_loops("sweep", "sweep", 120, NULL, NULL, tests);
}
