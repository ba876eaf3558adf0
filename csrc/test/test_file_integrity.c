/* test_file_integrity.c: the file store on a bad day for its files (docs/design.md
 * section 6, "Integrity"): data.mdb truncated or its meta pages damaged
 * while closed is refused at open with format; truncated while open, a
 * read answers format instead of killing the process; the directory
 * deleted or replaced under a running store answers closed, never a
 * second world; the files follow the umask, and a permission refused
 * names the path, the operation and the user, with code invalid.
 * Whatever may crash runs in a forked child (file_integrity_test.h). */
#include <bson/bson.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "file_integrity_test.h"

#define IDLE_MS 50 /* the truncated store's checkpoint after a write */
#define NOBODY 65534

static void setup(void) { test_temp_dir(dir, sizeof dir); }

/* Also what a failed test left: the store made in dir/store, with the
 * modes given back. */
static void teardown(void) {
  char sub[300];
  chmod(dir, 0700);
  snprintf(sub, sizeof sub, "%s/store", dir);
  chmod(sub, 0700);
  test_remove_dir(sub);
  test_remove_dir(dir);
}

static void file_of(char *out, size_t size, const char *name) {
  snprintf(out, size, "%s/%s", dir, name);
}

/* ---- damaged while closed ----------------------------------------------- */

/* The bytes of data.mdb's pages, as its newer meta page says: the store
 * keeps the file longer, a sparse hole. */
static off_t data_bytes(void) {
  char file[300];
  file_of(file, sizeof file, "data.mdb");
  return (off_t)test_lmdb_pages(file) * sysconf(_SC_PAGESIZE);
}

static void truncate_to(int percent) {
  char file[300];
  file_of(file, sizeof file, "data.mdb");
  ck_assert_int_eq(truncate(file, data_bytes() * percent / 100), 0);
}

static void refused_when_truncated_to(int percent) {
  make_store();
  truncate_to(percent);
  expect_error(in_child(open_and_get_all, NULL), RESV_EFORMAT, "truncated");
}

START_TEST(a_data_file_truncated_to_90_percent_is_refused_at_open) {
  refused_when_truncated_to(90);
}
END_TEST

START_TEST(a_data_file_truncated_to_50_percent_is_refused_at_open) {
  refused_when_truncated_to(50);
}
END_TEST

START_TEST(a_data_file_truncated_to_10_percent_is_refused_at_open) {
  refused_when_truncated_to(10);
}
END_TEST

/* LMDB may leave the last pages of a commit unwritten (freed before the
 * commit ended): the store keeps room past them, and a cut that takes
 * only that room loses nothing. */
START_TEST(the_data_file_is_kept_longer_than_its_pages) {
  char file[300];
  struct stat st;
  make_store();
  file_of(file, sizeof file, "data.mdb");
  ck_assert_int_eq(stat(file, &st), 0);
  ck_assert_int_ge(st.st_size, data_bytes() + 512 * sysconf(_SC_PAGESIZE));
  ck_assert_int_eq(truncate(file, data_bytes()), 0);
  expect_answered(in_child(open_and_get_all, NULL));
}
END_TEST

/* Writes len bytes of buf at off in data.mdb. */
static void patch(off_t off, const void *buf, size_t len) {
  char file[300];
  file_of(file, sizeof file, "data.mdb");
  int fd = open(file, O_WRONLY);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, buf, len, off), (ssize_t)len);
  close(fd);
}

/* The meta page LMDB reads the store from: the one of the larger
 * transaction id (at byte 144 of each, LMDB 0.9 on 64 bits). */
static int newer_meta(long psize) {
  char file[300];
  uint64_t id[2];
  file_of(file, sizeof file, "data.mdb");
  int fd = open(file, O_RDONLY);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pread(fd, &id[0], 8, 144), 8);
  ck_assert_int_eq(pread(fd, &id[1], 8, psize + 144), 8);
  close(fd);
  return id[1] > id[0];
}

START_TEST(damaged_meta_pages_are_refused_at_open) {
  long psize = sysconf(_SC_PAGESIZE);
  char *zeros = calloc(1, (size_t)psize * 2);
  make_store();
  /* The newer meta's last page far past the end: LMDB would map it. */
  uint64_t far = UINT64_C(1) << 30;
  patch(newer_meta(psize) * psize + 136, &far, sizeof far);
  expect_error(in_child(open_and_get_all, NULL), RESV_EFORMAT, "meta page");
  /* The newer meta zeroed: the older one is whole, but LMDB refuses. */
  test_remove_dir(dir);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  make_store();
  patch(newer_meta(psize) * psize, zeros, (size_t)psize);
  expect_error(in_child(open_and_get_all, NULL), RESV_EFORMAT, "is not whole");
  /* Both zeroed. */
  patch(0, zeros, (size_t)psize * 2);
  expect_error(in_child(open_and_get_all, NULL), RESV_EFORMAT, "neither of its two meta pages");
  free(zeros);
}
END_TEST

/* resv recover moves aside a store open refuses as damaged, whatever the
 * damage (the walk's refusals: test_file_walk.c). */
START_TEST(resv_recover_moves_a_truncated_or_meta_damaged_store_aside) {
  long psize = sysconf(_SC_PAGESIZE);
  char *zeros = calloc(1, (size_t)psize);
  make_store();
  truncate_to(50);
  recovered_then_empty();
  make_store();
  patch(newer_meta(psize) * psize, zeros, (size_t)psize);
  recovered_then_empty();
  free(zeros);
}
END_TEST

/* ---- damaged while open -------------------------------------------------- */

/* How a running store's data.mdb is cut: the percent left, and whether
 * through another link to the file (in the directory above, which the
 * store's watch of its directory does not see). */
typedef struct cut {
  int percent;
  bool through_link;
} cut_t;

/* Opens, reads everything, writes once, truncates data.mdb as *arg says,
 * then every get and a reserve must answer format (a get of a key whose
 * pages are left is no better: the file is damaged), and neither the
 * checkpoint due after the write nor the store's close may kill the
 * process (both look at the files before LMDB reads its map). Exits 100 +
 * format when all is so. */
static void truncate_under_open_store(void *arg) {
  const cut_t *cut = arg;
  resv_error_t err = {0};
  char idle[16];
  snprintf(idle, sizeof idle, "%d", IDLE_MS);
  setenv("RESV_CHECKPOINT_IDLE_MS", idle, 1);
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_type_t *t = type_of(s);
  char key[32];
  resv_answer_t a = {0};
  for (int i = 0; i < KEYS; i++) {
    snprintf(key, sizeof key, "k%d@x", i);
    if (!call(t, RESV_OP_GET, key, "o1", &a, &err) || a.status != RESV_PENDING) test_child_exit(3);
    resv_answer_clear(&a);
  }
  if (!call(t, RESV_OP_RESERVE, "late@x", "o1", &a, &err) || a.status != RESV_RESERVED)
    test_child_exit(8);
  resv_answer_clear(&a);
  if (cut->through_link) {
    char file[300], link_name[300];
    file_of(file, sizeof file, "data.mdb");
    snprintf(link_name, sizeof link_name, "%s.link", dir);
    if (link(file, link_name) != 0 || truncate(link_name, data_bytes() * cut->percent / 100) != 0 ||
        unlink(link_name) != 0)
      test_child_exit(7);
  } else {
    truncate_to(cut->percent);
  }
  int answered = 0; /* from what is left of the file */
  for (int i = 0; i < KEYS; i++) {
    snprintf(key, sizeof key, "k%d@x", i);
    if (call(t, RESV_OP_GET, key, "o1", &a, &err))
      answered++, resv_answer_clear(&a);
    else if (err.code != RESV_EFORMAT)
      test_child_exit(4);
  }
  if (answered) test_child_exit(6);
  if (call(t, RESV_OP_RESERVE, "new@x", "o2", &a, &err) || err.code != RESV_EFORMAT)
    test_child_exit(5);
  usleep(4 * IDLE_MS * 1000); /* the checkpoint due after late@x ran */
  resv_store_close(s);
  for (int i = 0; i < 3000 && resv__store_reapers() > 0; i++) usleep(10 * 1000);
  if (resv__store_reapers() > 0) test_child_exit(9);
  child_exit_with(&err);
}

START_TEST(reads_of_a_file_truncated_while_open_answer_format) {
  cut_t half = {50, false};
  make_store();
  expect_error(in_child(truncate_under_open_store, &half), RESV_EFORMAT, "truncated");
}
END_TEST

/* Even the meta pages gone: LMDB reads them first of all. */
START_TEST(reads_of_a_file_emptied_while_open_answer_format) {
  cut_t none = {0, false};
  make_store();
  expect_error(in_child(truncate_under_open_store, &none), RESV_EFORMAT, "truncated");
}
END_TEST

/* Cut through a name the store does not know: the file itself tells. */
START_TEST(reads_of_a_file_truncated_through_another_link_answer_format) {
  cut_t half = {50, true};
  make_store();
  expect_error(in_child(truncate_under_open_store, &half), RESV_EFORMAT, "truncated");
}
END_TEST

/* ---- one store behind one path ------------------------------------------- */

/* Process B: a fresh store at the path, reserving seat@x for b. */
static void reserve_as_b(void *arg) {
  resv_error_t err;
  resv_answer_t a = {0};
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  if (!call(type_of(s), RESV_OP_RESERVE, "seat@x", "b", &a, &err)) child_exit_with(&err);
  test_child_exit(a.status == RESV_RESERVED ? 0 : 3);
}

/* How the files go from under a running store. */
enum { REMOVE_DIR, MOVE_DIR, REMOVE_LOCK, COPY_DATA };

/* cp from to, in one read and one write (the test's files are small). */
static void copy_file(const char *from, const char *to) {
  struct stat st;
  ck_assert_int_eq(stat(from, &st), 0);
  char *buf = malloc((size_t)st.st_size);
  int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0600);
  ck_assert(buf && in >= 0 && out >= 0);
  ck_assert_int_eq(read(in, buf, (size_t)st.st_size), st.st_size);
  ck_assert_int_eq(write(out, buf, (size_t)st.st_size), st.st_size);
  close(in);
  close(out);
  free(buf);
}

/* Process A (this one) runs a store; its files go (how; aside, when
 * moved or copied, is where the old ones go); B opens the path and
 * reserves seat@x. A must answer closed, never reserved; a store A opens
 * afterwards sees B's world. */
static void two_worlds(int how, const char *aside, int32_t sync) {
  resv_store_t *s = test_open_file(dir, sync);
  resv_type_t *t = type_of(s);
  resv_answer_t a = {0};
  resv_error_t err;
  test_reserve(t, "mine@x", "a", "a", HOUR, &a);
  resv_answer_clear(&a);
  char lock[300], data[300];
  file_of(lock, sizeof lock, "lock.mdb");
  file_of(data, sizeof data, "data.mdb");
  if (how == REMOVE_LOCK) {
    ck_assert_int_eq(unlink(lock), 0);
  } else if (how == COPY_DATA) { /* a backup moved away, a copy put back */
    ck_assert_int_eq(rename(data, aside), 0);
    copy_file(aside, data);
  } else {
    if (how == MOVE_DIR)
      ck_assert_int_eq(rename(dir, aside), 0);
    else
      test_remove_dir(dir);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
  }
  outcome_t b = in_child(reserve_as_b, NULL);
  ck_assert_msg(WIFEXITED(b.status) && WEXITSTATUS(b.status) == 0, "B: %d %s", b.status,
                b.message);
  bool ok = call(t, RESV_OP_RESERVE, "seat@x", "a", &a, &err);
  ck_assert_msg(!ok, "A answered %s for the seat B holds", resv_status_name(a.status));
  ck_assert_msg(err.code == RESV_ECLOSED, "%s: %s", resv_code_name(err.code), err.message);
  ck_assert_msg(strstr(err.message, "removed or replaced"), "%s", err.message);
  /* From then on, reads too, and the reservation A had is not answered. */
  ck_assert(!call(t, RESV_OP_GET, "mine@x", "a", &a, &err));
  ck_assert_int_eq(err.code, RESV_ECLOSED);
  resv_store_t *again = test_open_file(dir, sync);
  test_get(type_of(again), "seat@x", &a);
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert(test_str_is(a.owner_id, "b"));
  resv_answer_clear(&a);
  resv_store_close(again);
  resv_store_close(s);
}

START_TEST(a_directory_removed_under_a_running_store_answers_closed) {
  two_worlds(REMOVE_DIR, NULL, RESV_SYNC_PROCESS);
}
END_TEST

START_TEST(a_directory_replaced_under_a_running_store_answers_closed) {
  char old[300];
  snprintf(old, sizeof old, "%s.old", dir);
  two_worlds(MOVE_DIR, old, RESV_SYNC_DISK);
  test_remove_dir(old);
}
END_TEST

/* Two lock files for one data file would be two writers at once. */
START_TEST(a_lock_file_removed_under_a_running_store_answers_closed) {
  two_worlds(REMOVE_LOCK, NULL, RESV_SYNC_PROCESS);
}
END_TEST

/* The old data.mdb still has its link, so only its path tells. */
START_TEST(a_data_file_replaced_by_a_copy_under_a_running_store_answers_closed) {
  char aside[300];
  snprintf(aside, sizeof aside, "%s.data", dir);
  two_worlds(COPY_DATA, aside, RESV_SYNC_PROCESS);
  unlink(aside);
}
END_TEST

/* The directory above the store moved away and another made in its
 * place: the path leads to no store, and the next call of the running
 * one answers closed (a write and a read, each right after the move). */
static void above_replaced(int32_t op) {
  char top[300], path[320], old[310];
  snprintf(top, sizeof top, "%s.up", dir);
  snprintf(path, sizeof path, "%s/store", top);
  snprintf(old, sizeof old, "%s.up.old", dir);
  ck_assert_int_eq(mkdir(top, 0700), 0);
  resv_store_t *s = test_open_file(path, RESV_SYNC_PROCESS);
  resv_type_t *t = type_of(s);
  resv_answer_t a = {0};
  resv_error_t err;
  test_reserve(t, "mine@x", "a", "a", HOUR, &a);
  resv_answer_clear(&a);
  ck_assert_int_eq(rename(top, old), 0);
  ck_assert_int_eq(mkdir(top, 0700), 0);
  bool ok = call(t, op, "mine@x", "a", &a, &err);
  ck_assert_msg(!ok, "answered %s from the files moved away", resv_status_name(a.status));
  ck_assert_msg(err.code == RESV_ECLOSED, "%s: %s", resv_code_name(err.code), err.message);
  resv_store_close(s);
  char moved[330];
  snprintf(moved, sizeof moved, "%s/store", old);
  test_remove_dir(moved);
  ck_assert_int_eq(rmdir(old), 0);
  ck_assert_int_eq(rmdir(top), 0);
}

START_TEST(a_directory_above_replaced_under_a_running_store_answers_closed) {
  above_replaced(RESV_OP_RESERVE);
  above_replaced(RESV_OP_GET);
}
END_TEST

/* A relative path stays the directory it named at open. */
START_TEST(a_relative_path_survives_a_change_of_directory) {
  char cwd[4096], *slash = strrchr(dir, '/');
  ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
  *slash = '\0';
  ck_assert_int_eq(chdir(dir), 0);
  *slash = '/';
  resv_store_t *s = test_open_file(slash + 1, RESV_SYNC_PROCESS);
  ck_assert_int_eq(chdir("/"), 0);
  resv_answer_t a = {0};
  test_reserve(type_of(s), "seat@x", "a", "a", HOUR, &a);
  ck_assert_int_eq(a.status, RESV_RESERVED);
  resv_answer_clear(&a);
  resv_store_close(s);
  ck_assert_int_eq(chdir(cwd), 0);
}
END_TEST

/* ---- permissions --------------------------------------------------------- */

START_TEST(the_files_follow_the_umask) {
  char path[300], file[320];
  struct stat st;
  mode_t old = umask(002);
  snprintf(path, sizeof path, "%s/store", dir);
  resv_options_t o = {.path = path, .map_size = 64 << 20};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  umask(old);
  ck_assert_msg(s != NULL, "%s", err.message);
  resv_store_close(s);
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0775);
  snprintf(file, sizeof file, "%s/data.mdb", path);
  ck_assert_int_eq(stat(file, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0664);
  snprintf(file, sizeof file, "%s/lock.mdb", path);
  ck_assert_int_eq(stat(file, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0664);
  test_remove_dir(path);
}
END_TEST

/* In a child: becomes nobody when the tests run as root (else stays who
 * it is), opens the store at arg and reports the error. */
static void open_as_nobody(void *arg) {
  resv_error_t err;
  if (geteuid() == 0 && (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))) test_child_exit(2);
  resv_options_t o = {.path = arg, .map_size = 64 << 20};
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) child_exit_with(&err);
  resv_store_close(s);
  test_child_exit(0);
}

/* Adds to words what the error must say of the user. */
static void with_user(char *words, size_t size) {
  size_t n = strlen(words);
  if (geteuid() == 0)
    snprintf(words + n, size - n, " as user nobody (uid %d): Permission denied", NOBODY);
  else
    snprintf(words + n, size - n, " as ");
}

START_TEST(a_store_made_by_root_refuses_another_user_naming_both) {
  if (geteuid() != 0) return; /* nobody else to be */
  char path[300], words[600];
  snprintf(path, sizeof path, "%s/store", dir);
  ck_assert_int_eq(chmod(dir, 0755), 0);
  mode_t old = umask(022);
  resv_store_close(test_open_file(path, RESV_SYNC_PROCESS));
  umask(old);
  snprintf(words, sizeof words, "cannot open %s/lock.mdb for writing", path);
  with_user(words, sizeof words);
  outcome_t o = in_child(open_as_nobody, path);
  expect_error(o, RESV_EINVALID, words);
  expect_error(o, RESV_EINVALID, "owned by user root (uid 0), mode 0644");
  test_remove_dir(path);
}
END_TEST

START_TEST(a_read_only_directory_is_invalid_naming_the_user) {
  char path[300], words[600];
  snprintf(path, sizeof path, "%s/store", dir);
  ck_assert_int_eq(mkdir(path, 0555), 0);
  ck_assert_int_eq(chmod(path, 0555), 0);
  ck_assert_int_eq(chmod(dir, 0555), 0);
  /* An empty directory the process may not write into. */
  snprintf(words, sizeof words, "cannot create %s/lock.mdb", path);
  with_user(words, sizeof words);
  expect_error(in_child(open_as_nobody, path), RESV_EINVALID, words);
  /* A directory it may not make. */
  snprintf(path, sizeof path, "%s/missing", dir);
  snprintf(words, sizeof words, "cannot make the directory %s", path);
  with_user(words, sizeof words);
  expect_error(in_child(open_as_nobody, path), RESV_EINVALID, words);
  ck_assert_int_eq(chmod(dir, 0700), 0);
  snprintf(path, sizeof path, "%s/store", dir);
  rmdir(path);
}
END_TEST

Suite *file_integrity_suite(void) {
  const TTest *tests[] = {
      a_data_file_truncated_to_90_percent_is_refused_at_open,
      a_data_file_truncated_to_50_percent_is_refused_at_open,
      a_data_file_truncated_to_10_percent_is_refused_at_open,
      the_data_file_is_kept_longer_than_its_pages, damaged_meta_pages_are_refused_at_open,
      resv_recover_moves_a_truncated_or_meta_damaged_store_aside,
      reads_of_a_file_truncated_while_open_answer_format,
      reads_of_a_file_emptied_while_open_answer_format,
      reads_of_a_file_truncated_through_another_link_answer_format,
      a_directory_removed_under_a_running_store_answers_closed,
      a_directory_replaced_under_a_running_store_answers_closed,
      a_lock_file_removed_under_a_running_store_answers_closed,
      a_data_file_replaced_by_a_copy_under_a_running_store_answers_closed,
      a_directory_above_replaced_under_a_running_store_answers_closed,
      a_relative_path_survives_a_change_of_directory, the_files_follow_the_umask,
      a_store_made_by_root_refuses_another_user_naming_both,
      a_read_only_directory_is_invalid_naming_the_user, NULL};
  Suite *s = test_suite("file_integrity", "file_integrity", 60, setup, teardown, tests);
  file_unwatched_tcase(s);
  file_flush_tcase(s);
  file_ring_tcase(s);
  file_walk_tcase(s);
  return s;
}
