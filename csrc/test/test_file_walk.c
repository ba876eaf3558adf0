/* test_file_walk.c: the walk of data.mdb's trees at open (file_walk.c).
 * A page LMDB's cursor code would crash on (a node flag resv never
 * writes, a node offset outside its page, a child past the file's pages,
 * a list of free pages longer than its record) is refused at open with
 * format, naming the database and the page, before any read; a store
 * whose records are on overflow pages, that another process writes to
 * while it opens, or whose newest meta page a killed writer never
 * published, opens as it is; resv recover moves a refused store aside. A
 * test case of the file_integrity suite.
 *
 * The damage is made in the file's bytes, found by following the newer
 * meta page to the type's tree (file_layout.h says where things are).
 * Each store is opened in a forked child (file_integrity_test.h). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "file_layout.h"
#include "file_integrity_test.h"

#define TYPE_DB "wow_reservation__test__seat"

static unsigned char *file; /* data.mdb's pages, as make_store_read read them */
static size_t file_size;
static long psize;

static void setup(void) {
  test_temp_dir(dir, sizeof dir);
  psize = sysconf(_SC_PAGESIZE);
}

static void teardown(void) {
  free(file);
  file = NULL;
  test_remove_dir(dir);
}

static void data_path(char *out, size_t size) { snprintf(out, size, "%s/data.mdb", dir); }

/* data.mdb's pages in use, read into file. */
static void read_file(void) {
  char path[300];
  data_path(path, sizeof path);
  file_size = (size_t)test_lmdb_pages(path) * (size_t)psize;
  free(file);
  file = malloc(file_size);
  int fd = open(path, O_RDONLY);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pread(fd, file, file_size, 0), (ssize_t)file_size);
  close(fd);
}

/* The closed store of make_store, its pages read into file. */
static void make_store_read(void) {
  make_store();
  read_file();
}

/* Writes page pg of file back into data.mdb. */
static void write_page(uint64_t pg) {
  char path[300];
  data_path(path, sizeof path);
  int fd = open(path, O_WRONLY);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, file + pg * (size_t)psize, (size_t)psize, (off_t)pg * psize),
                   psize);
  close(fd);
}

static unsigned char *page(uint64_t pg) {
  ck_assert_uint_lt(pg * (size_t)psize, file_size);
  return file + pg * (size_t)psize;
}

static const unsigned char *newer_meta(void) {
  const unsigned char *m0 = page(0), *m1 = page(1);
  return resv__u64_at(m1, RESV__META_TXNID) > resv__u64_at(m0, RESV__META_TXNID) ? m1 : m0;
}

/* Node i of a branch or leaf page. */
static unsigned char *node(unsigned char *p, unsigned i) {
  ck_assert_uint_lt(i, (resv__u16_at(p, RESV__PAGE_LOWER) - RESV__PAGE_HEADER) / 2u);
  return p + resv__u16_at(p, RESV__PAGE_HEADER + 2 * i);
}

/* The root page of the type's tree, from the main database's leaf. */
static uint64_t type_root(void) {
  unsigned char *main_root = page(resv__u64_at(newer_meta(), RESV__META_MAIN_DB + RESV__DB_ROOT));
  ck_assert_uint_eq(resv__u16_at(main_root, RESV__PAGE_FLAGS), RESV__P_LEAF);
  for (unsigned i = 0;; i++) {
    unsigned char *n = node(main_root, i);
    size_t ksize = resv__u16_at(n, 6);
    if (ksize == strlen(TYPE_DB) && memcmp(n + RESV__NODE_HEADER, TYPE_DB, ksize) == 0)
      return resv__u64_at(n + RESV__NODE_HEADER + ksize, RESV__DB_ROOT);
  }
}

/* The first leaf page of the type's tree, and its parent (a branch: the
 * store's KEYS take more than one leaf). */
static uint64_t first_leaf(uint64_t *parent) {
  uint64_t pg = type_root();
  *parent = 0;
  while (resv__u16_at(page(pg), RESV__PAGE_FLAGS) == RESV__P_BRANCH) {
    *parent = pg;
    pg = resv__node_child(node(page(pg), 0));
  }
  ck_assert_uint_eq(resv__u16_at(page(pg), RESV__PAGE_FLAGS), RESV__P_LEAF);
  ck_assert_uint_ne(*parent, 0);
  return pg;
}

/* The store, as damaged, is refused at open with format, saying words. */
static void expect_refused(const char *words) {
  outcome_t o = in_child(open_and_get_all, NULL);
  expect_error(o, RESV_EFORMAT, "is damaged: in ");
  expect_error(o, RESV_EFORMAT, words);
}

/* The known crash (docs/file-store.md): F_DUPDATA on a leaf node sends
 * LMDB into a sub-database that is not there. */
START_TEST(a_leaf_node_flagged_as_duplicates_is_refused_at_open) {
  uint64_t parent, leaf;
  make_store_read();
  leaf = first_leaf(&parent);
  unsigned char *n = node(page(leaf), 3);
  n[4] |= 0x04;
  write_page(leaf);
  char words[200];
  snprintf(words, sizeof words, "in " TYPE_DB ", page %llu's node 3 has flags 0x4",
           (unsigned long long)leaf);
  expect_refused(words);
}
END_TEST

START_TEST(a_node_outside_its_page_is_refused_at_open) {
  uint64_t parent, leaf;
  make_store_read();
  leaf = first_leaf(&parent);
  unsigned char *p = page(leaf);
  uint16_t off = (uint16_t)(psize - 2);
  memcpy(p + RESV__PAGE_HEADER + 2 * 5, &off, 2);
  write_page(leaf);
  char words[200];
  snprintf(words, sizeof words, "page %llu's node 5 is at %ld, outside its nodes",
           (unsigned long long)leaf, psize - 2);
  expect_refused(words);
}
END_TEST

START_TEST(a_branch_to_a_page_past_the_file_is_refused_at_open) {
  uint64_t parent;
  make_store_read();
  first_leaf(&parent);
  unsigned char *n = node(page(parent), 1);
  uint64_t far = file_size / (size_t)psize + 100;
  uint16_t lo = (uint16_t)far, hi = (uint16_t)(far >> 16), top = (uint16_t)(far >> 32);
  memcpy(n, &lo, 2);
  memcpy(n + 2, &hi, 2);
  memcpy(n + 4, &top, 2);
  write_page(parent);
  char words[200];
  snprintf(words, sizeof words, "a tree's page %llu is not among the snapshot's pages",
           (unsigned long long)far);
  expect_refused(words);
}
END_TEST

/* A list of free pages whose count is past its record: LMDB's next write
 * would merge pages it reads from past the record's end. */
START_TEST(a_list_of_free_pages_longer_than_its_record_is_refused_at_open) {
  make_store_read();
  unsigned char *p = page(resv__u64_at(newer_meta(), RESV__META_FREE_DB + RESV__DB_ROOT));
  ck_assert_uint_eq(resv__u16_at(p, RESV__PAGE_FLAGS), RESV__P_LEAF);
  unsigned char *n = node(p, 0);
  size_t size = resv__u16_at(n, 0), ksize = resv__u16_at(n, 6);
  ck_assert_uint_eq(resv__u16_at(n, 4), 0); /* the list in the node */
  uint64_t count = size / 8 + 50;
  memcpy(n + RESV__NODE_HEADER + ksize, &count, 8);
  write_page(resv__u64_at(newer_meta(), RESV__META_FREE_DB + RESV__DB_ROOT));
  char words[200];
  snprintf(words, sizeof words, "in the free page list, a record of %zu bytes does not "
           "hold a list of free pages", size);
  expect_refused(words);
}
END_TEST

/* resv recover moves a store the walk refuses aside, as it does one a
 * crash of the OS may have damaged; the next open starts empty. A store
 * that opens as it is stays. */
START_TEST(resv_recover_moves_a_store_the_walk_refuses_aside) {
  char kept[600];
  resv_error_t err;
  uint64_t parent, leaf;
  make_store_read();
  ck_assert_int_eq(resv_store_recover(dir, kept, sizeof kept, &err), 0);
  leaf = first_leaf(&parent);
  node(page(leaf), 0)[4] |= 0x04;
  write_page(leaf);
  recovered_then_empty();
}
END_TEST

/* Records longer than a page go on overflow pages, which the walk takes
 * in runs: such a store opens and answers. */
START_TEST(a_store_with_records_on_overflow_pages_opens) {
  char attempt[1000];
  resv_answer_t a = {0};
  resv_error_t err;
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_type_t *t = type_of(s);
  for (int h = 0; h < 6; h++) {
    memset(attempt, 'a' + h, sizeof attempt - 1);
    attempt[sizeof attempt - 1] = '\0';
    test_reserve(t, "big@x", "o1", attempt, HOUR, &a);
  }
  resv_store_close(s);
  s = test_open_file(dir, RESV_SYNC_PROCESS);
  t = type_of(s);
  resv_request_t r = {.op = RESV_OP_GET, .key = test_key("email", "big@x"),
                      .owner = test_owner("", "o1")};
  ck_assert_msg(resv_call(t, &r, &a, &err), "get: %s", err.message);
  ck_assert_int_eq(a.status, RESV_PENDING);
  ck_assert_int_eq(a.nholds, 6);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* In a child: writes new keys (every other one expiring at once, so
 * that sweeps free pages for later commits to reuse) until killed; says
 * so through fd once it has written. */
static void keep_writing(int fd) {
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_error_t err;
  resv_type_t *t = s ? resv_store_type(s, "test", 4, "seat", 4, &err) : NULL;
  char key[32];
  resv_answer_t a = {0};
  for (int i = 0; t; i++) {
    snprintf(key, sizeof key, "w%d@x", i);
    resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", key),
                        .owner = test_owner("", "o2"), .attempt = resv_cstr("a"),
                        .ttl_ms = i % 2 ? 1 : HOUR};
    if (!resv_call(t, &r, &a, &err)) break;
    if (i == 100 && write(fd, "w", 1) != 1) break;
  }
  _exit(1);
}

/* Another process commits all the while: the walk reads its snapshot's
 * pages, never the ones later commits reuse, so no open is refused. */
START_TEST(a_store_written_by_another_process_meanwhile_opens) {
  make_store();
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) keep_writing(fds[1]);
  char c;
  ck_assert_int_eq(read(fds[0], &c, 1), 1);
  int refused = -1;
  resv_error_t err;
  for (int i = 0; i < 100 && refused < 0; i++) {
    resv_options_t o = {.path = dir, .sync = RESV_SYNC_PROCESS, .threads = 1};
    resv_store_t *s = resv_store_open(&o, &err);
    if (!s) refused = i;
    resv_store_close(s);
  }
  int status;
  bool writing = waitpid(pid, &status, WNOHANG) == 0;
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  close(fds[0]);
  close(fds[1]);
  ck_assert_msg(refused < 0, "open %d: %s", refused, err.message);
  ck_assert_msg(writing, "the writer stopped before the last open");
}
END_TEST

/* A writer killed after it wrote its meta page and before LMDB published
 * its transaction in lock.mdb leaves the newest meta page one ahead of
 * what every read begins at, until the next writer takes LMDB's lock and
 * adopts it. A process (re)started meanwhile, while another keeps the
 * store open, opens. Made here as the kill leaves it: the older meta page
 * rewritten as the newer one's successor, with the store held open. (It
 * refused before: "other processes' commits changed it at every try", as
 * `make stress` found with writers killed under load.) */
START_TEST(a_meta_page_a_killed_writer_left_unpublished_does_not_stop_an_open) {
  make_store();
  resv_store_t *s = test_open_file(dir, RESV_SYNC_DISK);
  read_file();
  const unsigned char *newer = newer_meta();
  uint64_t next = resv__u64_at(newer, RESV__META_TXNID) + 1;
  unsigned char *older = page(next & 1);
  ck_assert_ptr_ne(older, newer);
  memcpy(older + RESV__META_MAGIC_AT, newer + RESV__META_MAGIC_AT,
         RESV__META_BYTES - RESV__META_MAGIC_AT);
  memcpy(older + RESV__META_TXNID, &next, sizeof next);
  write_page(next & 1);
  outcome_t o = in_child(open_and_get_all, NULL);
  resv_store_close(s);
  expect_answered(o);
}
END_TEST

void file_walk_tcase(Suite *s) {
  const TTest *tests[] = {
      a_leaf_node_flagged_as_duplicates_is_refused_at_open,
      a_node_outside_its_page_is_refused_at_open,
      a_branch_to_a_page_past_the_file_is_refused_at_open,
      a_list_of_free_pages_longer_than_its_record_is_refused_at_open,
      resv_recover_moves_a_store_the_walk_refuses_aside,
      a_store_with_records_on_overflow_pages_opens,
      a_store_written_by_another_process_meanwhile_opens,
      a_meta_page_a_killed_writer_left_unpublished_does_not_stop_an_open,
      NULL,
  };
  test_tcase(s, "file_walk", 60, setup, teardown, tests);
}
