/* test_file_flush.c: sync = "disk" when the disk fails a flush
 * (docs/file-store.md, "Durability"). The write whose commit was not
 * flushed answers the error, and so does every write after it, whatever
 * later flushes say: after a failed fdatasync Linux may have dropped the
 * pages it could not write and marked them clean, so a later flush that
 * succeeds proves nothing about them. Reads go on, and the store opened
 * again takes writes.
 *
 * The flush fails through this file's fdatasync, which stands in for the
 * C library's for the whole test program (LMDB calls it from its shared
 * library) and fails with EIO while flush_fails is set; otherwise it is
 * the system call (exported: the build hides symbols by default). */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests.h"

static atomic_bool flush_fails;

__attribute__((visibility("default"))) int fdatasync(int fd) {
  if (atomic_load(&flush_fails)) {
    errno = EIO;
    return -1;
  }
  return (int)syscall(SYS_fdatasync, fd);
}

static char dir[256];

static void setup(void) { test_temp_dir(dir, sizeof dir); }

static void teardown(void) {
  atomic_store(&flush_fails, false);
  test_remove_dir(dir);
}

static resv_store_t *open_disk(resv_type_t **t) {
  resv_error_t err;
  resv_options_t o = {.path = dir, .sync = RESV_SYNC_DISK, .threads = 2};
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s != NULL, "open: %s", err.message);
  *t = resv_store_type(s, "test", 4, "seat", 4, &err);
  ck_assert_msg(*t != NULL, "type: %s", err.message);
  return s;
}

static bool reserve(resv_type_t *t, const char *key, resv_answer_t *a, resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", key),
                      .owner = test_owner("", "ann"), .attempt = resv_cstr("a"),
                      .ttl_ms = 3600 * 1000};
  return resv_call(t, &r, a, err);
}

static void expect_flush_error(resv_type_t *t, const char *key) {
  resv_answer_t a = {0};
  resv_error_t err;
  ck_assert_msg(!reserve(t, key, &a, &err), "%s answered %s", key,
                resv_status_name(a.status));
  ck_assert_int_eq(err.code, RESV_EUNAVAILABLE);
  ck_assert_msg(strstr(err.message, "failed to flush"), "%s", err.message);
  resv_answer_clear(&a);
}

/* In a child: the store opened again takes a write and kept "before";
 * 0, or the step that failed. */
static int reopened(void) {
  resv_error_t err;
  resv_options_t o = {.path = dir, .sync = RESV_SYNC_DISK};
  resv_store_t *s = resv_store_open(&o, &err);
  resv_type_t *t = s ? resv_store_type(s, "test", 4, "seat", 4, &err) : NULL;
  resv_answer_t a = {0};
  if (!t) return 1;
  if (!reserve(t, "reopened", &a, &err) || a.status != RESV_RESERVED) return 2;
  resv_request_t g = {.op = RESV_OP_GET, .key = test_key("email", "before")};
  if (!resv_call(t, &g, &a, &err) || a.status != RESV_PENDING) return 3;
  resv_answer_clear(&a);
  resv_store_close(s);
  return 0;
}

START_TEST(a_failed_flush_fails_every_write_after_it) {
  resv_type_t *t;
  resv_store_t *s = open_disk(&t);
  resv_answer_t a = {0};
  resv_error_t err;
  ck_assert_msg(reserve(t, "before", &a, &err), "%s", err.message);
  atomic_store(&flush_fails, true);
  expect_flush_error(t, "during");
  atomic_store(&flush_fails, false);
  expect_flush_error(t, "after"); /* the flushes work again: still refused */
  test_get(t, "before", &a);      /* reads go on */
  ck_assert_int_eq(a.status, RESV_PENDING);
  resv_answer_clear(&a);
  resv_store_close(s);
  /* Opened again by another process (a store opened here while this
   * one's reaper still closes it would share its environment), once the
   * reaper is done, so that the child inherits no thread; the child ends
   * through exec, so its own store's reaper is not reported as a leaked
   * thread at its exit (ThreadSanitizer's exit status 66). */
  for (int i = 0; i < 3000 && resv__store_reapers() > 0; i++) usleep(10 * 1000);
  ck_assert_int_eq(resv__store_reapers(), 0);
  pid_t child = fork();
  if (child == 0) test_child_exit(reopened());
  int status = 0;
  ck_assert_int_eq(waitpid(child, &status, 0), child);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "the store opened again: step %d failed", WEXITSTATUS(status));
}
END_TEST

void file_flush_tcase(Suite *s) {
  static const TTest *const none[] = {NULL};
  TCase *tc = test_tcase(s, "file_flush", 60, setup, teardown, none);
  tcase_add_test(tc, a_failed_flush_fails_every_write_after_it);
}
