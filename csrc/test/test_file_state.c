/* test_file_state.c: the file store's state file and checkpoints (docs/design.md
 * section 6, "Durability, as proven"): with sync = "process" the state
 * says dirty before a write and clean after a checkpoint, processes
 * sharing the store keep it right between them, and an open after a
 * (faked) reboot refuses a store whose last commits came after its last
 * checkpoint, before LMDB reads it; a store closed before the reboot, or
 * dirty in this boot, opens with everything. A missing or empty data.mdb
 * beside a state file is damage, never a new store. The crash of the OS
 * itself is csrc/test/crash/crash_state.c's (make test-crash).
 *
 * Processes that "crash" are forked children that _exit without closing;
 * RESV_BOOT_ID in the environment names the boot. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests.h"

#define T0 1700000000000LL
#define HOUR (3600 * 1000)

static char dir[256];

static void setup(void) {
  test_temp_dir(dir, sizeof dir);
  setenv("RESV_BOOT_ID", "boot-1", 1);
  unsetenv("RESV_CHECKPOINT_IDLE_MS");
}

static void teardown(void) {
  test_remove_dir(dir);
  unsetenv("RESV_BOOT_ID");
  unsetenv("RESV_CHECKPOINT_IDLE_MS");
}

static resv_store_t *open_process(resv_error_t *err) {
  resv_options_t o = {.path = dir, .sync = RESV_SYNC_PROCESS, .threads = 2};
  resv_store_t *s = resv_store_open(&o, err);
  if (s) resv_store_set_time(s, T0);
  return s;
}

static resv_type_t *type_of(resv_store_t *s) {
  return resv_store_type(s, "test", 4, "state", 5, NULL);
}

/* What resv.state says: "dirty", "clean", or "" when there is none. */
static const char *state_word(void) {
  static char text[512];
  char path[600];
  snprintf(path, sizeof path, "%s/resv.state", dir);
  FILE *f = fopen(path, "r");
  if (!f) return "";
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  return strstr(text, "state dirty") ? "dirty" : strstr(text, "state clean") ? "clean" : "?";
}

static void reserve(resv_store_t *s, const char *key, const char *owner) {
  resv_answer_t a = {0};
  test_reserve(type_of(s), key, owner, "a", HOUR, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  resv_answer_clear(&a);
}

static void expect_pending(resv_store_t *s, const char *key, const char *owner) {
  resv_answer_t a = {0};
  test_get(type_of(s), key, &a);
  ck_assert_msg(a.status == RESV_PENDING && test_str_is(a.owner_id, owner), "%s: %s", key,
                resv_status_name(a.status));
  resv_answer_clear(&a);
}

/* A child that opens the store, reserves key for owner and ends without
 * closing it: a crash of its process, right after the answer. */
static void crash_after_reserve(const char *key, const char *owner) {
  pid_t pid = fork();
  ck_assert_int_ne(pid, -1);
  if (pid == 0) {
    setenv("RESV_CHECKPOINT_IDLE_MS", "600000", 1); /* no checkpoint before the end */
    resv_error_t err;
    resv_store_t *s = open_process(&err);
    resv_answer_t a = {0};
    resv_key_t k = test_key("email", key);
    resv_owner_t o = test_owner("", owner);
    if (!s || !resv_reserve(type_of(s), &k, &o, resv_cstr("a"), HOUR, &a, &err))
      test_child_exit(1);
    test_child_exit(a.status == RESV_RESERVED ? 0 : 2);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %d", st);
}

/* A child forked before this process starts a thread (ThreadSanitizer
 * cannot follow threads started after a fork of a threaded process), held
 * until go_on: then it runs body and exits with its answer. */
typedef int (*child_body_t)(void);

static pid_t fork_held(child_body_t body, int *go_on) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ne(pid, -1);
  if (pid == 0) {
    char c;
    close(fds[1]);
    /* Ends through exec (test_child_exit): a checker watching (valgrind,
     * ThreadSanitizer) has nothing to say then about a thread still
     * closing the child's store. */
    test_child_exit(read(fds[0], &c, 1) == 1 ? body() : 9);
  }
  close(fds[0]);
  *go_on = fds[1];
  return pid;
}

static void let_go_and_wait(pid_t pid, int go_on, const char *what) {
  int st;
  ck_assert_int_eq(write(go_on, "g", 1), 1);
  close(go_on);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %d", what, st);
}

START_TEST(a_write_makes_the_state_dirty_and_the_idle_store_checkpoints) {
  resv_error_t err;
  resv_store_t *s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  ck_assert_str_eq(state_word(), "clean"); /* written at creation */
  reserve(s, "a@x", "o1");
  ck_assert_str_eq(state_word(), "dirty");
  for (int i = 0; i < 100 && strcmp(state_word(), "clean"); i++) usleep(20 * 1000);
  ck_assert_str_eq(state_word(), "clean"); /* idle for 200 ms: checkpointed */
  reserve(s, "b@x", "o1");
  ck_assert_str_eq(state_word(), "dirty");
  resv_store_close(s);
  ck_assert_str_eq(state_word(), "clean"); /* and at close */
}
END_TEST

/* Marking the state dirty costs two fsyncs: a call that must not wait
 * (resv_try_call, as nginx's and a spawned coroutine's) leaves the first
 * write after a checkpoint to the dispatcher; once the state says dirty,
 * writes answer on the caller's thread again. */
START_TEST(the_first_write_after_a_checkpoint_is_not_made_on_a_hosts_thread) {
  resv_error_t err, cerr;
  resv_store_t *s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  reserve(s, "a@x", "o1");
  for (int i = 0; i < 100 && strcmp(state_word(), "clean"); i++) usleep(20 * 1000);
  ck_assert_str_eq(state_word(), "clean");
  resv_answer_t a = {0};
  resv_request_t w = {.op = RESV_OP_RESERVE, .key = test_key("email", "b@x"),
                      .owner = test_owner("", "o1"), .attempt = resv_cstr("a1"),
                      .ttl_ms = HOUR};
  ck_assert(!resv_try_call(type_of(s), &w, &a, &cerr)); /* it would wait: submit it */
  ck_assert_int_eq(cerr.code, RESV_OK);
  ck_assert_str_eq(state_word(), "clean");
  reserve(s, "b@x", "o1"); /* a caller that may block marks it */
  ck_assert_str_eq(state_word(), "dirty");
  w.key = test_key("email", "c@x");
  ck_assert_msg(resv_try_call(type_of(s), &w, &a, &cerr), "%s", cerr.message);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* The checkpoint thread sleeps while it waits for the idle moment: the
 * process uses next to no CPU while its store waits to checkpoint. */
START_TEST(the_wait_for_a_checkpoint_burns_no_cpu) {
  resv_error_t err;
  resv_store_t *s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  reserve(s, "a@x", "o1");
  struct timespec c0, c1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  usleep(150 * 1000); /* within the 200 ms before the checkpoint */
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  double cpu_ms = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
  ck_assert_msg(cpu_ms < 50, "%.1f ms of CPU in 150 ms of waiting", cpu_ms);
  resv_store_close(s);
}
END_TEST

/* Reads write nothing, so they leave the state clean: a process that only
 * reads (the CLI, a worker that only looks) costs no sync. */
START_TEST(reads_leave_the_state_clean) {
  resv_error_t err;
  resv_store_t *s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  reserve(s, "a@x", "o1");
  resv_store_close(s);
  ck_assert_str_eq(state_word(), "clean");
  s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  expect_pending(s, "a@x", "o1");
  resv_answer_t a = {0};
  test_reserve(type_of(s), "a@x", "o2", "b", HOUR, &a); /* a conflict writes nothing */
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  resv_answer_clear(&a);
  ck_assert_str_eq(state_word(), "clean");
  resv_store_close(s);
}
END_TEST

START_TEST(a_store_dirty_in_an_earlier_boot_is_refused_before_lmdb_reads_it) {
  crash_after_reserve("a@x", "o1");
  ck_assert_str_eq(state_word(), "dirty");
  /* Whatever data.mdb holds now is not to be read: garbage in its first
   * page would answer "not a resv store" (or worse) if LMDB read it. */
  char path[600];
  snprintf(path, sizeof path, "%s/data.mdb", dir);
  int fd = open(path, O_WRONLY);
  ck_assert_int_ge(fd, 0);
  char junk[4096];
  memset(junk, 0x5a, sizeof junk);
  ck_assert_int_eq(pwrite(fd, junk, sizeof junk, 0), (ssize_t)sizeof junk);
  close(fd);
  setenv("RESV_BOOT_ID", "boot-2", 1);
  resv_error_t err;
  resv_store_t *s = open_process(&err);
  ck_assert_ptr_null(s);
  ck_assert_int_eq(err.code, RESV_EFORMAT);
  char want[1024];
  snprintf(want, sizeof want,
           "%s may be damaged by a crash of the OS (its last commits came after its last "
           "checkpoint, in an earlier boot): run resv recover --path %s, or open it with "
           "on_os_crash = \"reset\"", dir, dir);
  ck_assert_str_eq(err.message, want);
  /* resv_store_recover moves it aside; the store then starts empty. */
  char kept[512];
  ck_assert_int_eq(resv_store_recover(dir, kept, sizeof kept, &err), 1);
  ck_assert_msg(strncmp(kept, dir, strlen(dir)) == 0 && strstr(kept, ".crashed-"), "%s", kept);
  snprintf(path, sizeof path, "%s/data.mdb", kept);
  ck_assert_int_eq(access(path, F_OK), 0);
  ck_assert_int_eq(resv_store_recover(dir, kept, sizeof kept, &err), 0);
  s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  resv_answer_t a = {0};
  test_get(type_of(s), "a@x", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  resv_answer_clear(&a);
  resv_store_close(s);
  test_remove_dir(kept);
}
END_TEST

START_TEST(on_os_crash_reset_moves_the_files_aside_and_starts_empty) {
  crash_after_reserve("a@x", "o1");
  setenv("RESV_BOOT_ID", "boot-2", 1);
  resv_options_t o = {.path = dir, .sync = RESV_SYNC_PROCESS,
                      .on_os_crash = RESV_OS_CRASH_RESET};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s, "%s", err.message);
  resv_answer_t a = {0};
  test_get(type_of(s), "a@x", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  resv_answer_clear(&a);
  resv_store_close(s);
  o.on_os_crash = 7;
  ck_assert_ptr_null(resv_store_open(&o, &err));
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, "on_os_crash"), "%s", err.message);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "test -f %s.crashed-*/data.mdb && rm -rf %s.crashed-*", dir, dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(dirty_in_this_boot_opens_with_everything_and_checkpoints) {
  crash_after_reserve("a@x", "o1"); /* only the process crashed */
  ck_assert_str_eq(state_word(), "dirty");
  resv_error_t err;
  resv_store_t *s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  ck_assert_str_eq(state_word(), "clean");
  expect_pending(s, "a@x", "o1");
  resv_store_close(s);
}
END_TEST

START_TEST(a_store_closed_before_a_reboot_opens_after_it) {
  resv_error_t err;
  resv_store_t *s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  reserve(s, "a@x", "o1");
  resv_store_close(s);
  setenv("RESV_BOOT_ID", "boot-2", 1);
  s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  expect_pending(s, "a@x", "o1");
  resv_store_close(s);
}
END_TEST

/* Two processes: the parent's write makes the state dirty and it knows
 * so; a second process checkpoints (at its open, here) and records clean;
 * the parent's next write must see that and make the state dirty again
 * before it writes, though its own knowledge said dirty. Its own
 * checkpoints are held off, so only the other process's count. */
/* The other process: a store of its own, which checkpoints at open. */
static int open_and_close(void) {
  resv_error_t err;
  resv_store_t *c = open_process(&err);
  if (!c) return 1;
  if (strcmp(state_word(), "clean")) return 2;
  resv_store_close(c);
  return strcmp(state_word(), "clean") ? 3 : 0;
}

/* After a (faked) reboot: refused for a crash of the OS. */
static int refused_after_a_reboot(void) {
  setenv("RESV_BOOT_ID", "boot-2", 1);
  resv_error_t err;
  resv_store_t *c = open_process(&err);
  return !c && err.code == RESV_EFORMAT && strstr(err.message, "crash of the OS") ? 0 : 1;
}

/* A store whose directory was deleted and made again under it (the new
 * one holding another store) checkpoints its own files at close, and
 * never writes the new store's state: that would record clean a store
 * with commits not on the disk. */
START_TEST(a_store_whose_directory_was_replaced_never_writes_the_new_ones_state) {
  resv_error_t err;
  setenv("RESV_CHECKPOINT_IDLE_MS", "600000", 1); /* no checkpoint before the end */
  resv_store_t *old = open_process(&err);
  ck_assert_msg(old, "%s", err.message);
  reserve(old, "old@x", "a");
  test_remove_dir(dir);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  resv_store_t *s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  reserve(s, "new@x", "b");
  ck_assert_str_eq(state_word(), "dirty");
  resv_store_close(old);
  ck_assert_str_eq(state_word(), "dirty");
  resv_store_close(s);
  ck_assert_str_eq(state_word(), "clean");
}
END_TEST

START_TEST(a_checkpoint_of_another_process_is_seen_by_the_next_write) {
  setenv("RESV_CHECKPOINT_IDLE_MS", "600000", 1);
  int go_other, go_reboot;
  pid_t other = fork_held(open_and_close, &go_other);
  pid_t reboot = fork_held(refused_after_a_reboot, &go_reboot);
  resv_error_t err;
  resv_store_t *s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  reserve(s, "a@x", "o1");
  ck_assert_str_eq(state_word(), "dirty");
  let_go_and_wait(other, go_other, "the other process");
  ck_assert_str_eq(state_word(), "clean");
  reserve(s, "b@x", "o1");
  ck_assert_str_eq(state_word(), "dirty");
  let_go_and_wait(reboot, go_reboot, "after a reboot"); /* an OS crash now: refused */
  resv_store_close(s);
}
END_TEST

/* A process with sync = "disk" (no MDB_WRITEMAP) and one with sync =
 * "process" (MDB_WRITEMAP) share a store: each sees the other's writes,
 * and after both close a reboot finds every one. */
/* The process with sync = "disk": sees p1, reserves d1. */
static int disk_process(void) {
  resv_options_t o = {.path = dir, .sync = RESV_SYNC_DISK, .threads = 2};
  resv_error_t err;
  resv_store_t *c = resv_store_open(&o, &err);
  if (!c) return 1;
  resv_store_set_time(c, T0);
  resv_answer_t a = {0};
  resv_key_t k = test_key("email", "p1@x"), k2 = test_key("email", "d1@x");
  resv_owner_t ow = test_owner("", "o2");
  if (!resv_get(type_of(c), &k, &a, &err) || a.status != RESV_PENDING) return 2;
  if (!resv_reserve(type_of(c), &k2, &ow, resv_cstr("a"), HOUR, &a, &err) ||
      a.status != RESV_RESERVED)
    return 3;
  resv_store_close(c);
  return 0;
}

START_TEST(processes_of_both_modes_share_a_store) {
  int go;
  pid_t pid = fork_held(disk_process, &go);
  resv_error_t err;
  resv_store_t *s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  reserve(s, "p1@x", "o1");
  let_go_and_wait(pid, go, "the process with sync = disk");
  expect_pending(s, "d1@x", "o2");
  reserve(s, "p2@x", "o1");
  resv_store_close(s);
  setenv("RESV_BOOT_ID", "boot-2", 1);
  s = open_process(&err);
  ck_assert_msg(s, "%s", err.message);
  expect_pending(s, "p1@x", "o1");
  expect_pending(s, "d1@x", "o2");
  expect_pending(s, "p2@x", "o1");
  resv_store_close(s);
}
END_TEST

/* Fills the store in dir with new keys until a call fails: 0 when that is
 * ENOMEM for a full disk (the process alive, the reads still answering). */
static int fill_until_full(void) {
  resv_options_t o = {.path = dir, .sync = RESV_SYNC_PROCESS, .map_size = 64 << 20};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) return 1;
  resv_type_t *t = type_of(s);
  resv_answer_t a = {0};
  char key[64], owner[32];
  for (int i = 0; i < 1000000; i++) {
    snprintf(key, sizeof key, "key-%09d-of-a-store-that-fills-its-disk", i);
    snprintf(owner, sizeof owner, "owner-%09d", i);
    resv_key_t k = test_key("email", key);
    resv_owner_t ow = test_owner("", owner);
    if (resv_reserve(t, &k, &ow, resv_cstr("a"), HOUR, &a, &err)) continue;
    bool full = err.code == RESV_ENOMEM && strstr(err.message, "no space left on the disk");
    k = test_key("email", "key-000000000-of-a-store-that-fills-its-disk");
    bool reads = resv_get(t, &k, &a, &err) && a.status == RESV_PENDING;
    return i > 0 && full && reads ? 0 : 2;
  }
  return 3;
}

/* With sync = "process" LMDB writes through a map of a sparse file: a full
 * disk answers nomem, never kills the process (SIGBUS). Needs a small file
 * system: a tmpfs of 16 MiB mounted on the store's directory (root only;
 * elsewhere the test says so and passes). */
START_TEST(a_full_disk_answers_nomem_and_kills_no_process) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=16m tmpfs %s 2>/dev/null", dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "a_full_disk_answers_nomem_and_kills_no_process: skipped: cannot "
                    "mount a tmpfs (not root)\n");
    return;
  }
  int go;
  pid_t pid = fork_held(fill_until_full, &go);
  int st;
  ck_assert_int_eq(write(go, "g", 1), 1);
  close(go);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  snprintf(cmd, sizeof cmd, "umount %s", dir);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the writer ended with %s %d",
                WIFSIGNALED(st) ? "signal" : "status",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}
END_TEST

/* A store with a dispatcher closes on a reaper thread: waits for it, so
 * that the next open opens the directory anew. */
static void close_and_wait(resv_store_t *s) {
  resv_store_close(s);
  for (int i = 0; i < 3000 && resv__store_reapers() > 0; i++) usleep(10 * 1000);
  ck_assert_int_eq(resv__store_reapers(), 0);
}

/* data.mdb missing or emptied beside resv.state: damage, not a new store. */
static void damage_and_expect_format(bool remove) {
  resv_error_t err;
  resv_options_t o = {.path = dir}; /* sync = "disk", the default */
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s, "%s", err.message);
  resv_answer_t a = {0};
  test_reserve(type_of(s), "a@x", "o1", "a", HOUR, &a);
  resv_answer_clear(&a);
  close_and_wait(s);
  ck_assert_str_eq(state_word(), "clean");
  char path[600];
  snprintf(path, sizeof path, "%s/data.mdb", dir);
  ck_assert_int_eq(remove ? unlink(path) : truncate(path, 0), 0);
  ck_assert_ptr_null(resv_store_open(&o, &err));
  ck_assert_int_eq(err.code, RESV_EFORMAT);
  ck_assert_msg(strstr(err.message, "data.mdb is missing or empty"), "%s", err.message);
  struct stat st;
  ck_assert_int_eq(stat(path, &st) == 0 ? st.st_size : 0, 0); /* nothing written */
}

START_TEST(an_empty_data_file_beside_the_state_is_damage) { damage_and_expect_format(false); }
END_TEST

START_TEST(a_missing_data_file_beside_the_state_is_damage) { damage_and_expect_format(true); }
END_TEST

START_TEST(the_state_file_is_no_stranger_in_the_directory) {
  resv_error_t err;
  resv_options_t o = {.path = dir};
  close_and_wait(resv_store_open(&o, &err));
  char path[600];
  snprintf(path, sizeof path, "%s/resv.state.tmp", dir); /* left by a crash */
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s, "%s", err.message);
  close_and_wait(s);
  snprintf(path, sizeof path, "%s/notes.txt", dir);
  f = fopen(path, "w");
  fclose(f);
  ck_assert_ptr_null(resv_store_open(&o, &err));
  ck_assert_int_eq(err.code, RESV_EFORMAT);
}
END_TEST

Suite *file_state_suite(void) {
  const TTest *tests[] = {
      a_write_makes_the_state_dirty_and_the_idle_store_checkpoints,
      the_wait_for_a_checkpoint_burns_no_cpu,
      the_first_write_after_a_checkpoint_is_not_made_on_a_hosts_thread,
      reads_leave_the_state_clean,
      a_store_dirty_in_an_earlier_boot_is_refused_before_lmdb_reads_it,
      on_os_crash_reset_moves_the_files_aside_and_starts_empty,
      dirty_in_this_boot_opens_with_everything_and_checkpoints,
      a_store_closed_before_a_reboot_opens_after_it,
      a_checkpoint_of_another_process_is_seen_by_the_next_write,
      a_store_whose_directory_was_replaced_never_writes_the_new_ones_state,
      processes_of_both_modes_share_a_store, a_full_disk_answers_nomem_and_kills_no_process,
      an_empty_data_file_beside_the_state_is_damage,
      a_missing_data_file_beside_the_state_is_damage,
      the_state_file_is_no_stranger_in_the_directory, NULL};
  return test_suite("file_state", "file_state", 60, setup, teardown, tests);
}
