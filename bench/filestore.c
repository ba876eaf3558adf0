/* filestore.c: what the file store costs (docs/design.md section 6), each figure a
 * ratio against a baseline measured in the same run.
 *
 *   filestore [keys] [seconds]
 *
 * 1. reserve of new keys, of the same keys again, and a conflict, one
 *    thread, wall ns per call: the file store (sync = process) against the
 *    memory store; median of 5 rounds, each on a fresh type. And the floor
 *    of any store on LMDB that keeps sync = process's promise: LMDB alone,
 *    a get and a put per write transaction, MDB_NOSYNC|MDB_WRITEMAP,
 *    measured in each round after the stores: the file store's new keys
 *    over it, min / median / max of the rounds.
 * 2. bytes of map per live reservation (20-byte key, 10-byte owner id):
 *    the pages of the type's LMDB database (leaf, branch, overflow) over
 *    its records, read with LMDB's own mdb_stat.
 * 3. sync = disk with 1, 8 and 32 writers, each reserving new keys in a
 *    loop for `seconds`: reservations per second, against "one fsync per
 *    call", the same writers each committing its own synced LMDB
 *    transaction per reservation-sized put (what a store without group
 *    commit would do).
 * 4. what the file store's checks of its own files cost (file_identity.c):
 *    a get of a present key, a conflict and a new key, wall ns per call,
 *    against the check alone on the same files, measured in the same
 *    run: per call (a read of the watches, LMDB's meta against the size
 *    kept), and with the paths looked at (stats of the paths of data.mdb
 *    and lock.mdb: once a second, or when the watches saw something).
 *    The ratio is the call with its check over the call without it (the
 *    call less the check).
 *
 * Every figure is printed as "figure <name> <value>". The store's
 * directories are made under $TMPDIR (default /tmp) and removed. */
#include "bench.h"
#include "file_check.h"

#include <dirent.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define ROUNDS 5

static char dir[256];

static void fresh_dir(void) { bench_fresh_dir(dir, sizeof dir); }
static void remove_dir(void) { bench_remove_dir(dir); }

static resv_store_t *open_store(const char *path, int32_t sync, int threads) {
  resv_options_t o = {.path = path, .sync = sync, .threads = threads,
                      .map_size = INT64_C(4) << 30};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) bench_die("open", &err);
  return s;
}

static resv_type_t *type_of(resv_store_t *s, const char *aggregate) {
  resv_error_t err;
  resv_type_t *t = resv_store_type(s, "bench", 5, aggregate, strlen(aggregate), &err);
  if (!t) bench_die("type", &err);
  return t;
}

/* A 20-byte key and a 10-byte owner id, as the DICT comparison uses. */
static void key_of(char *buf, int i) { snprintf(buf, 21, "k%019d", i); }

static double pass(resv_type_t *t, int n, const char *owner, int32_t expect) {
  resv_answer_t a = {0};
  char key[32];
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++) {
    key_of(key, i);
    bench_reserve(t, key, owner, expect, &a);
  }
  int64_t t1 = bench_wall_ns();
  resv_answer_clear(&a);
  return (double)(t1 - t0) / n;
}

/* LMDB's own environment on dir (4 named databases, a 4 GiB map), with
 * flags; exits saying what for when LMDB refuses. */
static MDB_env *lmdb_open(unsigned flags, const char *what) {
  MDB_env *env;
  if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 4) ||
      mdb_env_set_mapsize(env, (size_t)4 << 30) || mdb_env_open(env, dir, flags, 0600)) {
    fprintf(stderr, "bench: LMDB: cannot open %s\n", what);
    exit(1);
  }
  return env;
}

/* ---- 1. inline calls ---------------------------------------------------- */

/* The floor under the file store's reserve of a new key: LMDB alone, each
 * call one write transaction with a get and a put of a 100-byte record on
 * the same keys, committed with the store's flags for sync = process
 * (MDB_NOSYNC, MDB_WRITEMAP). Wall ns per call, one round in a fresh
 * directory (dir is the store's meanwhile: the floor's own beside it). */
static double lmdb_floor(int n) {
  char store_dir[sizeof dir];
  memcpy(store_dir, dir, sizeof dir);
  fresh_dir();
  MDB_env *env = lmdb_open(MDB_NOTLS | MDB_NOSYNC | MDB_WRITEMAP, "the floor's environment");
  MDB_txn *txn;
  MDB_dbi dbi;
  if (mdb_txn_begin(env, NULL, 0, &txn) || mdb_dbi_open(txn, "floor", MDB_CREATE, &dbi) ||
      mdb_txn_commit(txn)) {
    fprintf(stderr, "bench: LMDB floor: cannot open\n");
    exit(1);
  }
  char key[32], value[100];
  memset(value, 'v', sizeof value);
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++) {
    key_of(key, i);
    MDB_val k = {20, key}, v = {sizeof value, value}, old;
    if (mdb_txn_begin(env, NULL, 0, &txn) ||
        mdb_get(txn, dbi, &k, &old) != MDB_NOTFOUND ||
        mdb_put(txn, dbi, &k, &v, 0) || mdb_txn_commit(txn)) {
      fprintf(stderr, "bench: LMDB floor: a write failed\n");
      exit(1);
    }
  }
  double ns = (double)(bench_wall_ns() - t0) / n;
  mdb_env_close(env);
  remove_dir();
  memcpy(dir, store_dir, sizeof dir);
  return ns;
}

/* The lowest, the median and the highest of x[0..n). */
static void spread(const double *x, int n, double out[3]) {
  double s[ROUNDS];
  memcpy(s, x, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, bench_cmp_double);
  out[0] = s[0];
  out[1] = bench_median(s, n);
  out[2] = s[n - 1];
}

/* Each round a fresh type of each store, then the floor (a fresh LMDB
 * environment): the ratios of a round are of figures measured side by
 * side. */
static void inline_calls(int n) {
  double mem[3][ROUNDS], file[3][ROUNDS], floor[ROUNDS], over[ROUNDS], r[3];
  fresh_dir();
  resv_store_t *ms = resv_store_open(&(resv_options_t){0}, NULL);
  resv_store_t *fs = open_store(dir, RESV_SYNC_PROCESS, 1);
  for (int round = 0; round < ROUNDS; round++) {
    char name[32];
    snprintf(name, sizeof name, "inline%d", round);
    resv_type_t *tm = type_of(ms, name), *tf = type_of(fs, name);
    mem[0][round] = pass(tm, n, "owner-0001", RESV_RESERVED);
    file[0][round] = pass(tf, n, "owner-0001", RESV_RESERVED);
    mem[1][round] = pass(tm, n, "owner-0001", RESV_RESERVED);
    file[1][round] = pass(tf, n, "owner-0001", RESV_RESERVED);
    mem[2][round] = pass(tm, n, "owner-0002", RESV_CONFLICT);
    file[2][round] = pass(tf, n, "owner-0002", RESV_CONFLICT);
    floor[round] = lmdb_floor(n);
    over[round] = file[0][round] / floor[round];
  }
  static const char *const names[] = {"reserve_new", "reserve_again", "conflict"};
  for (int k = 0; k < 3; k++) {
    double m = bench_median(mem[k], ROUNDS), f = bench_median(file[k], ROUNDS);
    printf("1. %-14s memory %8.0f ns, file (sync=process) %8.0f ns: %.2fx\n", names[k],
           m, f, f / m);
    printf("figure memory_%s_ns %.0f\nfigure file_%s_ns %.0f\n", names[k], m, names[k], f);
  }
  resv_store_close(fs);
  resv_store_close(ms);
  remove_dir();
  double fl = bench_median(floor, ROUNDS), m = bench_median(mem[0], ROUNDS);
  spread(over, ROUNDS, r);
  printf("1. %-14s LMDB alone (a get and a put per write transaction, MDB_NOSYNC|MDB_WRITEMAP) %8.0f ns: "
         "%.2fx the memory store; the file store over it, each round: %.2f / %.2f / %.2f "
         "(min / median / max of %d)\n",
         "floor, new", fl, fl / m, r[0], r[1], r[2], ROUNDS);
  printf("figure lmdb_floor_new_ns %.0f\nfigure file_over_floor_min %.2f\n"
         "figure file_over_floor_median %.2f\nfigure file_over_floor_max %.2f\n",
         fl, r[0], r[1], r[2]);
}

/* ---- 2. bytes per live reservation -------------------------------------- */

static void bytes_per_reservation(int n) {
  fresh_dir();
  resv_store_t *fs = open_store(dir, RESV_SYNC_PROCESS, 1);
  pass(type_of(fs, "bytes"), n, "owner-0001", RESV_RESERVED);
  resv_store_close(fs);
  MDB_env *env = lmdb_open(MDB_RDONLY, "the store");
  MDB_txn *txn;
  MDB_dbi dbi;
  MDB_stat st;
  if (mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) ||
      mdb_dbi_open(txn, "wow_reservation__bench__bytes", 0, &dbi) || mdb_stat(txn, dbi, &st)) {
    fprintf(stderr, "bench: cannot read the store with LMDB\n");
    exit(1);
  }
  size_t pages = st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
  double per = (double)pages * st.ms_psize / (double)(st.ms_entries - 1);
  printf("2. bytes of map per live reservation (%d, 20-byte keys, 10-byte owner id): "
         "%.1f (%zu pages of %u bytes, depth %u)\n",
         n, per, pages, st.ms_psize, st.ms_depth);
  printf("figure file_bytes_per_reservation %.1f\n", per);
  mdb_txn_abort(txn);
  mdb_env_close(env);
  remove_dir();
}

/* ---- 3. sync = disk: group commit against one fsync per call ------------ */

typedef struct writer {
  resv_type_t *type;  /* the store's way */
  MDB_env *env;       /* the baseline's way */
  MDB_dbi dbi;
  int id;
  int64_t until;
  long done;
} writer_t;

static void *store_writer(void *arg) {
  writer_t *w = arg;
  resv_answer_t a = {0};
  char key[32], owner[16];
  snprintf(owner, sizeof owner, "w%d", w->id);
  while (bench_wall_ns() < w->until) {
    snprintf(key, sizeof key, "w%d-%ld", w->id, w->done);
    bench_reserve(w->type, key, owner, RESV_RESERVED, &a);
    w->done++;
  }
  resv_answer_clear(&a);
  return NULL;
}

/* One synced LMDB commit per reservation, of a record of its size. */
static void *fsync_writer(void *arg) {
  writer_t *w = arg;
  char key[32], value[160];
  memset(value, 'v', sizeof value);
  while (bench_wall_ns() < w->until) {
    MDB_txn *txn;
    snprintf(key, sizeof key, "w%d-%ld", w->id, w->done);
    MDB_val k = {strlen(key), key}, v = {sizeof value, value};
    if (mdb_txn_begin(w->env, NULL, 0, &txn) || mdb_put(txn, w->dbi, &k, &v, 0) ||
        mdb_txn_commit(txn)) {
      fprintf(stderr, "bench: LMDB write failed\n");
      exit(1);
    }
    w->done++;
  }
  return NULL;
}

static double run_writers(int n, double seconds, bool grouped) {
  fresh_dir();
  resv_store_t *s = NULL;
  MDB_env *env = NULL;
  MDB_dbi dbi = 0;
  resv_type_t *t = NULL;
  if (grouped) {
    s = open_store(dir, RESV_SYNC_DISK, n);
    t = type_of(s, "disk");
  } else {
    MDB_txn *txn;
    env = lmdb_open(0, "the baseline's environment");
    if (mdb_txn_begin(env, NULL, 0, &txn) || mdb_dbi_open(txn, NULL, 0, &dbi) ||
        mdb_txn_commit(txn)) {
      fprintf(stderr, "bench: cannot open LMDB\n");
      exit(1);
    }
  }
  writer_t *w = calloc((size_t)n, sizeof *w);
  pthread_t *threads = calloc((size_t)n, sizeof *threads);
  int64_t start = bench_wall_ns(), until = start + (int64_t)(seconds * 1e9);
  for (int i = 0; i < n; i++) {
    w[i] = (writer_t){.type = t, .env = env, .dbi = dbi, .id = i, .until = until};
    pthread_create(&threads[i], NULL, grouped ? store_writer : fsync_writer, &w[i]);
  }
  long done = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(threads[i], NULL);
    done += w[i].done;
  }
  double elapsed = (double)(bench_wall_ns() - start) / 1e9;
  if (s) resv_store_close(s);
  if (env) mdb_env_close(env);
  free(w);
  free(threads);
  remove_dir();
  return (double)done / elapsed;
}

static void disk_sync(double seconds) {
  static const int counts[] = {1, 8, 32};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    int n = counts[i];
    double base = run_writers(n, seconds, false);
    double group = run_writers(n, seconds, true);
    printf("3. sync=disk, %2d writers: %8.0f reservations/s; one fsync per call "
           "%8.0f/s: %.2fx\n", n, group, base, group / base);
    printf("figure disk_%d_writers_per_s %.0f\nfigure fsync_per_call_%d_writers_per_s %.0f\n",
           n, group, n, base);
  }
}

/* ---- 4. the checks of the store's own files ------------------------------ */

static double get_pass(resv_type_t *t, int n) {
  resv_answer_t a = {0};
  resv_error_t err;
  char key[32];
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++) {
    key_of(key, i);
    resv_request_t r = {.op = RESV_OP_GET,
                        .key = {resv_cstr(""), resv_cstr("email"), resv_cstr(key)},
                        .owner = {resv_cstr(""), resv_cstr("owner-0001")}};
    if (!resv_call(t, &r, &a, &err)) bench_die("get", &err);
    if (a.status != RESV_PENDING) bench_expect("get", &a, RESV_PENDING);
  }
  int64_t t1 = bench_wall_ns();
  resv_answer_clear(&a);
  return (double)(t1 - t0) / n;
}

/* The check alone, n times, on LMDB's own environment of the store's
 * directory (the store closed: one environment per process). */
static double check_pass(int n, bool paths) {
  MDB_env *env = lmdb_open(MDB_RDONLY, "the store");
  resv__file_identity_t id;
  if (resv__file_identity_init(&id, env, dir, true)) {
    fprintf(stderr, "bench: cannot look at the store's files\n");
    exit(1);
  }
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++)
    if (resv__file_identity_check(&id, env, paths)) {
      fprintf(stderr, "bench: the store's files look gone\n");
      exit(1);
    }
  int64_t t1 = bench_wall_ns();
  resv__file_identity_close(&id);
  mdb_env_close(env);
  return (double)(t1 - t0) / n;
}

static void file_checks(int n) {
  double get[ROUNDS], conflict[ROUNDS], fresh[ROUNDS], txn[ROUNDS], write[ROUNDS];
  fresh_dir();
  resv_store_t *fs = open_store(dir, RESV_SYNC_PROCESS, 1);
  for (int round = 0; round < ROUNDS; round++) {
    char name[32];
    snprintf(name, sizeof name, "checks%d", round);
    fresh[round] = pass(type_of(fs, name), n, "owner-0001", RESV_RESERVED);
  }
  resv_type_t *t = type_of(fs, "checks0");
  for (int round = 0; round < ROUNDS; round++) {
    get[round] = get_pass(t, n);
    conflict[round] = pass(t, n, "owner-0002", RESV_CONFLICT);
  }
  resv_store_close(fs);
  for (int round = 0; round < ROUNDS; round++) {
    txn[round] = check_pass(n, false);
    write[round] = check_pass(n, true);
  }
  remove_dir();
  double g = bench_median(get, ROUNDS), c = bench_median(conflict, ROUNDS);
  double w = bench_median(fresh, ROUNDS);
  double ct = bench_median(txn, ROUNDS), cw = bench_median(write, ROUNDS);
  /* A get and a conflict run one read transaction, with its check (the
   * paths looked at only when the watches saw something, or once a
   * second); a new key a read transaction, then a write one that counts
   * as checked by the read (it took the gate without waiting). The look
   * at the paths is what a check costs when it must (the watches gone). */
  printf("4. %-14s %8.0f ns, of which the check of the files %5.0f ns: %.2fx without it\n",
         "get", g, ct, g / (g - ct));
  printf("4. %-14s %8.0f ns, of which the check of the files %5.0f ns: %.2fx without it\n",
         "conflict", c, ct, c / (c - ct));
  printf("4. %-14s %8.0f ns, of which the check of the files %5.0f ns: %.2fx without it\n",
         "reserve_new", w, ct, w / (w - ct));
  printf("4. %-14s %8.0f ns (a check with the paths looked at)\n", "paths", cw);
  printf("figure file_get_ns %.0f\nfigure file_check_txn_ns %.0f\n"
         "figure file_check_paths_ns %.0f\nfigure file_get_check_ratio %.3f\n"
         "figure file_conflict_check_ratio %.3f\nfigure file_new_check_ratio %.3f\n",
         g, ct, cw, g / (g - ct), c / (c - ct), w / (w - ct));
}

int main(int argc, char **argv) {
  int keys = argc > 1 ? atoi(argv[1]) : 100000;
  double seconds = argc > 2 ? atof(argv[2]) : 2;
  printf("filestore: LMDB %s, %d keys, %.1f s per disk run, in %s\n",
         mdb_version(NULL, NULL, NULL), keys, seconds,
         getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  inline_calls(keys);
  bytes_per_reservation(keys);
  disk_sync(seconds);
  file_checks(keys);
  return 0;
}
