/* rivals.c: the file store with sync = "disk" (every answered write on
 * the disk) against the durable stores a team would otherwise pick, each
 * doing the same work: new keys reserved by concurrent writers, every
 * answer given only once it is on the disk. (durability.c has the store
 * against one fdatasync, and its 32 writers against one.)
 *
 *   rivals [seconds] [rounds] [threads]
 *
 * Each round, `seconds` each (default 1 s, 5 rounds, 32 threads):
 *   store xN:   N threads reserving new keys (their commits shared);
 *   sqlite xN:  N threads inserting into one SQLite database in WAL mode
 *               with synchronous=FULL, each insert `INSERT ... ON
 *               CONFLICT DO NOTHING` in its own transaction, run twice:
 *               each thread with its own connection (waiting on the
 *               database's lock with a busy timeout), and all threads
 *               sharing one serialized connection; the faster is the
 *               baseline;
 *   redis xN:   N threads, each with its own connection to one Redis with
 *               appendonly yes and appendfsync always, `SET NX PX`.
 * Prints calls per second, the ratios of each round, and their min,
 * median and max. */
#include "bench.h"
#include "redis.h"

#include <pthread.h>
#include <sqlite3.h>

#define MAX_ROUNDS 15
#define MAX_THREADS 256

typedef enum kind { STORE, SQLITE, REDIS } kind_t;

/* A prepared insert and its connection, one per thread or one shared. */
typedef struct lite {
  sqlite3 *db;
  sqlite3_stmt *st;
} lite_t;

typedef struct shared {
  kind_t kind;
  const char *dir;
  resv_type_t *type;
  lite_t *lite;     /* SQLite: the shared connection, or NULL: one each */
  int redis_port;
  int runs;         /* runs so far, so that each run's keys are new */
  int64_t until;
} shared_t;

typedef struct worker {
  const shared_t *sh;
  int id;
  long done;
} worker_t;

static void die(const char *what) {
  perror(what);
  exit(1);
}

static void store_loop(worker_t *w) {
  resv_answer_t a = {0};
  resv_error_t err;
  char key[32], owner[16];
  snprintf(owner, sizeof owner, "w%d", w->id);
  while (bench_wall_ns() < w->sh->until) {
    snprintf(key, sizeof key, "w%03d-%015ld", w->id, w->done);
    resv_request_t r = {.op = RESV_OP_RESERVE,
                        .key = {resv_cstr(""), resv_cstr("email"), resv_cstr(key)},
                        .owner = {resv_cstr(""), resv_cstr(owner)},
                        .attempt = resv_cstr("req-1"), .ttl_ms = 3600000};
    if (!resv_call(w->sh->type, &r, &a, &err)) bench_die("reserve", &err);
    bench_expect("reserve", &a, RESV_RESERVED);
    w->done++;
  }
  resv_answer_clear(&a);
}

static lite_t lite_open(const char *dir, int flags) {
  char path[300];
  snprintf(path, sizeof path, "%s/sqlite.db", dir);
  lite_t l;
  if (sqlite3_open_v2(path, &l.db, SQLITE_OPEN_READWRITE | flags, NULL) != SQLITE_OK)
    die("bench: sqlite3_open");
  sqlite3_busy_timeout(l.db, 60000);
  if (sqlite3_exec(l.db, "PRAGMA synchronous=FULL", NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(l.db, "INSERT INTO r (k, owner, expires_at) VALUES (?1, ?2, ?3) "
                               "ON CONFLICT DO NOTHING", -1, &l.st, NULL) != SQLITE_OK) {
    fprintf(stderr, "bench: sqlite: %s\n", sqlite3_errmsg(l.db));
    exit(1);
  }
  return l;
}

static void lite_close(lite_t *l) {
  sqlite3_finalize(l->st);
  sqlite3_close(l->db);
}

/* One insert; a shared connection's statement is used under its mutex. */
static void lite_insert(lite_t *l, const char *key, const char *owner) {
  sqlite3_mutex *m = sqlite3_db_mutex(l->db);
  sqlite3_mutex_enter(m);
  sqlite3_bind_text(l->st, 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_text(l->st, 2, owner, -1, SQLITE_STATIC);
  sqlite3_bind_int64(l->st, 3, 3600000);
  if (sqlite3_step(l->st) != SQLITE_DONE || sqlite3_changes(l->db) != 1) {
    fprintf(stderr, "bench: sqlite insert: %s\n", sqlite3_errmsg(l->db));
    exit(1);
  }
  sqlite3_reset(l->st);
  sqlite3_mutex_leave(m);
}

static void sqlite_loop(worker_t *w) {
  char key[48], owner[16];
  snprintf(owner, sizeof owner, "w%d", w->id);
  lite_t own;
  if (!w->sh->lite) own = lite_open(w->sh->dir, SQLITE_OPEN_NOMUTEX);
  lite_t *l = w->sh->lite ? w->sh->lite : &own;
  while (bench_wall_ns() < w->sh->until) {
    snprintf(key, sizeof key, "email:%d-w%03d-%015ld", w->sh->runs, w->id, w->done);
    lite_insert(l, key, owner);
    w->done++;
  }
  if (!w->sh->lite) lite_close(&own);
}

static void redis_loop(worker_t *w) {
  char key[48], owner[16];
  snprintf(owner, sizeof owner, "w%d", w->id);
  redisContext *c = bench_connect_redis(w->sh->redis_port);
  while (bench_wall_ns() < w->sh->until) {
    snprintf(key, sizeof key, "email:w%03d-%015ld", w->id, w->done);
    if (!bench_redis_set_nx(c, key, owner)) {
      fprintf(stderr, "bench: SET NX of a new key answered nil\n");
      exit(1);
    }
    w->done++;
  }
  redisFree(c);
}

static void *work(void *arg) {
  worker_t *w = arg;
  switch (w->sh->kind) {
  case STORE: store_loop(w); break;
  case SQLITE: sqlite_loop(w); break;
  case REDIS: redis_loop(w); break;
  }
  return NULL;
}

/* n threads of one kind for `seconds`: calls per second. */
static double run(shared_t *sh, int n, double seconds) {
  worker_t w[MAX_THREADS];
  pthread_t t[MAX_THREADS];
  int64_t start = bench_wall_ns();
  sh->runs++;
  sh->until = start + (int64_t)(seconds * 1e9);
  for (int i = 0; i < n; i++) {
    w[i] = (worker_t){.sh = sh, .id = i};
    if (pthread_create(&t[i], NULL, work, &w[i])) die("bench: pthread_create");
  }
  long done = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    done += w[i].done;
  }
  return (double)done / ((double)(bench_wall_ns() - start) / 1e9);
}

static void sqlite_schema(const char *dir) {
  char path[300];
  snprintf(path, sizeof path, "%s/sqlite.db", dir);
  sqlite3 *db;
  if (sqlite3_open(path, &db) != SQLITE_OK ||
      sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE IF NOT EXISTS r (k TEXT PRIMARY "
                       "KEY, owner TEXT NOT NULL, expires_at INTEGER NOT NULL)",
                   NULL, NULL, NULL) != SQLITE_OK) {
    fprintf(stderr, "bench: sqlite schema: %s\n", sqlite3_errmsg(db));
    exit(1);
  }
  sqlite3_close(db);
}

typedef struct figures {
  double store_n, sqlite_n, sqlite_own, sqlite_shared, redis_n;
} figures_t;

/* One round in a fresh directory, every kind in turn. */
static figures_t round_of(int n, double seconds) {
  char dir[256], store_dir[300];
  bench_fresh_dir(dir, sizeof dir);
  snprintf(store_dir, sizeof store_dir, "%s/store", dir);
  resv_options_t o = {.path = store_dir, .sync = RESV_SYNC_DISK, .threads = n};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) bench_die("open", &err);
  resv_type_t *t = resv_store_type(s, "bench", 5, "many", 4, &err);
  if (!t) bench_die("type", &err);
  sqlite_schema(dir);
  int port = bench_free_port();
  pid_t redis = bench_start_redis(dir, port, "always");
  redisFree(bench_connect_redis(port));

  figures_t f;
  shared_t sh = {.kind = STORE, .type = t};
  f.store_n = run(&sh, n, seconds);
  sh = (shared_t){.kind = SQLITE, .dir = dir};
  double own = run(&sh, n, seconds);
  lite_t one = lite_open(dir, SQLITE_OPEN_FULLMUTEX);
  sh.lite = &one;
  double shared = run(&sh, n, seconds);
  lite_close(&one);
  f.sqlite_n = own > shared ? own : shared;
  f.sqlite_own = own;
  f.sqlite_shared = shared;
  sh = (shared_t){.kind = REDIS, .redis_port = port};
  f.redis_n = run(&sh, n, seconds);

  resv_store_close(s);
  bench_stop_redis(redis);
  char cmd[320];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench: could not remove %s\n", dir);
  return f;
}

static void print_ratio(const char *what, double *v, int rounds, double goal) {
  double med = bench_median(v, (size_t)rounds);
  printf("  %-44s %6.2fx (min %.2f, max %.2f); goal >= %.1fx: %s\n", what, med, v[0],
         v[rounds - 1], goal, med >= goal ? "met" : "NOT met");
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 1.0;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  int n = argc > 3 ? atoi(argv[3]) : 32;
  if (seconds <= 0) seconds = 1.0;
  if (rounds < 1 || rounds > MAX_ROUNDS) rounds = 5;
  if (n < 2 || n > MAX_THREADS) n = 32;
  char load[64];
  bench_load(load, sizeof load);
  printf("rivals: sync = \"disk\", %d threads, %.1f s a run, %d rounds; load average %s\n", n,
         seconds, rounds, load);
  double vs_sqlite[MAX_ROUNDS], vs_redis[MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    figures_t f = round_of(n, seconds);
    printf("  round %d: store x%d %.0f/s; sqlite x%d %.0f/s (own connections %.0f/s, one "
           "shared %.0f/s); redis x%d %.0f/s\n", r + 1, n, f.store_n, n, f.sqlite_n,
           f.sqlite_own, f.sqlite_shared, n, f.redis_n);
    vs_sqlite[r] = f.store_n / f.sqlite_n;
    vs_redis[r] = f.store_n / f.redis_n;
  }
  print_ratio("store xN over SQLite WAL synchronous=FULL xN", vs_sqlite, rounds, 3);
  print_ratio("store xN over Redis appendfsync always xN", vs_redis, rounds, 10);
  printf("figure disk_n_over_sqlite %.2f\nfigure disk_n_over_redis_always %.2f\n",
         bench_median(vs_sqlite, (size_t)rounds), bench_median(vs_redis, (size_t)rounds));
  return 0;
}
