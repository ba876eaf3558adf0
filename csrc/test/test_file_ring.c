/* test_file_ring.c: the file store's watches read only when the kernel
 * says they have news (file_ring.h). A test case of the file_integrity
 * suite.
 *
 * On the thread that opened the store, a quiet store reads no queue at
 * all, and a change another process makes is read, and acted on, at the
 * very next call. Any other thread, and a store without a ring, reads the
 * queue at every transaction. Where the kernel makes no such ring (before
 * Linux 6.1, or io_uring refused), the tests of the ring skip, saying so
 * on stderr; the fallback's test runs everywhere. */
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "file_check.h"
#include "tests.h"

#define HOUR (3600 * 1000)

static char dir[256];

/* No checkpoint while a test counts (its thread reads the queue too),
 * and no store of an earlier test still closing. */
static void setup(void) {
  setenv("RESV_CHECKPOINT_IDLE_MS", "600000", 1);
  for (int i = 0; i < 3000 && resv__store_reapers() > 0; i++) usleep(10 * 1000);
  ck_assert_int_eq(resv__store_reapers(), 0);
  test_temp_dir(dir, sizeof dir);
}

static void teardown(void) {
  unsetenv("RESV_CHECKPOINT_IDLE_MS");
  test_remove_dir(dir);
}

/* Whether this kernel makes the ring the store asks for. */
static bool rings_made(void) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
  int fd = (int)syscall(__NR_io_uring_setup, 4, &p);
  if (fd < 0) {
    fprintf(stderr, "file_integrity: skipped a test of the watches' ring: %s\n", strerror(errno));
    return false;
  }
  close(fd);
  return true;
}

static resv_type_t *type_of(resv_store_t *s) {
  resv_error_t err;
  resv_type_t *t = resv_store_type(s, "test", 4, "seat", 4, &err);
  ck_assert_msg(t, "type: %s", err.message);
  return t;
}

/* A get of seat@x: true with pending, false with the error in *err. */
static bool get_seat(resv_type_t *t, resv_error_t *err) {
  resv_answer_t a = {0};
  resv_request_t r = {.op = RESV_OP_GET, .key = test_key("email", "seat@x")};
  if (!resv_call(t, &r, &a, err)) return false;
  ck_assert_int_eq(a.status, RESV_PENDING);
  resv_answer_clear(&a);
  return true;
}

static resv_type_t *store_with_seat(resv_store_t **s) {
  *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_type_t *t = type_of(*s);
  resv_answer_t a = {0};
  test_reserve(t, "seat@x", "a", "a", HOUR, &a);
  resv_answer_clear(&a);
  return t;
}

/* In another process: a file made and removed in the store's directory
 * (two events the store reads and lets pass). */
static void touch_dir(void *arg) {
  (void)arg;
  char file[300];
  snprintf(file, sizeof file, "%s/other", dir);
  int fd = open(file, O_CREAT | O_WRONLY, 0600);
  test_child_exit(fd >= 0 && close(fd) == 0 && unlink(file) == 0 ? 0 : 1);
}

/* In another process: data.mdb cut to nothing. */
static void empty_data(void *arg) {
  (void)arg;
  char file[300];
  snprintf(file, sizeof file, "%s/data.mdb", dir);
  test_child_exit(truncate(file, 0) == 0 ? 0 : 1);
}

static void in_other_process(void (*fn)(void *)) {
  char msg[256];
  int status = test_child_run(fn, NULL, msg, sizeof msg);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the other process: %d %s",
                status, msg);
}

START_TEST(a_quiet_store_reads_no_queue_and_reads_a_change_at_the_next_call) {
  if (!rings_made()) return;
  resv_store_t *s;
  resv_type_t *t = store_with_seat(&s);
  resv_error_t err;
  uint64_t before = resv__file_identity_reads();
  for (int i = 0; i < 1000; i++) ck_assert_msg(get_seat(t, &err), "%s", err.message);
  ck_assert_uint_eq(resv__file_identity_reads(), before);
  in_other_process(touch_dir);
  ck_assert_msg(get_seat(t, &err), "%s", err.message);
  ck_assert_uint_eq(resv__file_identity_reads(), before + 1);
  for (int i = 0; i < 1000; i++) ck_assert_msg(get_seat(t, &err), "%s", err.message);
  ck_assert_uint_eq(resv__file_identity_reads(), before + 1);
  /* A change that matters, made elsewhere, answers at the next call. */
  in_other_process(empty_data);
  ck_assert(!get_seat(t, &err));
  ck_assert_msg(err.code == RESV_EFORMAT && strstr(err.message, "truncated"), "%s: %s",
                resv_code_name(err.code), err.message);
  resv_store_close(s);
}
END_TEST

typedef struct gets {
  resv_type_t *t;
  int n;
  uint64_t reads; /* the queue's reads during the gets */
  resv_error_t err;
  bool ok;
} gets_t;

static void *gets_on_a_thread(void *arg) {
  gets_t *g = arg;
  uint64_t before = resv__file_identity_reads();
  g->ok = true;
  for (int i = 0; i < g->n && g->ok; i++) g->ok = get_seat(g->t, &g->err);
  g->reads = resv__file_identity_reads() - before;
  return NULL;
}

static void gets_elsewhere(gets_t *g) {
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, gets_on_a_thread, g), 0);
  ck_assert_int_eq(pthread_join(th, NULL), 0);
}

/* The ring is its thread's: another reads the queue itself, every time,
 * and sees a change another process made. */
START_TEST(another_thread_reads_the_queue_at_every_call) {
  if (!rings_made()) return;
  resv_store_t *s;
  gets_t g = {.t = store_with_seat(&s), .n = 100};
  gets_elsewhere(&g);
  ck_assert_msg(g.ok, "%s", g.err.message);
  ck_assert_uint_ge(g.reads, 100);
  in_other_process(empty_data);
  g.n = 1;
  gets_elsewhere(&g);
  ck_assert(!g.ok);
  ck_assert_msg(g.err.code == RESV_EFORMAT, "%s: %s", resv_code_name(g.err.code),
                g.err.message);
  resv_store_close(s);
}
END_TEST

/* Without a ring (an older kernel, a sandbox), every call reads. */
START_TEST(without_a_ring_every_call_reads_the_queue) {
  atomic_store(&resv__file_ring_refused, true);
  resv_store_t *s;
  resv_type_t *t = store_with_seat(&s);
  resv_error_t err;
  uint64_t before = resv__file_identity_reads();
  for (int i = 0; i < 100; i++) ck_assert_msg(get_seat(t, &err), "%s", err.message);
  ck_assert_uint_ge(resv__file_identity_reads(), before + 100);
  in_other_process(empty_data);
  ck_assert(!get_seat(t, &err));
  ck_assert_int_eq(err.code, RESV_EFORMAT);
  resv_store_close(s);
  atomic_store(&resv__file_ring_refused, false);
}
END_TEST

void file_ring_tcase(Suite *s) {
  const TTest *tests[] = {
      a_quiet_store_reads_no_queue_and_reads_a_change_at_the_next_call,
      another_thread_reads_the_queue_at_every_call,
      without_a_ring_every_call_reads_the_queue,
      NULL,
  };
  test_tcase(s, "file_ring", 60, setup, teardown, tests);
}
