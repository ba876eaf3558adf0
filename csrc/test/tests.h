/* tests.h: what the Check suites share: the suite list and small helpers
 * to build keys, owners and stores without noise in every test. */
#ifndef RESV_TESTS_H
#define RESV_TESTS_H

#include <check.h>
#include <lmdb.h>

#include "internal.h"

/* Suites, one per file (main.c runs them all; CK_RUN_SUITE picks one). */
Suite *validate_suite(void);
Suite *rules_memory_suite(void);
Suite *rules_mongo_suite(void);
Suite *race_suite(void);
Suite *pool_suite(void);
Suite *faults_suite(void);
Suite *stress_suite(void);
Suite *security_suite(void);
Suite *mongo_decode_suite(void), *mongo_log_suite(void), *mongo_store_suite(void), *mongo_diff_suite(void);
Suite *mongo_replset_suite(void), *failover_suite(void), *deploy_suite(void);
Suite *partition_suite(void), *mongo_sweep_suite(void);
Suite *job_suite(void), *store_suite(void), *memory_suite(void);
Suite *rules_file_suite(void), *file_store_suite(void), *file_diff_suite(void);
Suite *file_integrity_suite(void);
/* The file_integrity suite's test case without inotify (test_file_unwatched.c). */
void file_unwatched_tcase(Suite *s);
/* Its test case of a disk that fails a flush (test_file_flush.c). */
void file_flush_tcase(Suite *s);
/* Its test case of the watches' ring (test_file_ring.c). */
void file_ring_tcase(Suite *s);
/* The walk of data.mdb at open (test_file_walk.c). */
void file_walk_tcase(Suite *s);
/* The store suite's test case of the host's signals (test_signals.c). */
void signals_tcase(Suite *s);
Suite *file_records_suite(void);
Suite *file_state_suite(void);
Suite *rules_all_suite(void), *rules_model_suite(void);

/* A test case named name in s: setup and teardown as its checked fixture
 * (NULL: none), timeout seconds (0: Check's default), the tests of the
 * NULL-terminated list added in order. Returned for loop tests. */
TCase *test_tcase(Suite *s, const char *name, double timeout, void (*setup)(void),
                  void (*teardown)(void), const TTest *const *tests);
/* Adds the tests of the NULL-terminated list to tc, in order: a test case
 * whose tests live in several files. */
void test_tcase_add(TCase *tc, const TTest *const *tests);
/* A new suite of one test case, test_tcase's. */
Suite *test_suite(const char *name, const char *tcase, double timeout, void (*setup)(void),
                  void (*teardown)(void), const TTest *const *tests);

/* One test of a list with loop tests: to 0, a plain test; else a loop
 * test over from .. to-1. A list ends with {NULL}. */
typedef struct test_entry {
  const TTest *test;
  int from, to;
} test_entry_t;

/* test_suite of a list with loop tests, added in order. */
Suite *test_suite_loops(const char *name, const char *tcase, double timeout,
                        void (*setup)(void), void (*teardown)(void),
                        const test_entry_t *tests);

/* Opens the LMDB environment of dir directly (no store may have it open
 * in this process), database db with flags (MDB_CREATE or 0), mapsize
 * bytes when not 0, and runs fn in one write transaction, committed. */
void test_with_lmdb(const char *dir, const char *db, unsigned int flags, size_t mapsize,
                    void (*fn)(MDB_txn *, MDB_dbi, void *), void *arg);

/* The pages in use of an LMDB file (data_mdb), as
 * its newer meta page says: the meta pages' transaction ids at byte 144
 * of each, the newer's last page at byte 136, + 1 (LMDB 0.9 on 64 bits,
 * pages of the system's size). */
uint64_t test_lmdb_pages(const char *data_mdb);

/* The differential test (diff.c): seed's sequence of steps random calls on
 * memory and other side by side, every answer compared (other_name names
 * other in a divergence). long_key (or NULL) stands in for one key. Both
 * stores must reclaim after TEST_DIFF_GRACE ms. */
#define TEST_DIFF_GRACE 3000
#define TEST_DIFF_SEEDS 4
extern const uint64_t test_diff_seeds[TEST_DIFF_SEEDS];
/* RESV_TEST_STEPS, else 2,500 (300 under RESV_TEST_SLOW). */
int test_diff_steps(void);
void test_diff_run(resv_store_t *memory, resv_store_t *other, const char *other_name,
                   uint64_t seed, int steps, int32_t max_holds, const char *long_key);
Suite *sweep_suite(void), *stats_suite(void), *scan_suite(void);
Suite *no_create_suite(void);
Suite *nonblocking_suite(void);
Suite *mongo_options_suite(void), *mongo_retry_suite(void);
Suite *mongo_skew_suite(void), *mongo_inline_suite(void);
Suite *mongo_all_suite(void), *mongo_all_faults_suite(void);
Suite *mongo_build_suite(void), *mongo_inplace_suite(void);

/* The MongoDB the integration suites use: RESV_TEST_URI, set by
 * scripts/with-mongo to MONGODB_URI or a fresh emulator. Fails the
 * calling test when unset, so a suite never passes by skipping. */
const char *test_mongo_uri(void);

/* A store: uri NULL for memory. Fails the test on error. */
resv_store_t *test_open(const char *uri);

/* A new empty directory for a file store, in $TMPDIR or /tmp, into out
 * (size bytes); test_remove_dir deletes it and what it holds. */
void test_temp_dir(char *out, size_t size);
void test_remove_dir(const char *path);

/* What this process writes to stderr between test_stderr_begin and
 * test_stderr_end (a static buffer, NUL-terminated, the first 64 KiB). */
void test_stderr_begin(void);
const char *test_stderr_end(void);

/* Forked children, for what may crash the process or must run alone
 * (another user, a namespace of its own). test_child_run runs fn(arg) in
 * a child and returns its wait status, with the text it reported into msg
 * (size bytes, NUL-terminated). In the child, test_child_end reports a
 * text and ends with status code, test_child_exit ends without one; both
 * end through exec, so a leak checker watching the parent (make valgrind)
 * has nothing to say about the child's copy of the parent's memory. */
int test_child_run(void (*fn)(void *), void *arg, char *msg, size_t size);
__attribute__((format(printf, 2, 3))) void test_child_end(int code, const char *fmt, ...);
void test_child_exit(int code);

/* A file store on path with sync (resv_sync_t). Fails the test on error. */
resv_store_t *test_open_file(const char *path, int32_t sync);

/* A type whose collection no other test of this run uses. */
resv_type_t *test_fresh_type(resv_store_t *store, const char *prefix);

resv_key_t test_key(const char *ns, const char *key);
resv_owner_t test_owner(const char *tenant, const char *id);

/* resv_call for one op, failing the test on error. */
void test_reserve(resv_type_t *t, const char *key, const char *owner,
                  const char *attempt, int64_t ttl, resv_answer_t *a);
void test_confirm(resv_type_t *t, const char *key, const char *owner,
                  int64_t version, resv_answer_t *a);
void test_abandon(resv_type_t *t, const char *key, const char *owner,
                  const char *attempt, resv_answer_t *a);
void test_release(resv_type_t *t, const char *key, const char *owner,
                  resv_answer_t *a);
void test_get(resv_type_t *t, const char *key, resv_answer_t *a);

/* True when the answer's holds are exactly the given attempts, in any
 * order (n of them). */
bool test_holds_are(const resv_answer_t *a, size_t n, const char *const *attempts);
bool test_str_is(resv_str_t s, const char *want);

/* The differential tests' view of docs/design.md section 5: past the grace, an
 * expired reservation and none are the same. Releases k's reservation
 * when it is pending and expired at or before limit (the latest clock
 * of the run minus the grace: what a store may have reclaimed by now),
 * so that two stores that reclaim at different times compare alike. */
void test_forget_reclaimable(resv_type_t *t, const resv_key_t *k, int64_t limit);

#endif
