/* open.c: what opening a file store costs, now that open walks every page
 * in use (csrc/file/file_walk.c), against baselines measured in the same
 * run.
 *
 *   open [keys] [rounds]
 *
 * A store (sync = "process") is filled with `keys` pending reservations
 * (scattered 20-byte keys, default 200,000) and closed. Then, in each of
 * `rounds` rounds (default 5), with the file in the page cache:
 *
 * - resv: resv_store_open and resv_store_close of the store, the walk
 *   included (ms);
 * - lmdb: LMDB's own open of the directory, a read transaction that opens
 *   the type's database, and the close: what open costs without resv's
 *   checks (ms);
 * - read: a pread of every page in use, one page at a time, which is the
 *   walk's reading without its checks (ms).
 *
 * Prints min/median/max of each and the ratios of resv's open to the two
 * baselines ("figure <name> <value>" lines). The directory is made under
 * $TMPDIR (default /tmp) and removed. */
#include "bench.h"

#include <fcntl.h>
#include <lmdb.h>

#define MAX_ROUNDS 50

static char dir[256];

static double ms_since(int64_t t0) { return (double)(bench_wall_ns() - t0) / 1e6; }

static void fill(int keys) {
  resv_store_t *s = bench_open_file(dir, RESV_SYNC_PROCESS, 0);
  resv_type_t *t = bench_type(s, "open");
  resv_answer_t a = {0};
  char key[32];
  for (int i = 0; i < keys; i++) {
    bench_key(key, i, true, 'k');
    bench_reserve(t, key, "owner-0001", RESV_RESERVED, &a);
  }
  resv_answer_clear(&a);
  resv_store_close(s);
}

static double resv_open(void) {
  int64_t t0 = bench_wall_ns();
  resv_store_close(bench_open_file(dir, RESV_SYNC_PROCESS, 0));
  return ms_since(t0);
}

static void lmdb_check(int rc, const char *what) {
  if (rc) {
    fprintf(stderr, "bench: %s: %s\n", what, mdb_strerror(rc));
    exit(1);
  }
}

/* LMDB's open, with the flags the store opens it with; *pages set to the
 * pages in use. */
static double lmdb_open(uint64_t *pages) {
  int64_t t0 = bench_wall_ns();
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  MDB_envinfo info;
  lmdb_check(mdb_env_create(&env), "mdb_env_create");
  lmdb_check(mdb_env_set_maxdbs(env, 64), "mdb_env_set_maxdbs");
  lmdb_check(mdb_env_set_mapsize(env, (size_t)(INT64_C(4) << 30) + (INT64_C(4) << 30) / 16),
             "mdb_env_set_mapsize");
  lmdb_check(mdb_env_open(env, dir, MDB_NOTLS | MDB_NOSYNC | MDB_WRITEMAP, 0660),
             "mdb_env_open");
  lmdb_check(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), "mdb_txn_begin");
  lmdb_check(mdb_dbi_open(txn, "wow_reservation__bench__open", 0, &dbi), "mdb_dbi_open");
  mdb_txn_abort(txn);
  mdb_env_info(env, &info);
  *pages = (uint64_t)info.me_last_pgno + 1;
  mdb_env_close(env);
  return ms_since(t0);
}

static double read_pages(uint64_t pages) {
  char file[300];
  snprintf(file, sizeof file, "%s/data.mdb", dir);
  long psize = sysconf(_SC_PAGESIZE);
  char *page = malloc((size_t)psize);
  int64_t t0 = bench_wall_ns();
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || !page) {
    perror(file);
    exit(1);
  }
  for (uint64_t i = 0; i < pages; i++)
    if (pread(fd, page, (size_t)psize, (off_t)i * psize) != psize) {
      perror("pread");
      exit(1);
    }
  close(fd);
  double ms = ms_since(t0);
  free(page);
  return ms;
}

static void report(const char *name, double *v, int n) {
  bench_median(v, (size_t)n);
  printf("  %-5s %8.2f %8.2f %8.2f ms\n", name, v[0], v[n / 2], v[n - 1]);
  printf("figure open_%s_ms %.3f\n", name, v[n / 2]);
}

int main(int argc, char **argv) {
  int keys = argc > 1 ? atoi(argv[1]) : 200000;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  if (keys < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
    fprintf(stderr, "usage: open [keys >= 1] [rounds 1..%d]\n", MAX_ROUNDS);
    return 2;
  }
  bench_fresh_dir(dir, sizeof dir);
  fill(keys);
  double r[MAX_ROUNDS], l[MAX_ROUNDS], p[MAX_ROUNDS], to_l[MAX_ROUNDS], to_p[MAX_ROUNDS];
  uint64_t pages = 0;
  resv_open(); /* the page cache holds the file from here on */
  for (int i = 0; i < rounds; i++) {
    r[i] = resv_open();
    l[i] = lmdb_open(&pages);
    p[i] = read_pages(pages);
    to_l[i] = r[i] / l[i];
    to_p[i] = r[i] / p[i];
  }
  char load[64];
  bench_load(load, sizeof load);
  printf("open: %d reservations, %llu pages of %ld bytes, %d rounds (load %s)\n"
         "          min   median      max\n", keys, (unsigned long long)pages,
         sysconf(_SC_PAGESIZE), rounds, load);
  report("resv", r, rounds);
  report("lmdb", l, rounds);
  report("read", p, rounds);
  bench_median(to_l, (size_t)rounds);
  bench_median(to_p, (size_t)rounds);
  printf("  resv/lmdb %.1f-%.1f (median %.1f), resv/read %.2f-%.2f (median %.2f)\n",
         to_l[0], to_l[rounds - 1], to_l[rounds / 2], to_p[0], to_p[rounds - 1],
         to_p[rounds / 2]);
  printf("figure open_resv_over_lmdb %.2f\nfigure open_resv_over_read %.2f\n",
         to_l[rounds / 2], to_p[rounds / 2]);
  bench_remove_dir(dir);
  return 0;
}
