/* redis_nx.c: the file store's reserve against the durable single-host
 * store a team would otherwise pick: Redis with appendonly yes and
 * appendfsync everysec, `SET key value NX PX ttl` through hiredis, one
 * request at a time (issue 13's comparison).
 *
 *   redis_nx [keys] [rounds]
 *
 * Starts its own redis-server (Debian's, /usr/bin/redis-server) on a free
 * loopback port with its files in a fresh directory, and stops it when
 * done. Each round: `keys` new keys, then the same keys again by another
 * owner (a conflict on the file store, a nil reply from Redis), on a fresh
 * type and a flushed Redis. Wall ns per call, median of the rounds, as
 * "figure <name> <value>" lines and ratios. */
#include "bench.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ROUNDS 9

static char dir[256];

static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) || getsockname(s, (struct sockaddr *)&a, &len)) {
    perror("bench: free port");
    exit(1);
  }
  close(s);
  return ntohs(a.sin_port);
}

static pid_t start_redis(int port) {
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", port);
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO); /* its start-up banner */
    execl("/usr/bin/redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1",
          "--dir", dir, "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
          "--daemonize", "no", "--loglevel", "warning", (char *)NULL);
    perror("bench: exec redis-server");
    _exit(127);
  }
  return pid;
}

static redisContext *connect_redis(int port) {
  for (int i = 0; i < 200; i++) {
    redisContext *c = redisConnect("127.0.0.1", port);
    if (c && !c->err) return c;
    if (c) redisFree(c);
    usleep(25000);
  }
  fprintf(stderr, "bench: redis-server did not answer on port %d\n", port);
  exit(1);
}

static double redis_pass(redisContext *c, int n, const char *owner, bool want_ok) {
  char key[48];
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++) {
    /* The namespace and the 20-byte key, as the file store gets them. */
    snprintf(key, sizeof key, "email:k%019d", i);
    redisReply *r = redisCommand(c, "SET %s %s NX PX %d", key, owner, 3600000);
    if (!r || r->type == REDIS_REPLY_ERROR) {
      fprintf(stderr, "bench: SET failed: %s\n", r ? r->str : c->errstr);
      exit(1);
    }
    bool ok = r->type == REDIS_REPLY_STATUS;
    if (ok != want_ok) {
      fprintf(stderr, "bench: SET NX answered %s\n", ok ? "OK" : "nil");
      exit(1);
    }
    freeReplyObject(r);
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

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000;
  int rounds = argc > 2 ? atoi(argv[2]) : 3;
  if (rounds < 1 || rounds > MAX_ROUNDS) rounds = 3;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/resv-bench-redis-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char store_dir[300];
  snprintf(store_dir, sizeof store_dir, "%s/store", dir);
  int port = free_port();
  pid_t redis = start_redis(port);
  redisContext *c = connect_redis(port);
  resv_options_t o = {.path = store_dir};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) bench_die("open", &err);

  double f_new[MAX_ROUNDS], f_conf[MAX_ROUNDS], r_new[MAX_ROUNDS], r_conf[MAX_ROUNDS];
  for (int round = 0; round < rounds; round++) {
    char name[16];
    snprintf(name, sizeof name, "r%d", round);
    resv_type_t *t = resv_store_type(s, "bench", 5, name, strlen(name), &err);
    if (!t) bench_die("type", &err);
    freeReplyObject(redisCommand(c, "FLUSHALL"));
    r_new[round] = redis_pass(c, n, "owner-0001", true);
    f_new[round] = file_pass(t, n, "owner-0001", RESV_RESERVED);
    r_conf[round] = redis_pass(c, n, "owner-0002", false);
    f_conf[round] = file_pass(t, n, "owner-0002", RESV_CONFLICT);
  }
  double fn = bench_median(f_new, rounds), rn = bench_median(r_new, rounds);
  double fc = bench_median(f_conf, rounds), rc = bench_median(r_conf, rounds);
  printf("redis_nx: %d keys x %d rounds, Redis appendonly yes, appendfsync everysec, "
         "one request at a time (medians)\n", n, rounds);
  printf("  new keys: Redis SET NX PX %8.0f ns, file store reserve %8.0f ns: file %.2fx faster\n",
         rn, fn, rn / fn);
  printf("  taken:    Redis SET NX PX %8.0f ns, file store conflict %7.0f ns: file %.2fx faster\n",
         rc, fc, rc / fc);
  printf("  goal: the file store's reserve >= 10x faster: %s\n", rn / fn >= 10 ? "met" : "NOT met");
  printf("figure redis_new_ns %.0f\nfigure file_new_ns %.0f\nfigure redis_taken_ns %.0f\n"
         "figure file_conflict_ns %.0f\n", rn, fn, rc, fc);

  resv_store_close(s);
  redisFree(c);
  kill(redis, SIGTERM);
  waitpid(redis, NULL, 0);
  char cmd[320];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench: could not remove %s\n", dir);
  return 0;
}
