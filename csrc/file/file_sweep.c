/* file_sweep.c: deleting what has expired over a whole type, many records
 * per call: the sweep operation, and the reclaiming that makes room when
 * the map is full.
 *
 * Both walk the type a chunk of records per write transaction, so other
 * writers run between chunks; a chunk the full map refuses runs again
 * one record at a time. They delete only what file_reclaim.c finds
 * reclaimable, and must not run on a host's event loop (file_store.c
 * hands a sweep to the dispatcher). */
#include "file_env.h"

#include <string.h>

#define RECLAIM_CHUNK 32  /* records visited per transaction when full: few
                           * pages each, freed for the next one */
#define SWEEP_CHUNK 1024 /* records visited per transaction by sweep */
#define RECLAIM_WHEN_FULL 1000000   /* at most, when the map is full */

/* With the map full: clears dead readers' slots, then deletes what has
 * expired past the grace in the type, a few records per transaction: a
 * deletion copies its pages too, and the pages a transaction frees are
 * free for the next one only, so when even a small chunk finds no room
 * the chunks shrink to one record and grow again as room comes back. */
void resv__file_reclaim_when_full(file_t *f, resv__file_type_t *ft, int64_t now,
                              int64_t deadline) {
  env_t *e = f->env;
  MDB_txn *txn;
  MDB_stat st;
  resv__file_check_readers(e, true);
  if (resv__file_begin_txn(e, MDB_RDONLY, &txn)) return;
  int rc = mdb_stat(txn, ft->dbi, &st);
  mdb_txn_abort(txn);
  resv__file_end_txn(e);
  if (rc) return;
  size_t todo = st.ms_entries < RECLAIM_WHEN_FULL ? st.ms_entries : RECLAIM_WHEN_FULL;
  size_t chunk = RECLAIM_CHUNK;
  for (size_t done = 0; done <= todo;) {
    size_t deleted = 0;
    unsigned char at[RESV__FILE_KEY_MAX + 1];
    size_t at_len = ft->sweep_len;
    memcpy(at, ft->sweep_at, at_len);
    resv_error_t gate_err;
    if (resv__file_begin_write(e, deadline, "reclaim", &gate_err, &txn)) return;
    rc = resv__file_reclaim(txn, ft, resv__add_ms_sat(now, -f->grace_ms), chunk, &deleted);
    rc = resv__file_finish_write(e, txn, rc, true, true);
    if (rc == 0) {
      done += chunk;
      if (chunk < RECLAIM_CHUNK) chunk *= 2;
    } else if (rc == MDB_MAP_FULL && chunk > 1) {
      memcpy(ft->sweep_at, at, at_len); /* the walk did not happen */
      ft->sweep_len = at_len;
      chunk = 1;
    } else {
      return;
    }
  }
}

/* sweep: the whole type, SWEEP_CHUNK records per write transaction (so
 * other writers run between chunks); a chunk the full map refuses runs
 * again one record at a time. */
bool resv__file_sweep(file_t *f, resv__file_type_t *ft, int64_t now, int64_t deadline,
                  resv_answer_t *a, resv_error_t *err) {
  env_t *e = f->env;
  unsigned char at[RESV__FILE_KEY_MAX + 1];
  size_t at_len = 0, deleted = 0, chunk = SWEEP_CHUNK;
  int64_t limit = resv__add_ms_sat(now, -f->grace_ms);
  do {
    unsigned char before[RESV__FILE_KEY_MAX + 1];
    size_t before_len = at_len, n = 0;
    memcpy(before, at, at_len);
    MDB_txn *txn;
    resv__file_check_readers(e, false);
    int rc = resv__file_begin_write(e, deadline, "sweep", err, &txn);
    if (rc) return resv__file_write_fail(e, err, rc, "sweep");
    rc = resv__file_walk(txn, ft->dbi, at, &at_len, limit, chunk, &n);
    rc = resv__file_finish_write(e, txn, rc, true, true);
    if (rc == MDB_MAP_FULL && chunk > 1) {
      memcpy(at, before, before_len); /* the chunk did not happen */
      at_len = before_len;
      chunk = 1;
      continue;
    }
    if (rc) return resv__file_lmdb_fail(e, err, rc, "sweep");
    deleted += n;
    if (chunk < SWEEP_CHUNK) chunk *= 2;
  } while (at_len);
  if (!resv__answer_status(a, RESV_SWEPT, err)) return false;
  a->count = (int64_t)deleted;
  return true;
}
