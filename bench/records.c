/* records.c: what the file store's records cost, each figure against a
 * baseline measured in the same run.
 *
 *   records [keys]
 *
 * 1. bytes of map per live reservation (20-byte key, 10-byte owner id, one
 *    hold), keys written in order and scattered: the pages of the type's
 *    LMDB database over its records (mdb_stat), against the 128 bytes
 *    ngx.shared.DICT takes for the same entry.
 * 2. get of a present and of an absent key, one thread, wall ns per call,
 *    median of 3 rounds: the file store against LMDB alone (a renewed
 *    read-only transaction and one mdb_get of a record of the same size),
 *    and LMDB alone reading what an absent key's check reads (a cursor's
 *    MDB_SET_RANGE and MDB_PREV) against its get.
 * 3. single-record commits (a reserve and a release of a new key, sync =
 *    process) before and after a sweep that deleted 10,000 expired
 *    reservations out of 30,000: ns per commit, and after over before, in
 *    rounds of 2,000 commits.
 *
 * Every figure is printed as "figure <name> <value>". The directories are
 * made under $TMPDIR (default /tmp) and removed. */
#include "bench.h"

#include <lmdb.h>
#include <unistd.h>

#define ROUNDS 3
#define DICT_BYTES 128.0

static char dir[256];

static void fresh_dir(void) { bench_fresh_dir(dir, sizeof dir); }
static void remove_dir(void) { bench_remove_dir(dir); }

static void call(resv_type_t *t, int32_t op, const char *key, int64_t ttl,
                 int32_t expect) {
  resv_answer_t a = {0};
  resv_error_t err;
  resv_request_t r = {.op = op,
                      .key = {resv_cstr(""), resv_cstr("email"), resv_cstr(key)},
                      .owner = {resv_cstr(""), resv_cstr("owner-0001")},
                      .attempt = resv_cstr("req-1"), .ttl_ms = ttl};
  if (!resv_call(t, &r, &a, &err)) bench_die("call", &err);
  bench_expect("call", &a, expect);
  resv_answer_clear(&a);
}

/* ---- 1. bytes per live reservation -------------------------------------- */

static double bytes_per_reservation(int n, bool scattered) {
  fresh_dir();
  resv_store_t *s = bench_open_file(dir, RESV_SYNC_PROCESS, 0);
  resv_type_t *t = bench_type(s, "bytes");
  char key[32];
  for (int i = 0; i < n; i++) {
    bench_key(key, i, scattered, 'k');
    call(t, RESV_OP_RESERVE, key, 3600000, RESV_RESERVED);
  }
  resv_store_close(s);
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  MDB_stat st;
  if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 4) ||
      mdb_env_set_mapsize(env, (size_t)4 << 30) || mdb_env_open(env, dir, MDB_RDONLY, 0600) ||
      mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) ||
      mdb_dbi_open(txn, "wow_reservation__bench__bytes", 0, &dbi) || mdb_stat(txn, dbi, &st)) {
    fprintf(stderr, "bench: cannot read the store with LMDB\n");
    exit(1);
  }
  size_t pages = st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
  double per = (double)pages * st.ms_psize / (double)(st.ms_entries - 1);
  const char *how = scattered ? "scattered" : "sequential";
  printf("1. bytes per live reservation, %d %s keys: %.1f (%zu pages, depth %u): "
         "%.2fx the DICT's %.0f\n", n, how, per, pages, st.ms_depth, per / DICT_BYTES,
         DICT_BYTES);
  printf("figure file_bytes_per_reservation_%s %.1f\n", how, per);
  mdb_txn_abort(txn);
  mdb_env_close(env);
  remove_dir();
  return per;
}

/* ---- 2. gets -------------------------------------------------------------- */

static double gets(resv_type_t *t, int n, int from, int32_t expect) {
  char key[32];
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++) {
    bench_key(key, from + i, true, 'k');
    call(t, RESV_OP_GET, key, 0, expect);
  }
  return (double)(bench_wall_ns() - t0) / n;
}

/* LMDB alone: a renewed read-only transaction and one mdb_get per call,
 * over n scattered keys with 60-byte values; with neighbours, an absent
 * key's reads instead: a cursor's MDB_SET_RANGE and MDB_PREV. */
static double lmdb_gets(int n, bool neighbours) {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  char key[32], value[60];
  memset(value, 'v', sizeof value);
  fresh_dir();
  if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 4) ||
      mdb_env_set_mapsize(env, (size_t)1 << 30) ||
      mdb_env_open(env, dir, MDB_NOTLS | MDB_NOSYNC, 0600) ||
      mdb_txn_begin(env, NULL, 0, &txn) || mdb_dbi_open(txn, "g", MDB_CREATE, &dbi)) {
    fprintf(stderr, "bench: LMDB: cannot open\n");
    exit(1);
  }
  for (int i = 0; i < n; i++) {
    bench_key(key, i, true, 'k');
    MDB_val k = {20, key}, v = {sizeof value, value};
    if (mdb_put(txn, dbi, &k, &v, 0)) exit(1);
  }
  if (mdb_txn_commit(txn) || mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) exit(1);
  mdb_txn_reset(txn);
  double ns[ROUNDS];
  for (int round = 0; round < ROUNDS; round++) {
    int64_t t0 = bench_wall_ns();
    for (int i = 0; i < n; i++) {
      bench_key(key, i, true, 'k');
      MDB_val k = {20, key}, v;
      MDB_cursor *c;
      if (mdb_txn_renew(txn)) exit(1);
      if (!neighbours) {
        if (mdb_get(txn, dbi, &k, &v)) exit(1);
      } else {
        key[19] = 'x'; /* absent, between two keys */
        if (mdb_cursor_open(txn, dbi, &c)) exit(1);
        int rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
        rc = rc == 0 ? mdb_cursor_get(c, &k, &v, MDB_PREV) : mdb_cursor_get(c, &k, &v, MDB_LAST);
        mdb_cursor_close(c);
        if (rc) exit(1);
      }
      mdb_txn_reset(txn);
    }
    ns[round] = (double)(bench_wall_ns() - t0) / n;
  }
  mdb_txn_abort(txn);
  mdb_env_close(env);
  remove_dir();
  return bench_median(ns, ROUNDS);
}

static void get_costs(int n) {
  fresh_dir();
  resv_store_t *s = bench_open_file(dir, RESV_SYNC_PROCESS, 0);
  resv_type_t *t = bench_type(s, "gets");
  char key[32];
  for (int i = 0; i < n; i++) {
    bench_key(key, i, true, 'k');
    call(t, RESV_OP_RESERVE, key, 3600000, RESV_RESERVED);
  }
  double present[ROUNDS], absent[ROUNDS];
  for (int round = 0; round < ROUNDS; round++) {
    present[round] = gets(t, n, 0, RESV_PENDING);
    absent[round] = gets(t, n, n, RESV_ABSENT);
  }
  resv_store_close(s);
  remove_dir();
  double base = lmdb_gets(n, false), around = lmdb_gets(n, true);
  double p = bench_median(present, ROUNDS), a = bench_median(absent, ROUNDS);
  printf("2. get, %d scattered keys: present %.0f ns, absent %.0f ns; LMDB alone %.0f ns: "
         "%.2fx and %.2fx\n", n, p, a, base, p / base, a / base);
  printf("2. LMDB alone, an absent key's reads around it (MDB_SET_RANGE, MDB_PREV): %.0f ns: "
         "%.2fx a get\n", around, around / base);
  printf("figure file_get_present_ns %.0f\nfigure file_get_absent_ns %.0f\n"
         "figure lmdb_get_ns %.0f\nfigure lmdb_neighbours_ns %.0f\n", p, a, base, around);
}

/* ---- 3. commits after a big delete ---------------------------------------- */

/* ns per commit of n reserves and releases of new keys from key `from`. */
static double commits(resv_type_t *t, int n, int from) {
  char key[32];
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n / 2; i++) {
    bench_key(key, from + i, true, 'k');
    call(t, RESV_OP_RESERVE, key, 3600000, RESV_RESERVED);
    call(t, RESV_OP_RELEASE, key, 0, RESV_RELEASED);
  }
  return (double)(bench_wall_ns() - t0) / (n / 2 * 2);
}

static void big_delete(void) {
  enum { LIVE = 20000, DOOMED = 10000, COMMITS = 2000, AFTER = 5 };
  fresh_dir();
  resv_store_t *s = bench_open_file(dir, RESV_SYNC_PROCESS, 1);
  resv_type_t *t = bench_type(s, "sweep");
  int64_t now = resv_store_now(s);
  resv_store_set_time(s, now);
  char key[32];
  /* The doomed keys side by side (a burst of sign-ups that expired), so
   * the sweep empties whole pages; the live ones scattered. */
  for (int i = 0; i < LIVE; i++) {
    bench_key(key, i, true, 'k');
    call(t, RESV_OP_RESERVE, key, 3600000, RESV_RESERVED);
  }
  for (int i = 0; i < DOOMED; i++) {
    bench_key(key, i, false, 'k');
    call(t, RESV_OP_RESERVE, key, 1000, RESV_RESERVED);
  }
  int next = 1000000;
  double before[ROUNDS];
  for (int round = 0; round < ROUNDS; round++, next += COMMITS)
    before[round] = commits(t, COMMITS, next);
  double b = bench_median(before, ROUNDS);
  resv_store_set_time(s, now + 5000);
  resv_answer_t a = {0};
  resv_error_t err;
  resv_request_t r = {.op = RESV_OP_SWEEP};
  if (!resv_call(t, &r, &a, &err)) bench_die("sweep", &err);
  printf("3. commits before the sweep: %.0f ns; the sweep deleted %lld\n", b,
         (long long)a.count);
  for (int round = 0; round < AFTER; round++, next += COMMITS) {
    double ns = commits(t, COMMITS, next);
    printf("3. commits after it, round %d: %.0f ns: %.2fx before\n", round + 1, ns, ns / b);
    printf("figure commit_after_big_delete_round%d_ratio %.2f\n", round + 1, ns / b);
  }
  resv_answer_clear(&a);
  resv_store_close(s);
  remove_dir();
}

int main(int argc, char **argv) {
  int keys = argc > 1 ? atoi(argv[1]) : 100000;
  printf("records: LMDB %s, %d keys, in %s\n", mdb_version(NULL, NULL, NULL), keys,
         getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  double seq = bytes_per_reservation(keys, false);
  double sc = bytes_per_reservation(keys, true);
  printf("figure file_bytes_over_dict %.2f %.2f\n", seq / DICT_BYTES, sc / DICT_BYTES);
  get_costs(keys / 4);
  big_delete();
  return 0;
}
