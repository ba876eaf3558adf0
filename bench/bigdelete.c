/* bigdelete.c: what single-record reserves on the file store cost after
 * a sweep deleted many expired reservations, against the same store's
 * reserves just before the sweep.
 *
 *   bigdelete [rounds] [reserves per measure] [live keys] [process|disk|both]
 *
 * Each round, for each case (sync = "process" and "disk"; 0, 10,000 and
 * 100,000 expired reservations, side by side or scattered), on a fresh
 * store: `live` reservations (default 20,000) with scattered keys and a
 * long ttl, and the expired ones: side by side (a burst of sign-ups that
 * expired, so the sweep empties whole pages) or scattered among the live
 * ones (so the sweep changes pages all over the type), written with
 * sync = "process" and the store then opened in the case's mode; then
 * `reserves` (default 2,000) reserves of new scattered keys, one call and
 * one commit each (before); the sweep; the same number of reserves again
 * (after), and once more (later). The ratio of the round is after (and
 * later) over before, in wall time and in the calling thread's CPU time
 * (the calls run on it; CPU time moves less with the machine's load);
 * 0 expired is the control: a sweep that deletes nothing, which shows
 * the drift of the measure itself. Rounds default to 5 (at least 5);
 * min/median/max of the ratios. The last argument picks the modes
 * (default both). Each round also prints the shape of LMDB's free list
 * after the reserves after the sweep and, for sync = "disk", the pages
 * each reserve wrote (/proc/self/io: these do not move with the load).
 *
 * Every figure is printed as "figure <name> <value>". The directories are
 * made under $TMPDIR (default /tmp) and removed. */
#include "bench.h"

#include <lmdb.h>
#include <sys/wait.h>

#define MAX_ROUNDS 64
#define GRACE_MS 1
#define CASES 10

static char dir[256];
static int live = 20000;

static void reserve(resv_type_t *t, const char *key, int64_t ttl) {
  resv_answer_t a = {0};
  resv_error_t err;
  resv_request_t r = bench_reserve_request(key, "owner-0001");
  r.ttl_ms = ttl;
  if (!resv_call(t, &r, &a, &err)) bench_die("reserve", &err);
  bench_expect("reserve", &a, RESV_RESERVED);
  resv_answer_clear(&a);
}

typedef struct {
  double wall, cpu; /* ns per reserve */
  double pages;     /* written with write calls, a reserve (sync = "disk") */
} cost_t;

/* The bytes this process passed to write calls so far (/proc/self/io). */
static long long written_bytes(void) {
  FILE *f = fopen("/proc/self/io", "r");
  char line[128];
  long long w = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "wchar: %lld", &w) == 1) break;
  if (f) fclose(f);
  return w;
}

/* The shape of the store's free list (LMDB's database 0), read by a
 * child process: this one has the environment open already. */
static void free_list(char *out, size_t size) {
  int fds[2];
  snprintf(out, size, "unknown");
  fflush(stdout);
  if (pipe(fds)) return;
  pid_t pid = fork();
  if (pid == 0) {
    MDB_env *env;
    MDB_txn *txn;
    MDB_stat st;
    char text[160] = "unreadable";
    /* The reader slot is given back before the child ends: a slot left
     * by a dead process pins its snapshot, and LMDB then reuses no page
     * freed since until a writer clears the slot (once a second). */
    if (!mdb_env_create(&env)) {
      if (!mdb_env_open(env, dir, MDB_RDONLY | MDB_NOTLS, 0600) &&
          !mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) {
        if (!mdb_stat(txn, 0, &st))
          snprintf(text, sizeof text, "%zu records, depth %u, %zu leaves", st.ms_entries,
                   st.ms_depth, st.ms_leaf_pages);
        mdb_txn_abort(txn);
      }
      mdb_env_close(env);
    }
    if (write(fds[1], text, strlen(text) + 1) < 0) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  ssize_t got = pid > 0 ? read(fds[0], out, size - 1) : -1;
  if (got > 0) out[got] = 0;
  close(fds[0]);
  if (pid > 0) waitpid(pid, NULL, 0);
}

/* The cost of a reserve of n new scattered keys from key `from`. */
static cost_t reserves(resv_type_t *t, int n, int from) {
  char key[32];
  long long w0 = written_bytes();
  int64_t t0 = bench_wall_ns(), c0 = bench_thread_cpu_ns();
  for (int i = 0; i < n; i++) {
    bench_key(key, from + i, true, 'e');
    reserve(t, key, 3600000);
  }
  return (cost_t){(double)(bench_wall_ns() - t0) / n, (double)(bench_thread_cpu_ns() - c0) / n,
                  (double)(written_bytes() - w0) / n / 4096};
}

typedef struct {
  cost_t before, after, later; /* after and later: ratios over before */
  long long deleted;
  char free_list[160]; /* after the reserves after the sweep */
} outcome_t;

static cost_t over(cost_t x, cost_t base) {
  return (cost_t){x.wall / base.wall, x.cpu / base.cpu, x.pages};
}

/* One round of one case: the ratios after and later over before. */
static outcome_t one_case(int32_t sync, int doomed, bool scattered, int n) {
  bench_fresh_dir(dir, sizeof dir);
  resv_store_t *s = bench_open_file(dir, RESV_SYNC_PROCESS, GRACE_MS);
  resv_type_t *t = bench_type(s, "bigdelete");
  int64_t now = resv_store_now(s);
  resv_store_set_time(s, now);
  char key[32];
  for (int i = 0; i < live; i++) {
    bench_key(key, i, true, 'e');
    reserve(t, key, 3600000);
  }
  for (int i = 0; i < doomed; i++) {
    bench_key(key, scattered ? 100000000 + i : i, scattered, 'e');
    reserve(t, key, 1000);
  }
  if (sync != RESV_SYNC_PROCESS) {
    resv_store_close(s);
    s = bench_open_file(dir, sync, GRACE_MS);
    t = bench_type(s, "bigdelete");
    resv_store_set_time(s, now);
  }
  int next = 1000000;
  outcome_t o = {.before = reserves(t, n, next)};
  next += n;
  resv_store_set_time(s, now + 5000);
  resv_answer_t a = {0};
  resv_error_t err;
  resv_request_t r = {.op = RESV_OP_SWEEP};
  if (!resv_call(t, &r, &a, &err)) bench_die("sweep", &err);
  bench_expect("sweep", &a, RESV_SWEPT);
  o.deleted = (long long)a.count;
  if (o.deleted != doomed) {
    fprintf(stderr, "bench: the sweep deleted %lld, expected %d\n", o.deleted, doomed);
    exit(1);
  }
  o.after = over(reserves(t, n, next), o.before);
  free_list(o.free_list, sizeof o.free_list);
  next += n;
  o.later = over(reserves(t, n, next), o.before);
  resv_answer_clear(&a);
  resv_store_close(s);
  bench_remove_dir(dir);
  return o;
}

static void print_spread(const char *name, const char *what, double *v, int n) {
  double med = bench_median(v, (size_t)n); /* sorts v */
  printf("%s: %.2fx %s (min %.2fx, max %.2fx, %d rounds)\n", name, med, what, v[0], v[n - 1],
         n);
  printf("figure %s_median %.3f\nfigure %s_min %.3f\nfigure %s_max %.3f\n", name, med, name,
         v[0], name, v[n - 1]);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  int n = argc > 2 ? atoi(argv[2]) : 2000;
  if (argc > 3) live = atoi(argv[3]);
  const char *modes = argc > 4 ? argv[4] : "both";
  if (rounds < 5) rounds = 5;
  if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
  if (n < 1) n = 1;
  static const struct {
    int32_t sync;
    const char *mode;
    int doomed;
    bool scattered;
  } cases[CASES] = {
      {RESV_SYNC_PROCESS, "process", 0, false},     {RESV_SYNC_PROCESS, "process", 10000, false},
      {RESV_SYNC_PROCESS, "process", 100000, false}, {RESV_SYNC_PROCESS, "process", 10000, true},
      {RESV_SYNC_PROCESS, "process", 100000, true},  {RESV_SYNC_DISK, "disk", 0, false},
      {RESV_SYNC_DISK, "disk", 10000, false},        {RESV_SYNC_DISK, "disk", 100000, false},
      {RESV_SYNC_DISK, "disk", 10000, true},         {RESV_SYNC_DISK, "disk", 100000, true},
  };
  bool run[CASES];
  for (int c = 0; c < CASES; c++)
    run[c] = !strcmp(modes, "both") || !strcmp(modes, cases[c].mode);
  char load[64];
  bench_load(load, sizeof load);
  printf("bigdelete: %d rounds, %d reserves per measure, %d live keys, load %s, in %s\n",
         rounds, n, live, load, getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  static double v[CASES][4][MAX_ROUNDS]; /* after and later, wall and CPU */
  for (int r = 0; r < rounds; r++)
    for (int c = 0; c < CASES; c++) {
      if (!run[c]) continue;
      outcome_t o = one_case(cases[c].sync, cases[c].doomed, cases[c].scattered, n);
      v[c][0][r] = o.after.wall;
      v[c][1][r] = o.later.wall;
      v[c][2][r] = o.after.cpu;
      v[c][3][r] = o.later.cpu;
      printf("round %d, sync = \"%s\", %d expired%s: before %.0f ns a reserve (CPU %.0f); "
             "after the sweep %.2fx (CPU %.2fx), later %.2fx (CPU %.2fx)", r + 1,
             cases[c].mode, cases[c].doomed, cases[c].scattered ? " (scattered)" : "",
             o.before.wall, o.before.cpu, o.after.wall, o.after.cpu, o.later.wall, o.later.cpu);
      if (cases[c].sync == RESV_SYNC_DISK)
        printf("; pages written a reserve %.2f before, %.2f after", o.before.pages,
               o.after.pages);
      printf("; the free list after: %s\n", o.free_list);
    }
  bench_load(load, sizeof load);
  printf("load at the end %s\n", load);
  static const char *const what[4] = {"after", "later", "after_cpu", "later_cpu"};
  for (int c = 0; c < CASES; c++)
    for (int w = 0; run[c] && w < 4; w++) {
      char name[80], text[160];
      const char *how = cases[c].scattered ? "scattered" : "side_by_side";
      snprintf(name, sizeof name, "%s_%s_sweep_of_%d_%s", cases[c].mode, what[w],
               cases[c].doomed, how);
      snprintf(text, sizeof text, "the reserves before, %s the %d reserves %s a sweep of %d %s",
               w < 2 ? "wall time," : "CPU time,", n, w % 2 ? "after those after" : "after",
               cases[c].doomed, how);
      print_spread(name, text, v[c][w], rounds);
    }
  return 0;
}
