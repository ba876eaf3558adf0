/* several.c: a call of two keys against the single-key calls it replaces.
 *
 *   several [memory|file-process|file-disk] [pairs]
 *
 * A sign-up holds two keys (an e-mail address and a user name) together.
 * Each round, on a fresh type, reserves `pairs` new pairs three ways: one
 * reserve of one key (the unit), two reserves (what a caller writes
 * without reserve_all), one reserve_all of both; then confirms them, two
 * confirms against one confirm_all. The keys' strings are made before
 * the clock starts (formatting them costs about what a reserve does).
 * Wall nanoseconds per pair, the median of 5 rounds, and the ratios of
 * the same run:
 *
 *   ratio reserve_all_over_reserve      reserve_all of 2 / one reserve
 *   ratio reserve_all_over_two          reserve_all of 2 / two reserves
 *   ratio confirm_all_over_two          confirm_all of 2 / two confirms
 *
 * Under callgrind (--collect-atstart=no) the counts are switched on around
 * each round's timed pass and dumped once a way with its count of pairs
 * (bench_callgrind_dump, named as the figures are), which
 * bench/callgrind_several.sh reads as instructions a pair. */
#include "bench.h"

#define ROUNDS 5

/* The e-mail address and user name of pair i of a round. */
typedef struct pair_names {
  char email[40], name[32];
} pair_names_t;

static void name_pairs(pair_names_t *p, int pairs, int round) {
  for (int i = 0; i < pairs; i++) {
    snprintf(p[i].email, sizeof p[i].email, "user%d.%d@example.com", i, round);
    snprintf(p[i].name, sizeof p[i].name, "user%d.%d", i, round);
  }
}

static void call(resv_type_t *t, const resv_request_t *r, resv_answer_t *a, int32_t want) {
  resv_error_t err;
  if (!resv_call(t, r, a, &err)) bench_die("call", &err);
  if (a->status != want) {
    fprintf(stderr, "bench: op %d answered %s\n", (int)r->op, resv_status_name(a->status));
    exit(1);
  }
}

/* Nanoseconds per pair of one way (way 0: one reserve; 1: two reserves;
 * 2: reserve_all; 3: two confirms; 4: confirm_all), on its own keys. */
static double run_way(resv_store_t *s, int way, int pairs, int round, pair_names_t *p) {
  char name[64];
  snprintf(name, sizeof name, "w%d_r%d", way, round);
  resv_error_t err;
  resv_type_t *t = resv_store_type(s, "bench", 5, name, strlen(name), &err);
  if (!t) bench_die("type", &err);
  resv_answer_t a = {0};
  resv_request_t r = {.owner = {resv_cstr("t1"), resv_cstr("owner")},
                      .attempt = resv_cstr("req-1"), .ttl_ms = 60000, .version = 1};
  bool confirms = way >= 3;
  name_pairs(p, pairs, round);
  int64_t start = 0;
  for (int pass = confirms ? 0 : 1; pass < 2; pass++) { /* confirms reserve first */
    if (pass == 1) {
      CALLGRIND_TOGGLE_COLLECT;
      start = bench_wall_ns();
    }
    for (int i = 0; i < pairs; i++) {
      resv_key_t keys[2] = {{resv_cstr(""), resv_cstr("email"), resv_cstr(p[i].email)},
                            {resv_cstr(""), resv_cstr("name"), resv_cstr(p[i].name)}};
      int w = pass == 0 ? 2 : way; /* the confirms' keys are reserved by reserve_all */
      r.keys = keys;
      r.nkeys = 2;
      if (w == 0 || w == 1 || w == 3) {
        r.op = w == 3 ? RESV_OP_CONFIRM : RESV_OP_RESERVE;
        for (int k = 0; k < (w == 0 ? 1 : 2); k++) {
          r.key = keys[k];
          call(t, &r, &a, w == 3 ? RESV_CONFIRMED : RESV_RESERVED);
        }
      } else {
        r.op = w == 2 ? RESV_OP_RESERVE_ALL : RESV_OP_CONFIRM_ALL;
        call(t, &r, &a, w == 2 ? RESV_RESERVED : RESV_CONFIRMED);
      }
    }
  }
  int64_t ns = bench_wall_ns() - start;
  CALLGRIND_TOGGLE_COLLECT;
  resv_answer_clear(&a);
  return (double)ns / pairs;
}

static int cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

int main(int argc, char **argv) {
  const char *kind = argc > 1 ? argv[1] : "memory";
  int pairs = argc > 2 ? atoi(argv[2]) : 20000;
  char dir[512] = "";
  resv_options_t o = {0};
  if (strncmp(kind, "file", 4) == 0) {
    bench_fresh_dir(dir, sizeof dir);
    o.path = dir;
    o.sync = strcmp(kind, "file-disk") == 0 ? RESV_SYNC_DISK : RESV_SYNC_PROCESS;
  }
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) bench_die("open", &err);
  pair_names_t *p = malloc((size_t)pairs * sizeof *p);
  if (!p) return 1;
  static const char *const names[] = {"reserve", "two_reserves", "reserve_all",
                                      "two_confirms", "confirm_all"};
  double med[5];
  for (int way = 0; way < 5; way++) {
    double ns[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) ns[round] = run_way(s, way, pairs, round, p);
    bench_callgrind_dump(names[way], (long)pairs * ROUNDS);
    qsort(ns, ROUNDS, sizeof ns[0], cmp);
    med[way] = ns[ROUNDS / 2];
    printf("figure %s_ns %.1f (min %.1f, max %.1f)\n", names[way], med[way], ns[0],
           ns[ROUNDS - 1]);
  }
  printf("ratio reserve_all_over_reserve %.2f\n", med[2] / med[0]);
  printf("ratio reserve_all_over_two %.2f\n", med[2] / med[1]);
  printf("ratio confirm_all_over_two %.2f\n", med[4] / med[3]);
  resv_store_close(s);
  free(p);
  if (dir[0]) bench_remove_dir(dir);
  return 0;
}
