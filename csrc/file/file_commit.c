/* file_commit.c: the writes of the file store's calls, each in its own
 * transaction (sync = "process") or queued for a shared commit (sync =
 * "disk").
 *
 * sync = "disk" commits with fsync, so concurrent writes of the process
 * share a commit: the first writer to find no commit in progress takes
 * every queued write into one transaction, commits it with one fsync and
 * answers them all; writes queued meanwhile go into the next one. A write
 * that can add data is refused as full once the file reaches map_size
 * and few freed pages are left (over_limit), which leaves LMDB room for
 * the deletions that make room again.
 *
 * It must not decide an operation (file_ops.c does, inside the
 * transaction) nor wait for the gate past the call's deadline. */
#include "file_env.h"

#include <string.h>

/* Past map_size, a write that can add data finds room only in pages
 * freed before: with fewer than this many it is refused as full. */
#define FREE_PAGES_ENOUGH 64

/* True when a write that can add data must not run in txn: the file has
 * reached map_size and fewer than FREE_PAGES_ENOUGH freed pages are left
 * to reuse. Below map_size it costs one read of the meta page; past it, a
 * walk of the free list's records until enough pages are counted. */
static bool over_limit(env_t *e) {
  MDB_envinfo info;
  if (mdb_env_info(e->mdb, &info) || info.me_last_pgno + 1 < e->limit_pages) return false;
  /* LMDB reads its free list in read-only transactions only; this one
   * sees what the caller's write transaction started from (the caller
   * holds e->resize already). */
  MDB_txn *txn;
  MDB_cursor *c;
  MDB_val key, val;
  size_t free_pages = 0;
  /* Unable to look (no reader slot, a map to adopt): let the write try,
   * LMDB itself stops at the end of its map. */
  if (mdb_txn_begin(e->mdb, NULL, MDB_RDONLY, &txn)) return false;
  if (mdb_cursor_open(txn, 0 /* the free list */, &c) == 0) {
    int rc = mdb_cursor_get(c, &key, &val, MDB_FIRST);
    while (rc == 0 && free_pages < FREE_PAGES_ENOUGH) {
      size_t n = 0; /* a record: the count of pages, then the pages */
      if (val.mv_size >= sizeof n) memcpy(&n, val.mv_data, sizeof n);
      free_pages += n;
      rc = mdb_cursor_get(c, &key, &val, MDB_NEXT);
    }
    mdb_cursor_close(c); /* a read-only transaction's cursors are the caller's */
  }
  mdb_txn_abort(txn);
  return free_pages < FREE_PAGES_ENOUGH;
}

static bool adds_data(const resv_request_t *r) {
  return r->op == RESV_OP_RESERVE || r->op == RESV_OP_CONFIRM ||
         r->op == RESV_OP_RESERVE_ALL || r->op == RESV_OP_CONFIRM_ALL;
}

/* One write in its own transaction, with the expired records it passes
 * reclaimed; when the map is full, reclaims and tries once more. checked:
 * the call's read transaction checked the files just before (then the
 * write checks them again only if it waits for the gate). plan: what that
 * read decided, written without a second lookup when nothing was
 * committed since (file_internal.h). */
bool resv__file_write_one(file_t *f, resv__file_type_t *ft, const resv_request_t *r,
                      int64_t now, int64_t deadline, bool checked,
                      const resv__file_peek_t *plan, resv_answer_t *a, resv_error_t *err) {
  env_t *e = f->env;
  for (int round = 0;; round++) {
    MDB_txn *txn;
    bool ok = false;
    size_t deleted = 0;
    resv__file_check_readers(e, false);
    int rc = resv__file_begin_write_checked(e, deadline, checked && round == 0, resv__file_op_name(r->op), err, &txn);
    if (rc) return resv__file_write_fail(e, err, rc, resv__file_op_name(r->op));
    bool done = false;
    if (adds_data(r) && over_limit(e))
      rc = MDB_MAP_FULL;
    else if (plan && round == 0)
      rc = resv__file_apply_planned(txn, ft, r, plan, err, &ok, &done);
    if (rc == 0 && !done)
      rc = resv__file_apply(txn, ft, r, now, f->max_holds, a, err, &ok, NULL);
    if (rc == 0 && ok)
      rc = resv__file_reclaim_some(txn, ft, resv__add_ms_sat(now, -f->grace_ms), RECLAIM_STEPS,
                                   RECLAIM_EVERY, &deleted);
    rc = resv__file_finish_write(e, txn, rc, ok, true);
    if (rc == 0) return ok;
    if (rc != MDB_MAP_FULL || round > 0) return resv__file_lmdb_fail(e, err, rc, resv__file_op_name(r->op));
    resv__file_reclaim_when_full(f, ft, now, deadline);
  }
}

/* Runs a batch of writes in one transaction and commits it, its flush
 * left to the caller (true: the commit is to be flushed). When LMDB fails
 * it (a full map, a disk error), each write runs again in its own
 * transaction, flushed, so one write's failure is only its own. */
static bool run_batch(env_t *e, commit_op_t *batch) {
  MDB_txn *txn;
  int64_t deadline = batch->deadline; /* the batch's latest */
  for (commit_op_t *o = batch; o; o = o->next)
    if (o->deadline > deadline) deadline = o->deadline;
  resv__file_check_readers(e, false);
  int rc = resv__file_begin_write(e, deadline, resv__file_op_name(batch->req->op), batch->err, &txn);
  if (rc == RESV__GATE_REFUSED) { /* every write of the batch answers why */
    for (commit_op_t *o = batch->next; o; o = o->next) *o->err = *batch->err;
    return false;
  }
  if (rc == 0) {
    if (over_limit(e)) rc = MDB_MAP_FULL; /* each on its own, as resv__file_write_one decides */
    for (commit_op_t *o = batch; o && rc == 0; o = o->next) {
      size_t deleted = 0;
      rc = resv__file_apply(txn, o->ft, o->req, o->now, o->file->max_holds, o->answer, o->err,
                            &o->ok, NULL);
      if (rc == 0 && o->ok)
        rc = resv__file_reclaim_some(txn, o->ft, resv__add_ms_sat(o->now, -o->file->grace_ms),
                                     RECLAIM_STEPS, RECLAIM_EVERY, &deleted);
    }
    rc = resv__file_finish_write(e, txn, rc, true, false);
  }
  if (rc == 0) return true;
  for (commit_op_t *o = batch; o; o = o->next)
    o->ok = resv__file_write_one(o->file, o->ft, o->req, o->now, o->deadline, false, NULL,
                                 o->answer, o->err);
  return false;
}

/* The flush of a batch's commit: a write it fails answers the flush's
 * error instead (its answer is not on the disk). */
static void sync_batch(env_t *e, commit_op_t *batch) {
  int rc = resv__file_sync(e);
  for (commit_op_t *o = batch; rc && o; o = o->next)
    if (o->ok) o->ok = resv__file_lmdb_fail(e, o->err, rc, resv__file_op_name(o->req->op));
}

/* Queues a write for the next shared commit and waits for it: the first
 * waiter to find no commit under way commits everything queued. Once its
 * commit is made, the leader lets the next one begin and flushes its own
 * meanwhile (resv__file_sync), so the commits of two batches overlap
 * their flushes. Each waiter sleeps on its own condition: the leader
 * wakes the writes of its batch once flushed, and the first of those
 * queued meanwhile to lead the next, so a commit wakes no waiter that has
 * nothing to do. */
bool resv__file_write_grouped(file_t *f, resv__file_type_t *ft, const resv_request_t *r,
                          int64_t now, int64_t deadline, resv_answer_t *a,
                          resv_error_t *err) {
  env_t *e = f->env;
  commit_op_t op = {.file = f, .ft = ft, .req = r, .now = now, .answer = a, .err = err,
                .deadline = deadline};
  pthread_cond_init(&op.wake, NULL);
  pthread_mutex_lock(&e->queue_mutex);
  if (e->queue_tail)
    e->queue_tail->next = &op;
  else
    e->queue_head = &op;
  e->queue_tail = &op;
  while (!op.done) {
    if (e->committing || op.taken) { /* taken: in a batch being flushed */
      pthread_cond_wait(&op.wake, &e->queue_mutex);
      continue;
    }
    commit_op_t *batch = e->queue_head;
    e->queue_head = e->queue_tail = NULL;
    for (commit_op_t *o = batch; o; o = o->next) o->taken = true;
    e->committing = true;
    pthread_mutex_unlock(&e->queue_mutex);
    bool flush = run_batch(e, batch);
    pthread_mutex_lock(&e->queue_mutex);
    e->committing = false;
    if (e->queue_head) pthread_cond_signal(&e->queue_head->wake);
    pthread_mutex_unlock(&e->queue_mutex);
    if (flush) sync_batch(e, batch);
    pthread_mutex_lock(&e->queue_mutex);
    for (commit_op_t *o = batch, *next; o; o = next) {
      next = o->next;
      /* o may be gone once the lock is dropped; it cannot go before. */
      o->done = true;
      if (o != &op) pthread_cond_signal(&o->wake);
    }
  }
  pthread_mutex_unlock(&e->queue_mutex);
  pthread_cond_destroy(&op.wake);
  return op.ok;
}
