/* redis.h: a private redis-server for the benchmarks that compare the file
 * store with Redis: Debian's /usr/bin/redis-server on a free loopback port,
 * with its files in a directory of the caller's, appendonly yes and the
 * appendfsync policy asked for. */
#ifndef RESV_BENCH_REDIS_H
#define RESV_BENCH_REDIS_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static inline int bench_free_port(void) {
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

/* Starts redis-server with its files in dir and appendfsync `fsync`
 * ("everysec" or "always"); returns its pid. */
static inline pid_t bench_start_redis(const char *dir, int port, const char *fsync) {
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", port);
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO); /* its start-up banner */
    execl("/usr/bin/redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1",
          "--dir", dir, "--appendonly", "yes", "--appendfsync", fsync, "--save", "",
          "--daemonize", "no", "--loglevel", "warning", (char *)NULL);
    perror("bench: exec redis-server");
    _exit(127);
  }
  return pid;
}

/* A connection to the server on port, waiting up to 5 s for it to start. */
static inline redisContext *bench_connect_redis(int port) {
  for (int i = 0; i < 200; i++) {
    redisContext *c = redisConnect("127.0.0.1", port);
    if (c && !c->err) return c;
    if (c) redisFree(c);
    usleep(25000);
  }
  fprintf(stderr, "bench: redis-server did not answer on port %d\n", port);
  exit(1);
}

static inline void bench_stop_redis(pid_t pid) {
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
}

/* SET key owner NX PX ttl; true when it was set, false when the key was
 * there. Exits on an error. */
static inline bool bench_redis_set_nx(redisContext *c, const char *key, const char *owner) {
  redisReply *r = redisCommand(c, "SET %s %s NX PX %d", key, owner, 3600000);
  if (!r || r->type == REDIS_REPLY_ERROR) {
    fprintf(stderr, "bench: SET failed: %s\n", r ? r->str : c->errstr);
    exit(1);
  }
  bool ok = r->type == REDIS_REPLY_STATUS;
  freeReplyObject(r);
  return ok;
}

#endif /* RESV_BENCH_REDIS_H */
