/* lmdb_freelist.c: LMDB alone, single-put commits before and after a big
 * delete, to tell LMDB's share of bench/bigdelete's slowdown from the
 * store's.
 *
 *   lmdb_freelist [rounds] [commits per measure]
 *
 * Each round, for each case, on a fresh environment (MDB_NOSYNC, as the
 * store's sync = "process"; with and without MDB_WRITEMAP): 20,000
 * scattered 20-byte keys with 56-byte values, then a burst of expired
 * ones side by side (0, 10,000 or 100,000), `commits` (default 2,000)
 * commits of one mdb_put of a new scattered key each (before), the burst
 * deleted `chunk` keys a transaction (16, 1,024 or all at once), the
 * same commits again (after); in one case the environment is then
 * replaced by a compacted copy (mdb_env_copy2 with MDB_CP_COMPACT) before
 * the commits after (without MDB_WRITEMAP only: with it, the copy's
 * fresh map costs page faults of its own). The ratio of the round is after over before in the
 * thread's CPU time; without MDB_WRITEMAP the bytes each commit writes
 * (/proc/self/io's wchar) are counted too, in pages. The shape of the
 * free list (LMDB's database 0) is printed after each case's last round.
 * Rounds default to 5 (at least 5); min/median/max of the ratios.
 *
 * Every figure is printed as "figure <name> <value>". The directories are
 * made under $TMPDIR (default /tmp) and removed. */
#include "bench.h"

#include <lmdb.h>
#include <sys/stat.h>

#define MAX_ROUNDS 64
#define LIVE 20000
#define VALUE 56

static char dir[256], copy_dir[300];

#define CHECK(call)                                                              \
  do {                                                                           \
    int rc_ = (call);                                                            \
    if (rc_) {                                                                   \
      fprintf(stderr, "bench: %s: %s\n", #call, mdb_strerror(rc_));              \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

typedef struct {
  MDB_env *env;
  MDB_dbi dbi;
  unsigned flags;
} db_t;

static void open_db(db_t *d, const char *path) {
  MDB_txn *txn;
  CHECK(mdb_env_create(&d->env));
  CHECK(mdb_env_set_maxdbs(d->env, 4));
  CHECK(mdb_env_set_mapsize(d->env, (size_t)1 << 32));
  CHECK(mdb_env_open(d->env, path, MDB_NOTLS | MDB_NOSYNC | d->flags, 0600));
  CHECK(mdb_txn_begin(d->env, NULL, 0, &txn));
  CHECK(mdb_dbi_open(txn, "d", MDB_CREATE, &d->dbi));
  CHECK(mdb_txn_commit(txn));
}

/* Puts (or deletes) keys [from, to) in transactions of `chunk`. */
static void write_keys(db_t *d, int from, int to, bool scattered, bool del, int chunk) {
  char key[32], value[VALUE];
  memset(value, 'v', sizeof value);
  for (int i = from; i < to;) {
    MDB_txn *txn;
    CHECK(mdb_txn_begin(d->env, NULL, 0, &txn));
    for (int end = i + chunk; i < end && i < to; i++) {
      bench_key(key, i, scattered, 'e');
      MDB_val k = {20, key}, v = {sizeof value, value};
      CHECK(del ? mdb_del(txn, d->dbi, &k, NULL) : mdb_put(txn, d->dbi, &k, &v, 0));
    }
    CHECK(mdb_txn_commit(txn));
  }
}

static void put_keys(db_t *d, MDB_txn *txn, int from, int to, bool scattered) {
  char key[32], value[VALUE];
  memset(value, 'v', sizeof value);
  for (int i = from; i < to; i++) {
    bench_key(key, i, scattered, 'e');
    MDB_val k = {20, key}, v = {sizeof value, value};
    CHECK(mdb_put(txn, d->dbi, &k, &v, 0));
  }
}

static long long written_bytes(void) {
  FILE *f = fopen("/proc/self/io", "r");
  char line[128];
  long long w = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "wchar: %lld", &w) == 1) break;
  if (f) fclose(f);
  return w;
}

typedef struct {
  double cpu, pages; /* ns of CPU and pages written per commit */
} cost_t;

static cost_t commits(db_t *d, int n, int from) {
  long long w0 = written_bytes();
  int64_t c0 = bench_thread_cpu_ns();
  write_keys(d, from, from + n, true, false, 1);
  return (cost_t){(double)(bench_thread_cpu_ns() - c0) / n,
                  (double)(written_bytes() - w0) / n / 4096};
}

static void free_list(db_t *d, char *out, size_t size) {
  MDB_txn *txn;
  MDB_stat st;
  CHECK(mdb_txn_begin(d->env, NULL, MDB_RDONLY, &txn));
  CHECK(mdb_stat(txn, 0, &st));
  snprintf(out, size, "%zu records, depth %u, %zu leaves, %zu overflow pages", st.ms_entries,
           st.ms_depth, st.ms_leaf_pages, st.ms_overflow_pages);
  mdb_txn_abort(txn);
}

typedef struct {
  unsigned flags;
  int doomed, chunk;
  bool compact, scattered;
} case_t;

/* One round of one case: after over before; the pages of each. */
static double one_round(const case_t *c, int n, cost_t *before, cost_t *after, char *shape,
                        size_t shape_size) {
  db_t d = {.flags = c->flags};
  bench_fresh_dir(dir, sizeof dir);
  open_db(&d, dir);
  /* Live and doomed keys in one transaction on the empty file, which
   * frees no page: more transactions would each copy much of the tree,
   * and leave free pages enough to slow the commits before. */
  int first = c->scattered ? 100000000 : 0; /* scattered: among the live keys */
  MDB_txn *txn;
  CHECK(mdb_txn_begin(d.env, NULL, 0, &txn));
  put_keys(&d, txn, 0, LIVE, true);
  put_keys(&d, txn, first, first + c->doomed, c->scattered);
  CHECK(mdb_txn_commit(txn));
  *before = commits(&d, n, 1000000);
  write_keys(&d, first, first + c->doomed, c->scattered, true, c->chunk);
  if (c->compact) {
    snprintf(copy_dir, sizeof copy_dir, "%s/copy", dir);
    if (mkdir(copy_dir, 0700)) {
      perror(copy_dir);
      exit(1);
    }
    CHECK(mdb_env_copy2(d.env, copy_dir, MDB_CP_COMPACT));
    mdb_env_close(d.env);
    open_db(&d, copy_dir);
  }
  *after = commits(&d, n, 1000000 + n);
  free_list(&d, shape, shape_size);
  mdb_env_close(d.env);
  if (c->compact) bench_remove_dir(copy_dir);
  bench_remove_dir(dir);
  return after->cpu / before->cpu;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  int n = argc > 2 ? atoi(argv[2]) : 2000;
  if (rounds < 5) rounds = 5;
  if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
  if (n < 1) n = 1;
  static const case_t cases[] = {
      {0, 0, 1024, false, false},           {0, 10000, 1024, false, false},
      {0, 100000, 1024, false, false},      {0, 100000, 1024, true, false},
      {MDB_WRITEMAP, 0, 1024, false, false}, {MDB_WRITEMAP, 100000, 16, false, false},
      {MDB_WRITEMAP, 100000, 1024, false, false}, {MDB_WRITEMAP, 100000, 100000, false, false},
      {0, 10000, 16, false, true}, {0, 10000, 64, false, true}, {0, 10000, 1024, false, true},
      {0, 100000, 16, false, true}, {0, 100000, 64, false, true}, {0, 100000, 1024, false, true},
  };
  char load[64];
  bench_load(load, sizeof load);
  printf("lmdb_freelist: LMDB %s, %d rounds, %d commits per measure, %d live keys, load %s\n",
         mdb_version(NULL, NULL, NULL), rounds, n, LIVE, load);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const case_t *c = &cases[i];
    double ratio[MAX_ROUNDS], pb[MAX_ROUNDS], pa[MAX_ROUNDS];
    char shape[160] = "";
    for (int r = 0; r < rounds; r++) {
      cost_t b, a;
      ratio[r] = one_round(c, n, &b, &a, shape, sizeof shape);
      pb[r] = b.pages;
      pa[r] = a.pages;
    }
    double med = bench_median(ratio, (size_t)rounds);
    double pages_before = bench_median(pb, (size_t)rounds), pages_after = bench_median(pa, (size_t)rounds);
    char name[96];
    snprintf(name, sizeof name, "lmdb_%s_after_delete_of_%d%s_chunk_%d%s",
             c->flags ? "writemap" : "pwrite", c->doomed, c->scattered ? "_scattered" : "",
             c->chunk, c->compact ? "_compacted" : "");
    printf("%s%s, %d deleted %d a transaction%s: commits after %.2fx before in CPU "
           "(min %.2fx, max %.2fx, %d rounds)", c->flags ? "MDB_WRITEMAP" : "pwrite",
           c->scattered ? ", scattered" : "", c->doomed, c->chunk, c->compact ? ", then a compacted copy" : "", med, ratio[0],
           ratio[rounds - 1], rounds);
    if (!c->flags) printf("; pages written a commit %.2f before, %.2f after", pages_before, pages_after);
    printf("; the free list after: %s\n", shape);
    printf("figure %s_median %.3f\nfigure %s_min %.3f\nfigure %s_max %.3f\n", name, med, name,
           ratio[0], name, ratio[rounds - 1]);
    if (!c->flags)
      printf("figure %s_pages_before %.2f\nfigure %s_pages_after %.2f\n", name, pages_before,
             name, pages_after);
  }
  bench_load(load, sizeof load);
  printf("load at the end %s\n", load);
  return 0;
}
