/* durability.c: what sync = "disk" (the file store's default) costs, as
 * ratios against a baseline measured in the same run.
 *
 *   durability [seconds per round] [rounds]
 *
 * 1. One writer reserving new keys in a loop: ns per reserve, against one
 *    pwrite of a 4 KiB page and its fdatasync on a file in the same
 *    directory (the flush every synced commit waits for at least).
 * 2. 32 writers (a dispatcher of 32 threads, so that their writes can
 *    share commits) against the one writer: reservations per second.
 * Each round runs each measure for `seconds` (default 0.3), rounds
 * (default 5, at least 5) interleaved; min/median/max of the ratios.
 * Every figure is printed as "figure <name> <value>". The directories are
 * made under $TMPDIR (default /tmp) and removed. */
#include "bench.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#define MAX_ROUNDS 64
#define WRITERS 32

static char dir[256];

static void fresh_dir(void) { bench_fresh_dir(dir, sizeof dir); }
static void remove_dir(void) { bench_remove_dir(dir); }

/* ns per pwrite of a 4 KiB page and its fdatasync, for `seconds`. */
static double page_sync_ns(double seconds) {
  fresh_dir();
  char file[300], page[4096];
  snprintf(file, sizeof file, "%s/page", dir);
  int fd = open(file, O_RDWR | O_CREAT, 0600);
  if (fd < 0) {
    perror(file);
    exit(1);
  }
  int64_t t0 = bench_wall_ns(), until = t0 + (int64_t)(seconds * 1e9), t = t0;
  long n = 0;
  for (; t < until; n++, t = bench_wall_ns()) {
    memset(page, (int)n, sizeof page);
    if (pwrite(fd, page, sizeof page, 0) != (ssize_t)sizeof page || fdatasync(fd) != 0) {
      perror(file);
      exit(1);
    }
  }
  close(fd);
  remove_dir();
  return (double)(t - t0) / (double)n;
}

typedef struct {
  resv_type_t *type;
  int id;
  int64_t until;
  long done;
} writer_t;

static void *writer(void *arg) {
  writer_t *w = arg;
  resv_answer_t a = {0};
  resv_error_t err;
  char key[32], owner[16];
  snprintf(owner, sizeof owner, "w%d", w->id);
  while (bench_wall_ns() < w->until) {
    snprintf(key, sizeof key, "w%d-%ld", w->id, w->done);
    resv_request_t r = {.op = RESV_OP_RESERVE,
                        .key = {resv_cstr(""), resv_cstr("email"), resv_cstr(key)},
                        .owner = {resv_cstr(""), resv_cstr(owner)},
                        .attempt = resv_cstr("req-1"), .ttl_ms = 3600000};
    if (!resv_call(w->type, &r, &a, &err)) bench_die("reserve", &err);
    bench_expect("reserve", &a, RESV_RESERVED);
    w->done++;
  }
  resv_answer_clear(&a);
  return NULL;
}

/* Reservations per second of n writers on a fresh store (sync = "disk",
 * the default), for `seconds`. */
static double store_rate(int n, double seconds) {
  fresh_dir();
  resv_options_t o = {.path = dir, .threads = n, .map_size = INT64_C(1) << 30};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) bench_die("open", &err);
  resv_type_t *t = resv_store_type(s, "bench", 5, "durability", 10, &err);
  if (!t) bench_die("type", &err);
  writer_t w[WRITERS];
  pthread_t th[WRITERS];
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++) {
    w[i] = (writer_t){.type = t, .id = i, .until = t0 + (int64_t)(seconds * 1e9)};
    pthread_create(&th[i], NULL, writer, &w[i]);
  }
  long done = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    done += w[i].done;
  }
  double elapsed = (double)(bench_wall_ns() - t0) / 1e9;
  resv_store_close(s);
  remove_dir();
  return (double)done / elapsed;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void print_spread(const char *name, const char *what, double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  printf("%s: %.2fx %s (min %.2fx, max %.2fx, %d rounds)\n", name, v[n / 2], what, v[0],
         v[n - 1], n);
  printf("figure %s_median %.3f\nfigure %s_min %.3f\nfigure %s_max %.3f\n", name, v[n / 2],
         name, v[0], name, v[n - 1]);
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 0.3;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  if (rounds < 5) rounds = 5;
  if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
  printf("durability: sync = \"disk\", %d rounds of %.2f s per measure, in %s\n", rounds,
         seconds, getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  double one[MAX_ROUNDS], many[MAX_ROUNDS];
  double page_ns[MAX_ROUNDS], one_ns[MAX_ROUNDS], one_rate[MAX_ROUNDS], many_rate[MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    page_ns[r] = page_sync_ns(seconds);
    one_rate[r] = store_rate(1, seconds);
    many_rate[r] = store_rate(WRITERS, seconds);
    one_ns[r] = 1e9 / one_rate[r];
    one[r] = one_ns[r] / page_ns[r];
    many[r] = many_rate[r] / one_rate[r];
    printf("round %d: a 4 KiB page and its fdatasync %.0f ns; one writer %.0f ns a "
           "reserve; %d writers %.0f reservations/s\n",
           r + 1, page_ns[r], one_ns[r], WRITERS, many_rate[r]);
  }
  print_spread("disk_one_writer_per_page_sync", "the time of one page's fdatasync per "
               "reserve, one writer", one, rounds);
  print_spread("disk_32_writers_per_one", "the throughput of one writer, 32 writers", many,
               rounds);
  return 0;
}
