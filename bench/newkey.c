/* newkey.c: the file store's new key and conflict, one thread, for
 * callgrind's instruction counts (sync = process).
 *
 *   newkey [keys] [s][t]
 *
 * Opens a store with sync = "process", reserves `keys` new 20-byte keys
 * with a 10-byte owner id (in order, or scattered with "s"), then the same
 * keys again by another owner (each a conflict). Each call is resv_call,
 * or with "t" resv_try_call: the call of a host that must not block (Lua,
 * nginx), which never waits for the write gate and is timed one in 256
 * (resv_call falls back when it would wait).
 * Under callgrind, run with --collect-atstart=no: the counts are switched
 * on around the new keys (phase "new") and around the conflicts (phase
 * "conflict"), each phase dumped on its own with its count of calls
 * (bench_callgrind_dump), which bench/callgrind_newkey.sh divides by.
 * Outside callgrind it prints wall ns a call of each phase. */
#include "bench.h"

static char dir[256];

static void key_of(char *buf, int i, int scattered) {
  unsigned v = scattered ? (unsigned)i * 2654435761u : (unsigned)i;
  snprintf(buf, 21, "k%019u", v);
}

/* bench_reserve through resv_try_call, or resv_call when that would wait. */
static void try_reserve(resv_type_t *t, const char *key, const char *owner, int32_t expect,
                        resv_answer_t *a) {
  resv_error_t err;
  resv_request_t r = bench_reserve_request(key, owner);
  if (!resv_try_call(t, &r, a, &err)) {
    if (err.code != RESV_OK) bench_die("reserve", &err);
    bench_reserve(t, key, owner, expect, a);
  } else if (a->status != expect) {
    bench_expect("reserve", a, expect);
  }
}

static double phase(resv_type_t *t, int n, int scattered, int try, const char *owner,
                    int32_t expect, const char *name) {
  resv_answer_t a = {0};
  char key[32];
  CALLGRIND_ZERO_STATS;
  CALLGRIND_TOGGLE_COLLECT;
  int64_t t0 = bench_wall_ns();
  for (int i = 0; i < n; i++) {
    key_of(key, i, scattered);
    if (try)
      try_reserve(t, key, owner, expect, &a);
    else
      bench_reserve(t, key, owner, expect, &a);
  }
  int64_t t1 = bench_wall_ns();
  CALLGRIND_TOGGLE_COLLECT;
  bench_callgrind_dump(name, n);
  return (double)(t1 - t0) / n;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000;
  const char *mode = argc > 2 ? argv[2] : "";
  if (strspn(mode, "st") != strlen(mode)) {
    fprintf(stderr, "usage: newkey [keys] [s][t]\n");
    return 2;
  }
  int scattered = strchr(mode, 's') != NULL, try = strchr(mode, 't') != NULL;
  bench_fresh_dir(dir, sizeof dir);
  resv_options_t o = {.path = dir, .sync = RESV_SYNC_PROCESS, .threads = 1,
                      .map_size = INT64_C(1) << 30};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) bench_die("open", &err);
  resv_type_t *t = resv_store_type(s, "bench", 5, "aggregate", 9, &err);
  if (!t) bench_die("type", &err);
  double nw = phase(t, n, scattered, try, "owner-0001", RESV_RESERVED, "new");
  double cf = phase(t, n, scattered, try, "owner-0002", RESV_CONFLICT, "conflict");
  printf("figure newkey_ns %.1f\nfigure conflict_ns %.1f\n", nw, cf);
  resv_store_close(s);
  bench_remove_dir(dir);
  return 0;
}
