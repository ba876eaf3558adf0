/* test_file_unwatched.c: the file store with sync = "process" where the
 * kernel refuses it inotify (file_identity.c): no instance left
 * (inotify_init1 fails, EMFILE) or no watch left (inotify_add_watch
 * fails, ENOSPC). Then every transaction measures data.mdb, every write
 * compares the paths and a read compares them at least once a second: a
 * directory removed or replaced under the store still answers closed,
 * and the calls before it answer as ever. A test case of the
 * file_integrity suite.
 *
 * The refusal is the kernel's own, for one process alone: each test runs
 * in a forked child that enters a user namespace of its own (the same
 * user) and lowers that namespace's limit (/proc/sys/user/
 * max_inotify_instances or max_inotify_watches), which no other process
 * of the user shares. A kernel without user namespaces to give skips the
 * test, saying so on stderr. The child reports its first wrong answer
 * through a pipe and its exit status; the parent asserts on them. */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests.h"

#define HOUR (3600 * 1000)
#define SKIPPED 77 /* the child's status when it found no user namespace */

static char dir[256], old[300];

static void setup(void) {
  test_temp_dir(dir, sizeof dir);
  snprintf(old, sizeof old, "%s.old", dir);
}

static void teardown(void) {
  test_remove_dir(old);
  test_remove_dir(dir);
}

/* ---- the child ----------------------------------------------------------- */

/* The child's assert: it reports and exits (Check's own, failing in a
 * child under CK_FORK=no, would go on with the suite there). */
#define WANT(cond, ...)                     \
  do {                                      \
    if (!(cond)) test_child_end(3, __VA_ARGS__); \
  } while (0)

/* Runs fn(arg) in a forked child; its status and report. */
typedef struct {
  void (*fn)(int);
  int arg;
} int_call_t;

static void call_int(void *p) {
  const int_call_t *c = p;
  c->fn(c->arg);
}

static int in_child(void (*fn)(int), int arg, char *msg, size_t size) {
  int_call_t c = {fn, arg};
  return test_child_run(call_int, &c, msg, size);
}

static void write_file(const char *file, const char *text) {
  FILE *f = fopen(file, "w");
  WANT(f, "open %s: %s", file, strerror(errno));
  bool ok = fputs(text, f) >= 0;
  ok = fclose(f) == 0 && ok;
  WANT(ok, "write %s to %s: %s", text, file, strerror(errno));
}

/* How the kernel refuses: no inotify instance, or too few watches for
 * the directories above the store (its directory and data.mdb get
 * theirs, the first directory above does not). */
enum { NO_INSTANCE, TWO_WATCHES, LIMITS };
static const char *const limit_file[LIMITS] = {"/proc/sys/user/max_inotify_instances",
                                               "/proc/sys/user/max_inotify_watches"};
static const char *const limit_value[LIMITS] = {"0", "2"};

/* In the child (one thread, as unshare wants): a user namespace of its
 * own, the same user inside, with the limit lowered; the child skips
 * when the kernel gives no namespace. */
static void limited(int limit) {
  char map[64];
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)geteuid(), (unsigned)geteuid());
  if (unshare(CLONE_NEWUSER) != 0)
    test_child_end(SKIPPED, "no user namespace (%s)", strerror(errno));
  write_file("/proc/self/uid_map", map);
  write_file(limit_file[limit], limit_value[limit]);
}

/* The inotify descriptors this process holds. */
static int inotify_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  WANT(d, "/proc/self/fd: %s", strerror(errno));
  struct dirent *de;
  char link[300], to[64];
  int n = 0;
  while ((de = readdir(d))) {
    snprintf(link, sizeof link, "/proc/self/fd/%s", de->d_name);
    ssize_t len = readlink(link, to, sizeof to - 1);
    if (len < 0) continue;
    to[len] = '\0';
    n += strcmp(to, "anon_inode:inotify") == 0;
  }
  closedir(d);
  return n;
}

static resv_store_t *open_store(void) {
  resv_error_t err;
  resv_options_t o = {.path = dir, .map_size = 64 << 20, .sync = RESV_SYNC_PROCESS};
  resv_store_t *s = resv_store_open(&o, &err);
  WANT(s, "open %s: %s", dir, err.message);
  return s;
}

static resv_type_t *type_of(resv_store_t *s) {
  resv_error_t err;
  resv_type_t *t = resv_store_type(s, "test", 4, "seat", 4, &err);
  WANT(t, "type: %s", err.message);
  return t;
}

static const char *const op_name[] = {"", "reserve", "confirm", "abandon", "release", "get"};

static bool call(resv_type_t *t, int32_t op, const char *key, const char *owner,
                 resv_answer_t *a, resv_error_t *err) {
  resv_request_t r = {.op = op, .key = test_key("email", key),
                      .owner = test_owner("", owner), .attempt = resv_cstr(owner),
                      .ttl_ms = HOUR, .version = 1};
  return resv_call(t, &r, a, err);
}

/* op of key by owner answers status. */
static void answers(resv_type_t *t, int32_t op, const char *key, const char *owner,
                    int32_t status) {
  resv_answer_t a = {0};
  resv_error_t err;
  bool ok = call(t, op, key, owner, &a, &err);
  WANT(ok, "%s %s by %s: %s: %s", op_name[op], key, owner, resv_code_name(err.code),
       err.message);
  WANT(a.status == status, "%s %s by %s answered %s, not %s", op_name[op], key, owner,
       resv_status_name(a.status), resv_status_name(status));
  resv_answer_clear(&a);
}

/* op of key answers closed, the store's files removed or replaced. */
static void answers_closed(resv_type_t *t, int32_t op, const char *key, const char *when) {
  resv_answer_t a = {0};
  resv_error_t err;
  bool ok = call(t, op, key, "a", &a, &err);
  WANT(!ok, "%s %s %s answered %s from the files gone", op_name[op], key, when,
       resv_status_name(a.status));
  WANT(err.code == RESV_ECLOSED && strstr(err.message, "removed or replaced"),
       "%s %s %s: %s: %s", op_name[op], key, when, resv_code_name(err.code), err.message);
  resv_answer_clear(&a);
}

/* The store at dir, its watches refused: it holds no inotify descriptor,
 * and its calls answer as ever. */
static resv_store_t *open_unwatched(resv_type_t **t) {
  resv_store_t *s = open_store();
  int n = inotify_fds();
  WANT(n == 0, "the store holds %d inotify descriptor(s): the limit did not stop its watches", n);
  *t = type_of(s);
  answers(*t, RESV_OP_RESERVE, "mine@x", "a", RESV_RESERVED);
  answers(*t, RESV_OP_RESERVE, "mine@x", "b", RESV_CONFLICT);
  answers(*t, RESV_OP_CONFIRM, "mine@x", "a", RESV_CONFIRMED);
  answers(*t, RESV_OP_GET, "mine@x", "a", RESV_CONFIRMED);
  answers(*t, RESV_OP_RESERVE, "other@x", "a", RESV_RESERVED);
  answers(*t, RESV_OP_ABANDON, "other@x", "a", RESV_ABANDONED);
  return s;
}

/* Process B, a grandchild: a fresh store at the path, reserving seat@x
 * for b. */
static void reserve_as_b(int unused) {
  resv_store_t *s = open_store();
  answers(type_of(s), RESV_OP_RESERVE, "seat@x", "b", RESV_RESERVED);
  test_child_exit(0);
}

/* B takes seat@x in the store now at the path; A's store answers closed
 * to it; a store A opens afterwards sees B's world. */
static void two_worlds(resv_type_t *t) {
  char msg[1024];
  int status = in_child(reserve_as_b, 0, msg, sizeof msg);
  WANT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "B: status %d: %s", status, msg);
  answers_closed(t, RESV_OP_RESERVE, "seat@x", "after B took it");
  answers_closed(t, RESV_OP_GET, "mine@x", "after B took the seat");
  resv_store_t *again = open_store();
  resv_type_t *t2 = type_of(again);
  resv_answer_t a = {0};
  resv_error_t err;
  WANT(call(t2, RESV_OP_GET, "seat@x", "a", &a, &err), "get seat@x: %s", err.message);
  WANT(a.status == RESV_PENDING && test_str_is(a.owner_id, "b"), "seat@x: %s by %.*s",
       resv_status_name(a.status), (int)a.owner_id.len, a.owner_id.ptr);
  resv_answer_clear(&a);
  answers(t2, RESV_OP_GET, "mine@x", "a", RESV_ABSENT);
  resv_store_close(again);
}

/* rm -rf of the directory, and another made at the path: data.mdb's
 * link count tells the very next call, a read. */
static void removed(int limit) {
  limited(limit);
  resv_type_t *t;
  resv_store_t *s = open_unwatched(&t);
  test_remove_dir(dir);
  WANT(mkdir(dir, 0700) == 0, "mkdir %s: %s", dir, strerror(errno));
  answers_closed(t, RESV_OP_GET, "mine@x", "right after the removal");
  two_worlds(t);
  resv_store_close(s);
}

/* The directory moved away and another made at the path: data.mdb keeps
 * its link, only the paths tell, and every write compares them. */
static void replaced_then_written(int limit) {
  limited(limit);
  resv_type_t *t;
  resv_store_t *s = open_unwatched(&t);
  WANT(rename(dir, old) == 0 && mkdir(dir, 0700) == 0, "move %s: %s", dir, strerror(errno));
  answers_closed(t, RESV_OP_RESERVE, "seat@x", "right after the move");
  two_worlds(t);
  resv_store_close(s);
}

/* The same, then only reads: they compare the paths at least once a
 * second. */
static void replaced_then_read(int limit) {
  limited(limit);
  resv_type_t *t;
  resv_store_t *s = open_unwatched(&t);
  WANT(rename(dir, old) == 0 && mkdir(dir, 0700) == 0, "move %s: %s", dir, strerror(errno));
  struct timespec wait = {1, 100 * 1000000};
  while (nanosleep(&wait, &wait) != 0) continue;
  answers_closed(t, RESV_OP_GET, "mine@x", "1.1 s after the move");
  resv_store_close(s);
}

/* Without a limit, the store's watches live in one inotify descriptor:
 * what open_unwatched's count looks for. */
static void watched(int unused) {
  resv_store_t *s = open_store();
  int n = inotify_fds();
  WANT(n == 1, "the store holds %d inotify descriptors, not 1", n);
  resv_store_close(s);
  WANT((n = inotify_fds()) == 0, "%d inotify descriptors left after close", n);
}

/* ---- the tests ----------------------------------------------------------- */

/* The child ran fn(limit) with every answer right, or skipped. */
static void run(void (*fn)(int), int limit) {
  char msg[1024];
  int status = in_child(fn, limit, msg, sizeof msg);
  ck_assert_msg(!WIFSIGNALED(status), "the child was killed by signal %d (%s)",
                WTERMSIG(status), strsignal(WTERMSIG(status)));
  if (WIFEXITED(status) && WEXITSTATUS(status) == SKIPPED) {
    fprintf(stderr, "file_integrity: skipped a test without inotify: %s\n", msg);
    return;
  }
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s (%s, status %d)", msg,
                limit_file[limit], status);
}

START_TEST(a_store_holds_its_watches_in_one_inotify_descriptor) { run(watched, 0); }
END_TEST

START_TEST(without_inotify_a_directory_removed_answers_closed) { run(removed, _i); }
END_TEST

START_TEST(without_inotify_a_directory_replaced_answers_closed_to_a_write) {
  run(replaced_then_written, _i);
}
END_TEST

START_TEST(without_inotify_a_directory_replaced_answers_closed_to_reads_within_a_second) {
  run(replaced_then_read, _i);
}
END_TEST

void file_unwatched_tcase(Suite *s) {
  static const TTest *const none[] = {NULL};
  TCase *tc = test_tcase(s, "file_unwatched", 60, setup, teardown, none);
  tcase_add_test(tc, a_store_holds_its_watches_in_one_inotify_descriptor);
  tcase_add_loop_test(tc, without_inotify_a_directory_removed_answers_closed, 0, LIMITS);
  tcase_add_loop_test(tc, without_inotify_a_directory_replaced_answers_closed_to_a_write, 0,
                      LIMITS);
  tcase_add_loop_test(tc,
                      without_inotify_a_directory_replaced_answers_closed_to_reads_within_a_second,
                      0, LIMITS);
}
