/* redo_floor.c: what one durable commit of a single writer could cost if
 * sync = "disk" flushed a redo log instead of LMDB's pages (a design not
 * built: bench/README.md section 8), against what it costs today, each as
 * a ratio over one pwrite of a 4 KiB page and its fdatasync on the same
 * file system (durability.c's baseline).
 *
 *   redo_floor [seconds per round] [rounds]
 *
 * Each round, on fresh files in one directory, takes the ways below in
 * turn, 16 commits of each, for `seconds` (default 1) in all:
 *   page     the baseline;
 *   store    the file store with sync = "disk", one writer reserving new
 *            keys (what durability.c measures first);
 *   lmdb     LMDB alone as the store commits: a put of a new key in a
 *            transaction committed with MDB_NOMETASYNC (the pages'
 *            fdatasync), then mdb_env_sync (the meta page's);
 *   log      a 128-byte record written at the end of a log file written
 *            through once beforehand, and its fdatasync: the one flush a
 *            redo log would wait for;
 *   lmdb+log the same put committed without a flush (MDB_NOSYNC and
 *            MDB_WRITEMAP, as sync = "process"), then the log's record
 *            and its fdatasync.
 * min / median / max of the rounds' ratios (rounds: default 5, at least 5).
 * Every figure is printed as "figure <name> <value>". The directory is made
 * under $TMPDIR (default /tmp) and removed. */
#include "bench.h"

#include <fcntl.h>
#include <lmdb.h>
#include <sys/stat.h>

#define MAX_ROUNDS 64
#define LOG_BYTES (4 << 20)
#define RECORD 128
#define VALUE 96
#define BLOCK 16
#define WAYS 5 /* page, store, lmdb, log, lmdb+log */

static char dir[256];
static long next_key;

static void die_errno(const char *what) {
  perror(what);
  exit(1);
}

static void lmdb_check(int rc, const char *what) {
  if (rc) {
    fprintf(stderr, "bench: %s: %s\n", what, mdb_strerror(rc));
    exit(1);
  }
}

static int open_file(const char *name) {
  char path[300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  if (fd < 0) die_errno(path);
  return fd;
}

/* An LMDB environment in dir/name with one database. */
static MDB_env *open_env(const char *name, unsigned flags, MDB_dbi *dbi) {
  char path[300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (mkdir(path, 0700) != 0) die_errno(path);
  MDB_env *env;
  MDB_txn *txn;
  lmdb_check(mdb_env_create(&env), "mdb_env_create");
  lmdb_check(mdb_env_set_mapsize(env, (size_t)1 << 30), "mdb_env_set_mapsize");
  lmdb_check(mdb_env_open(env, path, flags, 0600), "mdb_env_open");
  lmdb_check(mdb_txn_begin(env, NULL, 0, &txn), "mdb_txn_begin");
  lmdb_check(mdb_dbi_open(txn, NULL, 0, dbi), "mdb_dbi_open");
  lmdb_check(mdb_txn_commit(txn), "mdb_txn_commit");
  return env;
}

/* The measures; each runs for `seconds` and answers ns a commit. */
typedef struct rig {
  int page_fd, log_fd;
  off_t log_at;
  MDB_env *synced, *unsynced;
  MDB_dbi synced_db, unsynced_db;
  resv_type_t *type;
} rig_t;

static void put_new_key(MDB_env *env, MDB_dbi dbi) {
  char key[21], value[VALUE];
  bench_key(key, (int)next_key++, true, 'k');
  memset(value, 'v', sizeof value);
  MDB_val k = {20, key}, v = {sizeof value, value};
  MDB_txn *txn;
  lmdb_check(mdb_txn_begin(env, NULL, 0, &txn), "mdb_txn_begin");
  lmdb_check(mdb_put(txn, dbi, &k, &v, 0), "mdb_put");
  lmdb_check(mdb_txn_commit(txn), "mdb_txn_commit");
}

static void log_record(rig_t *r) {
  char record[RECORD];
  memset(record, (int)next_key, sizeof record);
  if (pwrite(r->log_fd, record, sizeof record, r->log_at) != (ssize_t)sizeof record ||
      fdatasync(r->log_fd) != 0)
    die_errno("log");
  r->log_at = (r->log_at + RECORD) % LOG_BYTES;
}

static void one(rig_t *r, int which) {
  switch (which) {
  case 0: { /* page */
    char page[4096];
    memset(page, (int)next_key++, sizeof page);
    if (pwrite(r->page_fd, page, sizeof page, 0) != (ssize_t)sizeof page ||
        fdatasync(r->page_fd) != 0)
      die_errno("page");
    break;
  }
  case 1: { /* store */
    char key[21];
    bench_key(key, (int)next_key++, true, 's');
    resv_request_t q = {.op = RESV_OP_RESERVE,
                        .key = {resv_cstr(""), resv_cstr("email"), resv_cstr(key)},
                        .owner = {resv_cstr("t1"), resv_cstr("owner")},
                        .attempt = resv_cstr("a"), .ttl_ms = 60000};
    resv_answer_t a = {0};
    resv_error_t err;
    if (!resv_call(r->type, &q, &a, &err)) bench_die("reserve", &err);
    bench_expect("reserve", &a, RESV_RESERVED);
    resv_answer_clear(&a);
    break;
  }
  case 2: /* lmdb */
    put_new_key(r->synced, r->synced_db);
    lmdb_check(mdb_env_sync(r->synced, 1), "mdb_env_sync");
    break;
  case 3: /* log */
    log_record(r);
    break;
  default: /* lmdb+log */
    put_new_key(r->unsynced, r->unsynced_db);
    log_record(r);
  }
}

/* The ways taken in turn, BLOCK commits each, for `seconds`: each way's
 * commits meet the disk as the others' do (a block's first commit may
 * wait for what the way before left to the disk). ns a commit, into ns. */
static void measure(rig_t *r, double seconds, double *ns) {
  int64_t spent[WAYS] = {0}, until = bench_wall_ns() + (int64_t)(seconds * 1e9);
  long n = 0;
  for (; bench_wall_ns() < until; n += BLOCK)
    for (int w = 0; w < WAYS; w++) {
      int64_t t0 = bench_wall_ns();
      for (int i = 0; i < BLOCK; i++) one(r, w);
      spent[w] += bench_wall_ns() - t0;
    }
  for (int w = 0; w < WAYS; w++) ns[w] = (double)spent[w] / (double)n;
}

static int cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 1;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  if (rounds < 5) rounds = 5;
  if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
  static const char *const names[WAYS] = {"page", "store", "lmdb", "log", "lmdb_log"};
  double ratio[WAYS][MAX_ROUNDS];
  char load[64];
  bench_load(load, sizeof load);
  printf("load average at the start: %s\n", load);
  for (int round = 0; round < rounds; round++) {
    bench_fresh_dir(dir, sizeof dir);
    rig_t r = {.page_fd = open_file("page"), .log_fd = open_file("log")};
    char *zeros = calloc(1, LOG_BYTES);
    if (!zeros || pwrite(r.log_fd, zeros, LOG_BYTES, 0) != LOG_BYTES || fsync(r.log_fd) != 0)
      die_errno("log");
    free(zeros);
    r.synced = open_env("synced", MDB_NOMETASYNC, &r.synced_db);
    r.unsynced = open_env("unsynced", MDB_NOSYNC | MDB_WRITEMAP, &r.unsynced_db);
    char store_dir[300];
    snprintf(store_dir, sizeof store_dir, "%s/store", dir);
    if (mkdir(store_dir, 0700) != 0) die_errno(store_dir);
    resv_store_t *s = bench_open_file(store_dir, RESV_SYNC_DISK, 60000);
    r.type = bench_type(s, "redo");
    double ns[WAYS];
    measure(&r, seconds, ns);
    printf("round %d: ns a commit:", round);
    for (int w = 0; w < WAYS; w++) {
      ratio[w][round] = ns[w] / ns[0];
      printf(" %s %.0f (%.2fx)", names[w], ns[w], ratio[w][round]);
    }
    printf("\n");
    resv_store_close(s);
    mdb_env_close(r.synced);
    mdb_env_close(r.unsynced);
    close(r.page_fd);
    close(r.log_fd);
    bench_remove_dir(store_dir);
    char path[300];
    for (int i = 0; i < 2; i++) {
      snprintf(path, sizeof path, "%s/%s", dir, i ? "synced" : "unsynced");
      bench_remove_dir(path);
    }
    bench_remove_dir(dir);
  }
  for (int w = 1; w < WAYS; w++) {
    qsort(ratio[w], (size_t)rounds, sizeof ratio[w][0], cmp);
    printf("%s over one page's fdatasync: %.2fx (min %.2fx, max %.2fx, %d rounds)\n", names[w],
           ratio[w][rounds / 2], ratio[w][0], ratio[w][rounds - 1], rounds);
    printf("figure redo_%s_per_page_sync_median %.3f\nfigure redo_%s_per_page_sync_min %.3f\n"
           "figure redo_%s_per_page_sync_max %.3f\n",
           names[w], ratio[w][rounds / 2], names[w], ratio[w][0], names[w],
           ratio[w][rounds - 1]);
  }
  bench_load(load, sizeof load);
  printf("load average at the end: %s\n", load);
  return 0;
}
