/* stats.h: the layout of a store's counters, for stats.c and for the one
 * hot path that counts inline: an answered call of an inline store in
 * csrc/store/, where a call into stats.c would cost as much as the
 * counting.
 *
 * A call is counted on the thread that ends it, into that thread's slot:
 * each thread gets a slot number once (a thread-local), and the first
 * SLOTS - 1 threads of the process own theirs alone, so they add with a
 * relaxed load and store (no locked instruction, no shared cache line);
 * the threads after them share the last slot and add with a relaxed
 * fetch_add. */
#ifndef RESV_CORE_STATS_H
#define RESV_CORE_STATS_H

#include "base.h"

#define RESV__SLOTS 16

typedef struct resv__slot {
  _Atomic uint64_t calls[RESV_STATS_OPS][RESV_STATS_STATUSES];
  _Atomic uint64_t errors[RESV_STATS_OPS][RESV_STATS_CODES];
  _Atomic uint64_t buckets[RESV_STATS_OPS][RESV_STATS_BUCKETS];
  _Atomic uint64_t sum_ns[RESV_STATS_OPS];
  _Atomic uint64_t counts[RESV__STAT_KINDS];
} __attribute__((aligned(64))) resv__slot_t;

struct resv__stats {
  int64_t slow_ns;
  int64_t slow_ms;
  _Atomic uint64_t slow; /* rare: one shared counter */
  resv__slot_t slots[RESV__SLOTS];
};

/* This thread's slot number, -1 until its first count (stats.c).
 * Initial-exec, as resv__sample_tick (internal.h). */
extern _Thread_local int resv__my_slot __attribute__((tls_model("initial-exec")));

/* Adds n to counter c of a slot: a relaxed load and store when the thread
 * owns the slot alone, else a relaxed fetch_add. */
static inline void resv__slot_add(_Atomic uint64_t *c, uint64_t n, bool owned) {
  if (owned)
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
  else
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* resv__stats_answer for a call answered with status, inline: a thread
 * that owns its slot adds without a call; the first count of a thread,
 * a shared slot and anything out of range take stats.c's way. */
static inline void resv__stats_answered(resv__stats_t *s, int32_t op, int32_t status) {
  int i = resv__my_slot;
  if (i < 0 || i >= RESV__SLOTS - 1 || (uint32_t)op >= RESV_STATS_OPS ||
      (uint32_t)status >= RESV_STATS_STATUSES) {
    resv__stats_answer(s, op, true, status);
    return;
  }
  resv__slot_add(&s->slots[i].calls[op][status], 1, true);
}

#endif
