/* bench.h: what the C benchmarks share: clocks, the server's URI, a few
 * helpers to make keys and to die on an unexpected error.
 *
 * A benchmark prints figures; it never fails on a time. It exits non-zero
 * only when the thing it measures did not work (a wrong answer, an error),
 * because then its figures would mean nothing. */
#ifndef RESV_BENCH_H
#define RESV_BENCH_H

#include "resv.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

/* Wall-clock nanoseconds on the monotonic clock. */
static inline int64_t bench_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* CPU nanoseconds used by the whole process (every thread), from the
 * scheduler's own accounting: precise, unlike tick-sampled getrusage. */
static inline int64_t bench_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* CPU nanoseconds used by the calling thread alone: what a caller pays,
 * without the dispatcher threads' work (which is the same whatever calls). */
static inline int64_t bench_thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A new directory under $TMPDIR (default /tmp), its name into dir (a
 * file store's, for the benchmarks of the file store). Exits when it
 * cannot be made. */
static inline void bench_fresh_dir(char *dir, size_t size) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, size, "%s/resv-bench-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(1);
  }
}

/* Removes dir and every file in it (a file store's data.mdb, lock.mdb,
 * resv.state and resv.gate). */
static inline void bench_remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  char file[600];
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    snprintf(file, sizeof file, "%s/%s", dir, de->d_name);
    unlink(file);
  }
  if (d) closedir(d);
  rmdir(dir);
}

/* The machine's load averages (1, 5 and 15 minutes) as "a b c", for the
 * figures of a benchmark whose baseline swings with the load. */
static inline void bench_load(char *out, size_t size) {
  FILE *f = fopen("/proc/loadavg", "r");
  double a = 0, b = 0, c = 0;
  if (!f || fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3) snprintf(out, size, "unknown");
  else snprintf(out, size, "%.2f %.2f %.2f", a, b, c);
  if (f) fclose(f);
}

/* The MongoDB URI scripts/with-mongo hands us, or NULL. */
static inline const char *bench_uri(void) {
  const char *uri = getenv("RESV_TEST_URI");
  return uri && uri[0] ? uri : NULL;
}

static inline void bench_die(const char *what, const resv_error_t *err) {
  fprintf(stderr, "bench: %s: %s: %s\n", what,
          err ? resv_code_name(err->code) : "?", err ? err->message : "");
  exit(1);
}

/* The i-th of a benchmark's 20-byte keys, into buf (21 bytes with the
 * NUL): `prefix` and 19 digits, in order, or with `scattered` "k" and the
 * digits of a fixed mix of i, spread over the key space (the same keys in
 * every run, never in order). */
static inline uint64_t bench_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline void bench_key(char *buf, int i, bool scattered, char prefix) {
  if (scattered)
    snprintf(buf, 21, "k%019llu",
             (unsigned long long)(bench_mix((uint64_t)i) % UINT64_C(10000000000000000000)));
  else
    snprintf(buf, 21, "%c%019d", prefix, i);
}

/* A file store at dir with the benchmarks' map (4 GiB) and one thread. */
static inline resv_store_t *bench_open_file(const char *dir, int32_t sync,
                                            int64_t sweep_grace_ms) {
  resv_options_t o = {.path = dir, .sync = sync, .threads = 1,
                      .map_size = INT64_C(4) << 30, .sweep_grace_ms = sweep_grace_ms};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) bench_die("open", &err);
  return s;
}

/* The type "bench"/aggregate of store s. */
static inline resv_type_t *bench_type(resv_store_t *s, const char *aggregate) {
  resv_error_t err;
  resv_type_t *t = resv_store_type(s, "bench", 5, aggregate, strlen(aggregate), &err);
  if (!t) bench_die("type", &err);
  return t;
}

/* Exits when an answer's status is not the one the benchmark expects. */
static inline void bench_expect(const char *what, const resv_answer_t *a,
                                int32_t status) {
  if (a->status != status) {
    fprintf(stderr, "bench: %s: answered %s, expected %s\n", what,
            resv_status_name(a->status), resv_status_name(status));
    exit(1);
  }
}

/* A reserve of key (namespace "email") for owner by attempt "req-1" for
 * an hour. */
static inline resv_request_t bench_reserve_request(const char *key, const char *owner) {
  return (resv_request_t){.op = RESV_OP_RESERVE,
                          .key = {resv_cstr(""), resv_cstr("email"), resv_cstr(key)},
                          .owner = {resv_cstr(""), resv_cstr(owner)},
                          .attempt = resv_cstr("req-1"), .ttl_ms = 3600000};
}

/* bench_reserve_request's reserve, which must answer expect; into a (the
 * caller's to clear). */
static inline void bench_reserve(resv_type_t *t, const char *key, const char *owner,
                                 int32_t expect, resv_answer_t *a) {
  resv_error_t err;
  resv_request_t r = bench_reserve_request(key, owner);
  if (!resv_call(t, &r, a, &err)) bench_die("reserve", &err);
  if (a->status != expect) bench_expect("reserve", a, expect);
}

/* Under callgrind (--collect-atstart=no), dumps the counts since the last
 * dump as the phase "name calls", which bench/callgrind_dumps.sh divides
 * by its calls; a no-op outside callgrind. */
static inline void bench_callgrind_dump(const char *name, long calls) {
  char label[96];
  snprintf(label, sizeof label, "%s %ld", name, calls);
  CALLGRIND_DUMP_STATS_AT(label);
  (void)label; /* unused where valgrind's requests compile to nothing */
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of n values (sorts them in place). */
static inline double bench_median(double *v, size_t n) {
  qsort(v, n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif /* RESV_BENCH_H */
