/* internal.h: what the files of the store (csrc/store/) share, and what
 * the tests and benchmarks reach of it. The store is the one part that
 * knows every other: it opens a backend (the memory store, the file store
 * or the MongoDB store) through its header, hands the calls that do not
 * run inline to the dispatcher, and counts them. Nothing below includes
 * this header. */
#ifndef RESV_INTERNAL_H
#define RESV_INTERNAL_H

#include "backend.h"
#include "dispatch.h"
#include "file.h"
#include "memory.h"
#include "mongo.h"

/* ---- Stores and types ------------------------------------------------ */

/* The entries and bytes of every type of the store (the backend's usage
 * op); false, both -1, for a store without one (MongoDB). */
bool resv__store_usage(resv_store_t *store, int64_t *entries, int64_t *bytes);
/* Turns the counting of resv_call's inline calls off and on, for the
 * baseline of bench/stats_cost.c (the same store, the same code path but
 * for one predictable branch). Counting is on from open. */
void resv__store_set_counting(resv_store_t *store, bool on);

/* Stores being torn down by resv_store_close's reaper threads (for
 * tests; the process waits for them at exit). */
int resv__store_reapers(void);

#endif /* RESV_INTERNAL_H */
