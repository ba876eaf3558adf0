/* file_txn.c: every transaction of the file store begins and ends here.
 *
 * Every writer takes the write gate before LMDB's writer lock
 * (resv__file_begin_write), so no call waits for another writer past its
 * deadline: a call on the caller's thread from a host that must not block
 * only tries the gate and, finding it taken, answers RESV__EWOULDBLOCK,
 * which hands it to the store's dispatcher; there, and in a caller that
 * may block, the wait for the gate ends at the call's deadline (timeout).
 *
 * At the start of every transaction, file_identity.c checks that the
 * files are still the ones behind the path, and whole. A reader slot left
 * by a dead process pins old pages: resv__file_check_readers clears such
 * slots, at most once a second on writes and on reads that find the
 * reader table full, and when the map is full.
 *
 * It must not read or write a record: what runs inside a transaction is
 * file_ops.c's and its neighbours'. */
#include "file_env.h"

#include <errno.h>

#define READER_CHECK_MS 1000

/* ---- errors ----------------------------------------------------------- */

bool resv__file_lmdb_fail(const env_t *e, resv_error_t *err, int rc, const char *what) {
  switch (rc) {
  case MDB_MAP_FULL:
    return resv__fail(err, RESV_ENOMEM,
                      "%s: the file store's map is full (map_size = %lld bytes, "
                      "after reclaiming expired reservations): open it with a "
                      "larger map_size", what, (long long)e->map_size);
  case MDB_DBS_FULL:
    return resv__fail(err, RESV_ENOMEM, "%s: the file store holds at most %d types",
                      what, MAX_TYPES);
  case MDB_READERS_FULL:
    return resv__fail(err, RESV_EBUSY, "%s: more than %d reads at once", what, MAX_READERS);
  case MDB_TXN_FULL:
  case ENOMEM:
    return resv__fail(err, RESV_ENOMEM, "%s: out of memory", what);
  case ENOSPC:
    return resv__fail(err, RESV_ENOMEM, "%s: no space left on the disk of %s", what, e->path);
  case MDB_INCOMPATIBLE:
  case MDB_CORRUPTED:
  case MDB_PAGE_NOTFOUND:
  case MDB_INVALID:
  case MDB_VERSION_MISMATCH:
    return resv__fail(err, RESV_EFORMAT, "%s: %s: %s", what, e->path, mdb_strerror(rc));
  case RESV__FILE_GONE:
  case RESV__FILE_SHORT:
    return resv__file_identity_fail(&e->id, rc, what, err);
  case EIO:
    return resv__fail(err, RESV_EUNAVAILABLE,
                      "%s: %s: the disk failed to flush a commit (%s): the writes since "
                      "the last flush may be lost; open the store again", what, e->path,
                      mdb_strerror(rc));
  case EACCES:
  case EPERM:
  case EROFS:
    return resv__file_fail_access(err, rc, what, e->path, "");
  default:
    return resv__fail(err, RESV_EUNAVAILABLE, "%s: %s: %s", what, e->path, mdb_strerror(rc));
  }
}

/* ---- transactions ------------------------------------------------------- */

/* Whether this thread's open transaction is a write one (a write
 * transaction begins no other before it ends), for resv__file_end_txn. */
static _Thread_local bool in_write;

/* resv__file_begin_txn; checked: the caller's call checked the files a moment ago
 * (its read transaction), and nothing waited since. */
static int open_txn(env_t *e, unsigned flags, bool checked, MDB_txn **txn) {
  for (;;) {
    pthread_rwlock_rdlock(&e->resize);
    /* The files are still the store's, and whole (file_identity.c):
     * before LMDB reads the meta, and for a write once it holds the
     * writer's lock, with the paths. */
    int rc = checked ? 0 : resv__file_identity_check(&e->id, e->mdb, false);
    checked = false; /* a map to adopt: checked again */
    if (rc == 0 && (rc = mdb_txn_begin(e->mdb, NULL, flags, txn)) == 0) {
      if (flags || !(rc = resv__file_identity_paths(&e->id))) {
        in_write = !flags;
        return 0;
      }
      mdb_txn_abort(*txn);
    }
    pthread_rwlock_unlock(&e->resize);
    /* A full reader table may be full of dead processes' slots (a process
     * that only reads would never clear them otherwise). */
    if (rc == MDB_READERS_FULL && resv__file_check_readers(e, false) > 0) continue;
    if (rc != MDB_MAP_RESIZED) return rc;
    /* Another process grew the map: adopt its size, with no transaction
     * of this process open. */
    pthread_rwlock_wrlock(&e->resize);
    rc = mdb_env_set_mapsize(e->mdb, 0);
    pthread_rwlock_unlock(&e->resize);
    if (rc) return rc;
  }
}

int resv__file_begin_txn(env_t *e, unsigned flags, MDB_txn **txn) {
  return open_txn(e, flags, false, txn);
}

void resv__file_end_txn(env_t *e) {
  if (in_write) { /* LMDB may leave its last pages unwritten (file_identity.c) */
    in_write = false;
    resv__file_identity_grow(&e->id, e->mdb);
  }
  pthread_rwlock_unlock(&e->resize);
}

/* resv__file_begin_write's answer when the write gate was not taken (err says why). */
#define RESV__GATE_REFUSED (-1)

/* Begins a write transaction behind the write gate (file_gate.c), which
 * it waits for until deadline; with RESV__DEADLINE_NO_WAIT it only tries,
 * and answers RESV__EWOULDBLOCK when the gate is taken, or when the
 * state file is to be marked dirty (an fsync). Then (sync = "process")
 * data.mdb has room on the disk and the state file says dirty before
 * anything is written (file_state.c). Returns RESV__GATE_REFUSED with
 * err filled, or resv__file_begin_txn's code or an errno (the gate held when 0);
 * resv__file_end_write ends what it began. */
int resv__file_begin_write_checked(env_t *e, int64_t deadline, bool checked, const char *what,
                               resv_error_t *err, MDB_txn **txn) {
  int failed = atomic_load_explicit(&e->sync_failed, memory_order_acquire);
  if (failed) return failed;
  if (!resv__gate_try(e->gate)) {
    if (deadline == RESV__DEADLINE_NO_WAIT) {
      resv__fail(err, RESV__EWOULDBLOCK, "%s: another writer holds the gate", what);
      return RESV__GATE_REFUSED;
    }
    if (!resv__gate_enter(e->gate, deadline, what, err)) return RESV__GATE_REFUSED;
    checked = false; /* it waited: anything may have happened meanwhile */
  }
  int rc = open_txn(e, 0, checked, txn);
  if (rc) goto leave_gate;
  if (deadline == RESV__DEADLINE_NO_WAIT && !resv__file_state_marked(e->state)) {
    /* Marking the state dirty syncs a file: not on a host's thread. */
    resv__fail(err, RESV__EWOULDBLOCK, "%s: the state file is to be marked dirty", what);
    rc = RESV__GATE_REFUSED;
    goto end_txn;
  }
  if ((rc = resv__file_state_room(e->state)) != 0 ||
      (rc = resv__file_state_dirty(e->state)) != 0)
    goto end_txn;
  resv__file_state_wrote(e->state);
  return 0;
end_txn:
  mdb_txn_abort(*txn);
  resv__file_end_txn(e);
leave_gate:
  resv__gate_leave(e->gate);
  return rc;
}

int resv__file_begin_write(env_t *e, int64_t deadline, const char *what, resv_error_t *err,
                       MDB_txn **txn) {
  return resv__file_begin_write_checked(e, deadline, false, what, err, txn);
}

void resv__file_end_write(env_t *e) {
  resv__file_end_txn(e);
  resv__gate_leave(e->gate);
}

/* A flush failed (rc): every write fails from now on. Linux reports a
 * failed writeback to one flush of a file descriptor and may drop the
 * pages, so a flush after it can succeed with them lost: the first
 * failure is the one every write answers. */
static int flush_failed(env_t *e, int rc) {
  int none = 0;
  atomic_compare_exchange_strong(&e->sync_failed, &none, rc);
  return rc;
}

int resv__file_sync(env_t *e) {
  int rc = atomic_load_explicit(&e->sync_failed, memory_order_acquire);
  if (rc == 0 && (rc = mdb_env_sync(e->mdb, 1)) != 0) flush_failed(e, rc);
  return rc;
}

int resv__file_finish_write(env_t *e, MDB_txn *txn, int rc, bool commit, bool sync) {
  bool committing = rc == 0 && commit;
  if (committing)
    rc = mdb_txn_commit(txn); /* with sync = "disk", flushes the data pages */
  else
    mdb_txn_abort(txn);
  resv__file_end_write(e);
  if (committing && rc == EIO) return flush_failed(e, rc);
  if (committing && rc == 0 && sync && e->disk) rc = resv__file_sync(e);
  return rc;
}

/* resv__file_lmdb_fail for a code of resv__file_begin_write's: err is filled already when the
 * gate was refused. */
bool resv__file_write_fail(const env_t *e, resv_error_t *err, int rc, const char *what) {
  return rc == RESV__GATE_REFUSED ? false : resv__file_lmdb_fail(e, err, rc, what);
}

/* A read-only transaction, renewed from the idle ones when there is one
 * (else begun); resv__file_end_read resets it and keeps it, up to IDLE_READERS. A
 * renewal that fails (the map grew in another process, say) falls back to
 * resv__file_begin_txn, which copes. */
int resv__file_begin_read(env_t *e, MDB_txn **txn) {
  pthread_rwlock_rdlock(&e->resize);
  pthread_mutex_lock(&e->idle_mutex);
  MDB_txn *t = e->n_idle ? e->idle[--e->n_idle] : NULL;
  pthread_mutex_unlock(&e->idle_mutex);
  int rc = 0;
  if (t) {
    rc = resv__file_identity_check(&e->id, e->mdb, false);
    if (rc == 0 && !(rc = mdb_txn_renew(t))) {
      *txn = t;
      return 0; /* e->resize stays held, until resv__file_end_read */
    }
    mdb_txn_abort(t);
  }
  pthread_rwlock_unlock(&e->resize);
  if (rc == RESV__FILE_GONE || rc == RESV__FILE_SHORT) return rc;
  return resv__file_begin_txn(e, MDB_RDONLY, txn);
}

void resv__file_end_read(env_t *e, MDB_txn *txn) {
  mdb_txn_reset(txn);
  pthread_mutex_lock(&e->idle_mutex);
  if (e->n_idle < IDLE_READERS) {
    e->idle[e->n_idle++] = txn;
    txn = NULL;
  }
  pthread_mutex_unlock(&e->idle_mutex);
  if (txn) mdb_txn_abort(txn);
  resv__file_end_txn(e);
}

/* Clears the reader slots of dead processes, at most once a second.
 * Returns how many it cleared. */
int resv__file_check_readers(env_t *e, bool now_anyway) {
  int64_t now = resv__coarse_ms();
  int64_t at = atomic_load_explicit(&e->reader_check_at, memory_order_relaxed);
  if (!now_anyway && (now < at || !atomic_compare_exchange_strong(
                                      &e->reader_check_at, &at, now + READER_CHECK_MS)))
    return 0;
  int dead = 0;
  mdb_reader_check(e->mdb, &dead);
  return dead;
}

const char *resv__file_op_name(int32_t op) {
  switch (op) {
  case RESV_OP_RESERVE: return "reserve";
  case RESV_OP_CONFIRM: return "confirm";
  case RESV_OP_ABANDON: return "abandon";
  case RESV_OP_RELEASE: return "release";
  case RESV_OP_RESERVE_ALL: return "reserve_all";
  case RESV_OP_CONFIRM_ALL: return "confirm_all";
  case RESV_OP_ABANDON_ALL: return "abandon_all";
  default: return "get";
  }
}
