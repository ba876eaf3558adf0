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
 * 3. 32 writers in 4 processes of 8 (the shape of nginx's workers, whose
 *    commits take turns at LMDB's writer lock) against the one writer.
 * Each round runs each measure for `seconds` (default 0.3), rounds
 * (default 5, at least 5) interleaved; min/median/max of the ratios.
 * Every figure is printed as "figure <name> <value>". The directories are
 * made under $TMPDIR (default /tmp) and removed. */
#include "bench.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
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
  int64_t from, until;
  long done;
} writer_t;

static void *writer(void *arg) {
  writer_t *w = arg;
  resv_answer_t a = {0};
  char key[32], owner[16];
  snprintf(owner, sizeof owner, "w%d", w->id);
  while (bench_wall_ns() < w->from) usleep(1000);
  while (bench_wall_ns() < w->until) {
    snprintf(key, sizeof key, "w%d-%ld", w->id, w->done);
    bench_reserve(w->type, key, owner, RESV_RESERVED, &a);
    w->done++;
  }
  resv_answer_clear(&a);
  return NULL;
}

/* The reservations n writers (ids from first) make on the store in dir
 * (sync = "disk", the default) from `from` to `until`. */
static long store_writes(int n, int first, int64_t from, int64_t until) {
  resv_options_t o = {.path = dir, .threads = n, .map_size = INT64_C(1) << 30};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) bench_die("open", &err);
  resv_type_t *t = resv_store_type(s, "bench", 5, "durability", 10, &err);
  if (!t) bench_die("type", &err);
  writer_t w[WRITERS];
  pthread_t th[WRITERS];
  for (int i = 0; i < n; i++) {
    w[i] = (writer_t){.type = t, .id = first + i, .from = from, .until = until};
    pthread_create(&th[i], NULL, writer, &w[i]);
  }
  long done = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    done += w[i].done;
  }
  resv_store_close(s);
  return done;
}

/* Reservations per second of procs processes of n writers each on a
 * fresh store, for `seconds` (the processes open it first). */
static double store_rate(int procs, int n, double seconds) {
  fresh_dir();
  int64_t from = bench_wall_ns() + (procs > 1 ? 300 * 1000 * 1000 : 0);
  int64_t until = from + (int64_t)(seconds * 1e9);
  long done = 0;
  if (procs == 1) {
    done = store_writes(n, 0, from, until);
  } else {
    int fds[2];
    if (pipe(fds) != 0) exit(1);
    for (int p = 0; p < procs; p++)
      if (fork() == 0) {
        long mine = store_writes(n, p * n, from, until);
        if (write(fds[1], &mine, sizeof mine) != (ssize_t)sizeof mine) _exit(1);
        _exit(0);
      }
    close(fds[1]);
    for (int p = 0; p < procs; p++) {
      long theirs = 0;
      if (read(fds[0], &theirs, sizeof theirs) != (ssize_t)sizeof theirs) exit(1);
      done += theirs;
    }
    close(fds[0]);
    while (wait(NULL) > 0) {}
  }
  double elapsed = (double)(bench_wall_ns() - from) / 1e9;
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
  double one[MAX_ROUNDS], many[MAX_ROUNDS], spread[MAX_ROUNDS];
  double page_ns[MAX_ROUNDS], one_ns[MAX_ROUNDS], one_rate[MAX_ROUNDS], many_rate[MAX_ROUNDS];
  double procs_rate[MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    page_ns[r] = page_sync_ns(seconds);
    one_rate[r] = store_rate(1, 1, seconds);
    many_rate[r] = store_rate(1, WRITERS, seconds);
    procs_rate[r] = store_rate(4, WRITERS / 4, seconds);
    one_ns[r] = 1e9 / one_rate[r];
    one[r] = one_ns[r] / page_ns[r];
    many[r] = many_rate[r] / one_rate[r];
    spread[r] = procs_rate[r] / one_rate[r];
    printf("round %d: a 4 KiB page and its fdatasync %.0f ns; one writer %.0f ns a "
           "reserve; %d writers %.0f reservations/s, in 4 processes %.0f/s\n",
           r + 1, page_ns[r], one_ns[r], WRITERS, many_rate[r], procs_rate[r]);
  }
  print_spread("disk_one_writer_per_page_sync", "the time of one page's fdatasync per "
               "reserve, one writer", one, rounds);
  print_spread("disk_32_writers_per_one", "the throughput of one writer, 32 writers", many,
               rounds);
  print_spread("disk_4_processes_per_one", "the throughput of one writer, 32 writers in "
               "4 processes", spread, rounds);
  qsort(one_rate, (size_t)rounds, sizeof *one_rate, cmp);
  qsort(many_rate, (size_t)rounds, sizeof *many_rate, cmp);
  qsort(procs_rate, (size_t)rounds, sizeof *procs_rate, cmp);
  printf("figure disk_one_writer_rate_median %.0f\nfigure disk_32_writers_rate_median %.0f\n"
         "figure disk_4_processes_rate_median %.0f\n", one_rate[rounds / 2],
         many_rate[rounds / 2], procs_rate[rounds / 2]);
  return 0;
}
