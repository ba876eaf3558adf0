/* redis_nx.c: the file store's reserve against the durable single-host
 * store a team would otherwise pick: Redis with appendonly yes, `SET key
 * value NX PX ttl` through hiredis, one request at a time, each mode of
 * the file store against the Redis policy that promises as much:
 *   sync = "process" (survives a crash of any process) against
 *   appendfsync everysec (loses up to a second on an OS crash, and a
 *   process crash loses nothing), and
 *   sync = "disk" (an answered write is on the disk) against
 *   appendfsync always.
 *
 *   redis_nx [keys] [rounds]
 *
 * Each round: `keys` new keys, then the same keys again by another owner
 * (a conflict on the file store, a nil reply from Redis), on a fresh type
 * and a flushed Redis. Wall ns per call: min, median and max of the
 * rounds, as "figure <name> <value>" lines (medians) and ratios. With
 * "disk" and "always" every call waits for a sync, so those passes use a
 * tenth of the keys. */
#include "bench.h"
#include "redis.h"

#define MAX_ROUNDS 15

typedef struct pair {
  const char *sync_name; /* the file store's */
  int32_t sync;
  const char *fsync;     /* Redis's appendfsync */
  int keys;
} pair_t;

static double redis_pass(redisContext *c, int n, const char *owner, bool want_ok) {
  char key[48];
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++) {
    /* The namespace and the 20-byte key, as the file store gets them. */
    snprintf(key, sizeof key, "email:k%019d", i);
    if (bench_redis_set_nx(c, key, owner) != want_ok) {
      fprintf(stderr, "bench: SET NX answered %s\n", want_ok ? "nil" : "OK");
      exit(1);
    }
  }
  return (double)(bench_wall_ns() - t0) / n;
}

static double file_pass(resv_type_t *t, int n, const char *owner, int32_t expect) {
  resv_answer_t a = {0};
  resv_error_t err;
  char key[32];
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++) {
    snprintf(key, sizeof key, "k%019d", i);
    resv_request_t r = {.op = RESV_OP_RESERVE,
                        .key = {resv_cstr(""), resv_cstr("email"), resv_cstr(key)},
                        .owner = {resv_cstr(""), resv_cstr(owner)},
                        .attempt = resv_cstr("req-1"), .ttl_ms = 3600000};
    if (!resv_call(t, &r, &a, &err)) bench_die("reserve", &err);
    bench_expect("reserve", &a, expect);
  }
  resv_answer_clear(&a);
  return (double)(bench_wall_ns() - t0) / n;
}

static void print_range(const char *what, double *v, int n) {
  double med = bench_median(v, (size_t)n); /* sorts v */
  printf("  %-34s %9.0f ns (min %.0f, max %.0f)\n", what, med, v[0], v[n - 1]);
}

/* One pairing, `rounds` rounds; prints and returns nothing. */
static void run_pair(const pair_t *p, int rounds) {
  char dir[256], store_dir[300];
  bench_fresh_dir(dir, sizeof dir);
  snprintf(store_dir, sizeof store_dir, "%s/store", dir);
  int port = bench_free_port();
  pid_t redis = bench_start_redis(dir, port, p->fsync);
  redisContext *c = bench_connect_redis(port);
  resv_options_t o = {.path = store_dir, .sync = p->sync};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) bench_die("open", &err);

  double f_new[MAX_ROUNDS], f_conf[MAX_ROUNDS], r_new[MAX_ROUNDS], r_conf[MAX_ROUNDS];
  double x_new[MAX_ROUNDS], x_conf[MAX_ROUNDS];
  for (int round = 0; round < rounds; round++) {
    char name[16];
    snprintf(name, sizeof name, "r%d", round);
    resv_type_t *t = resv_store_type(s, "bench", 5, name, strlen(name), &err);
    if (!t) bench_die("type", &err);
    freeReplyObject(redisCommand(c, "FLUSHALL"));
    r_new[round] = redis_pass(c, p->keys, "owner-0001", true);
    f_new[round] = file_pass(t, p->keys, "owner-0001", RESV_RESERVED);
    r_conf[round] = redis_pass(c, p->keys, "owner-0002", false);
    f_conf[round] = file_pass(t, p->keys, "owner-0002", RESV_CONFLICT);
    x_new[round] = r_new[round] / f_new[round];
    x_conf[round] = r_conf[round] / f_conf[round];
  }
  printf("sync = \"%s\" against appendfsync %s, %d keys x %d rounds:\n", p->sync_name,
         p->fsync, p->keys, rounds);
  print_range("Redis SET NX PX, new keys", r_new, rounds);
  print_range("file store reserve, new keys", f_new, rounds);
  print_range("Redis SET NX PX, taken keys", r_conf, rounds);
  print_range("file store reserve, conflicts", f_conf, rounds);
  double xn = bench_median(x_new, (size_t)rounds), xc = bench_median(x_conf, (size_t)rounds);
  printf("  file store faster, new keys: %.2fx (min %.2f, max %.2f); conflicts: %.2fx "
         "(min %.2f, max %.2f); goal >= 10x on new keys: %s\n", xn, x_new[0], x_new[rounds - 1],
         xc, x_conf[0], x_conf[rounds - 1], xn >= 10 ? "met" : "NOT met");
  printf("figure redis_%s_new_x %.2f\nfigure redis_%s_conflict_x %.2f\n", p->fsync, xn,
         p->fsync, xc);

  resv_store_close(s);
  redisFree(c);
  bench_stop_redis(redis);
  bench_remove_dir(store_dir);
  char cmd[320];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench: could not remove %s\n", dir);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  if (n < 10) n = 10;
  if (rounds < 1 || rounds > MAX_ROUNDS) rounds = 5;
  const pair_t pairs[] = {
      {"process", RESV_SYNC_PROCESS, "everysec", n},
      {"disk", RESV_SYNC_DISK, "always", n / 10},
  };
  char load[64];
  bench_load(load, sizeof load);
  printf("redis_nx: one request at a time; load average %s\n", load);
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) run_pair(&pairs[i], rounds);
  return 0;
}
