/* stats.c: a store's counters (docs/design.md section 13), cheap on the hot path
 * (the slots: stats.h). resv_store_stats sums the slots. A reader may see
 * a call's status counted before its latency: each counter is exact, the
 * set is not a snapshot, as with any Prometheus exporter.
 *
 * The latency buckets are kept per bucket (not cumulative) and made
 * cumulative when summed, so a call adds to one bucket only; the bounds
 * run from 1 µs (a memory-store call) to 10 s. */
#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

_Static_assert(RESV_STATS_OPS == RESV_OP_ABANDON_ALL + 1, "one row per op");
_Static_assert(RESV_STATS_STATUSES == RESV_SWEPT + 1, "one column per status");
_Static_assert(RESV_STATS_CODES == RESV_ENOMEM + 1, "one column per code");

#define SLOTS RESV__SLOTS
#define OPS RESV_STATS_OPS
#define BUCKETS RESV_STATS_BUCKETS

/* The bounds in nanoseconds; the last bucket has none (+Inf). */
static const int64_t bounds_ns[BUCKETS - 1] = {
    1000,      2500,      5000,      10000,      25000,      50000,
    100000,    250000,    500000,    1000000,    2500000,    5000000,
    10000000,  25000000,  50000000,  100000000,  250000000,  500000000,
    1000000000, 2500000000, 5000000000, 10000000000};

typedef resv__slot_t slot_t;

static atomic_int next_slot;
_Thread_local int resv__my_slot __attribute__((tls_model("initial-exec"))) = -1;

/* This thread's slot number, and whether it owns it alone. */
static int slot_index(bool *owned) {
  int i = resv__my_slot;
  if (i < 0) {
    i = atomic_fetch_add_explicit(&next_slot, 1, memory_order_relaxed);
    if (i >= SLOTS - 1) i = SLOTS - 1;
    resv__my_slot = i;
  }
  *owned = i < SLOTS - 1;
  return i;
}

int64_t resv__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

resv__stats_t *resv__stats_new(int64_t slow_ms) {
  resv__stats_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->slow_ms = slow_ms;
  s->slow_ns = slow_ms * 1000000;
  return s;
}

void resv__stats_free(resv__stats_t *s) { free(s); }

void resv__stats_call(resv__stats_t *s, int32_t op, bool ok, int32_t what,
                      int64_t ns) {
  if (!s) return;
  resv__stats_answer(s, op, ok, what);
  resv__stats_latency(s, op, ns);
}

void resv__stats_latency(resv__stats_t *s, int32_t op, int64_t ns) {
  if (!s) return;
  if (op < 0 || op >= OPS) op = 0; /* an unknown op (answered invalid) */
  bool owned = false;
  slot_t *slot = &s->slots[slot_index(&owned)];
  if (ns < 0) ns = 0;
  int b = 0;
  while (b < BUCKETS - 1 && ns > bounds_ns[b]) b++;
  resv__slot_add(&slot->buckets[op][b], 1, owned);
  resv__slot_add(&slot->sum_ns[op], (uint64_t)ns, owned);
  if (ns > s->slow_ns) atomic_fetch_add_explicit(&s->slow, 1, memory_order_relaxed);
}

void resv__stats_answer(resv__stats_t *s, int32_t op, bool ok, int32_t what) {
  if (!s) return;
  if (op < 0 || op >= OPS) op = 0;
  bool owned = false;
  slot_t *slot = &s->slots[slot_index(&owned)];
  if (ok) {
    if (what < 0 || what >= RESV_STATS_STATUSES) what = RESV_NONE;
    resv__slot_add(&slot->calls[op][what], 1, owned);
  } else {
    if (what < 0 || what >= RESV_STATS_CODES) what = RESV_OK;
    resv__slot_add(&slot->errors[op][what], 1, owned);
  }
}

_Thread_local unsigned resv__sample_tick __attribute__((tls_model("initial-exec")));

void resv__stats_count(resv__stats_t *s, int kind) {
  if (!s || kind < 0 || kind >= RESV__STAT_KINDS) return;
  bool owned = false;
  resv__slot_add(&s->slots[slot_index(&owned)].counts[kind], 1, owned);
}

static uint64_t get(const _Atomic uint64_t *c) {
  return atomic_load_explicit(c, memory_order_relaxed);
}

void resv__stats_sum(const resv__stats_t *s, resv_stats_t *out) {
  uint64_t sum_ns[OPS] = {0};
  for (int i = 0; i < SLOTS; i++) {
    const slot_t *slot = &s->slots[i];
    for (int op = 0; op < OPS; op++) {
      for (int k = 0; k < RESV_STATS_STATUSES; k++) out->calls[op][k] += get(&slot->calls[op][k]);
      for (int k = 0; k < RESV_STATS_CODES; k++) out->errors[op][k] += get(&slot->errors[op][k]);
      for (int b = 0; b < BUCKETS; b++) out->latency[op][b] += get(&slot->buckets[op][b]);
      sum_ns[op] += get(&slot->sum_ns[op]);
    }
    out->duplicate_key_retries += get(&slot->counts[RESV__STAT_DUPLICATE_RETRY]);
    out->setup_failures += get(&slot->counts[RESV__STAT_SETUP_FAILURE]);
  }
  for (int op = 0; op < OPS; op++) {
    for (int b = 1; b < BUCKETS; b++) out->latency[op][b] += out->latency[op][b - 1];
    out->latency_sum[op] = (double)sum_ns[op] / 1e9;
  }
  out->slow_calls = get(&s->slow);
  out->slow_ms = s->slow_ms;
}

double resv_stats_bound(int32_t i) {
  if (i < 0 || i >= BUCKETS) return 0;
  if (i == BUCKETS - 1) return INFINITY;
  return (double)bounds_ns[i] / 1e9;
}
