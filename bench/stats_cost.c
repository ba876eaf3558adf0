/* stats_cost.c: what the counters of resv_store_stats cost a memory-store
 * call (issue 14: "counters that cost nothing measurable on the memory
 * store's hot path").
 *
 * One store, one process: rounds of calls alternate between counting on
 * (an add to the thread's own slot; one call in RESV__SAMPLE_EVERY also
 * reads the clock twice for the latency) and off
 * (resv__store_set_counting, the same path but for one branch), so
 * both see the same machine at the same moment. Each round runs ROUND
 * calls of one kind: reserve of a new key then its release (a malloc, an
 * insert, a delete: two calls), get of a held key (the lightest call),
 * reserve of the same key again (a join). Time is the thread's CPU time
 * (a machine shared with other builds preempts us; CPU time does not
 * count that). Prints the median ns per call, off and on, and the median
 * of the ratios of each pair of neighbouring rounds (drift cancels).
 *
 *   build/bench/stats_cost [pairs of rounds, default 200] [aa]
 *
 * With "aa", the control: both sides of every pair uncounted, so the
 * ratios show what the method itself sees (an A/A test).            */
#include "bench.h"
#include "internal.h"

#define ROUND 2000
#define MAX_ROUNDS 1000

static resv_key_t key_of(char *buf, size_t size, long i) {
  int n = snprintf(buf, size, "user%ld@example.com", i);
  resv_key_t k = {{"", 0}, {"email", 5}, {buf, (size_t)n}};
  return k;
}

typedef enum { NEW_KEY, GET, JOIN } kind_t;

static int64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ns per call of one round of kind. */
static double round_ns(resv_type_t *t, kind_t kind, long *serial) {
  resv_answer_t a = {0};
  resv_error_t err;
  resv_owner_t o = {{"", 0}, {"owner-0001", 10}};
  char buf[64];
  resv_key_t held = key_of(buf, sizeof buf, -1);
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = held, .owner = o,
                      .attempt = {"a", 1}, .ttl_ms = 600000};
  if (!resv_call(t, &r, &a, &err)) bench_die("reserve", &err);
  int64_t t0 = thread_cpu_ns();
  for (int i = 0; i < ROUND; i++) {
    if (kind == NEW_KEY) {
      r.key = key_of(buf, sizeof buf, (*serial)++);
      r.op = RESV_OP_RESERVE;
      if (!resv_call(t, &r, &a, &err)) bench_die("reserve", &err);
      r.op = RESV_OP_RELEASE;
    } else {
      r.key = key_of(buf, sizeof buf, -1);
      r.op = kind == GET ? RESV_OP_GET : RESV_OP_RESERVE;
    }
    if (!resv_call(t, &r, &a, &err)) bench_die("call", &err);
  }
  int64_t ns = thread_cpu_ns() - t0;
  resv_answer_clear(&a);
  return (double)ns / (kind == NEW_KEY ? 2 * ROUND : ROUND);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 200;
  if (rounds < 1 || rounds > MAX_ROUNDS) rounds = 200;
  bool control = argc > 2 && strcmp(argv[2], "aa") == 0;
  static const char *names[] = {"reserve+release new", "get (held key)", "reserve (join)"};
  printf("counters on the memory store's hot path: %d pairs of rounds of %d calls,"
         " thread CPU time%s\n", rounds, ROUND,
         control ? " (control: both sides off)" : "");
  printf("  %-20s %10s %10s %14s\n", "call", "off ns", "on ns", "on/off (pairs)");
  for (int kind = NEW_KEY; kind <= JOIN; kind++) {
    static double on[MAX_ROUNDS], off[MAX_ROUNDS], ratio[MAX_ROUNDS];
    resv_error_t err;
    resv_store_t *s = resv_store_open(NULL, &err);
    if (!s) bench_die("open", &err);
    resv_type_t *t = resv_store_type(s, "bench", 5, "user", 4, &err);
    if (!t) bench_die("type", &err);
    long serial = 0;
    round_ns(t, (kind_t)kind, &serial); /* warm up */
    for (int i = 0; i < rounds; i++) {
      /* Which side goes first alternates, so neither gains from order. */
      for (int side = 0; side < 2; side++) {
        bool counting = (side == 0) == (i % 2 == 0);
        resv__store_set_counting(s, counting && !control);
        (counting ? on : off)[i] = round_ns(t, (kind_t)kind, &serial);
      }
      ratio[i] = on[i] / off[i];
    }
    double m_off = bench_median(off, (size_t)rounds), m_on = bench_median(on, (size_t)rounds);
    printf("  %-20s %10.1f %10.1f %14.3f\n", names[kind], m_off, m_on,
           bench_median(ratio, (size_t)rounds));
    resv_store_close(s);
  }
  return 0;
}
