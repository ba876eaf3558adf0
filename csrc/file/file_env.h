/* file_env.h: what the parts of the file store that run its calls share:
 * the LMDB environment of a directory (env_t), a store's backend (file_t)
 * and the transactions begun on them.
 *
 * file_env.c opens and shares the environments; file_txn.c begins and
 * ends every transaction (the identity checks, the write gate, the
 * reader slots); file_commit.c runs the writes, grouped into one commit
 * for sync = "disk"; file_sweep.c deletes what has expired over a whole
 * type; file_store.c sets the types up and answers the backend's
 * operations. What runs inside a transaction is file_internal.h's. */
#ifndef RESV_FILE_ENV_H
#define RESV_FILE_ENV_H

#include "file_internal.h"
#include "file_check.h"
#include "file_state.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Named databases, besides "resv". LMDB zeroes room for each in every
 * read transaction it begins (about 61 bytes each), so not more. */
#define MAX_TYPES 256
#define MAX_READERS 1024 /* read transactions at once, all processes */
#define IDLE_READERS 8   /* reset read transactions kept for renewal */
#define RECLAIM_STEPS 2  /* records visited per write, on average */
/* A walk runs once every RECLAIM_EVERY writes of a type, visiting
 * RECLAIM_STEPS * RECLAIM_EVERY records: its search for where the last
 * walk stopped costs more than the visits, so fewer walks of more steps
 * visit as many records for less. */
#define RECLAIM_EVERY 4

typedef struct commit_op commit_op_t;

/* One LMDB environment of this process. */
typedef struct env {
  struct env *next; /* the registry */
  dev_t dev;
  ino_t ino;
  pid_t pid;
  int refs; /* guarded by registry_mutex */
  MDB_env *mdb;
  resv__gate_t *gate; /* taken by every writer before LMDB's lock */
  bool disk;
  /* sync = "disk": the errno of a flush that failed, then every write
   * fails with it (what reached the disk is not known); 0 before. */
  _Atomic int sync_failed;
  resv__file_state_t *state; /* resv.state and the checkpoints */
  int64_t map_size;
  size_t limit_pages; /* map_size in pages: where writes that add stop */
  char path[PATH_MAX];
  resv__file_identity_t id; /* the files it has open (file_identity.c) */
  /* Every transaction holds it shared; adopting a map grown by another
   * process (MDB_MAP_RESIZED) needs no transaction open, so it holds it
   * exclusively. */
  pthread_rwlock_t resize;
  pthread_mutex_t setup; /* mdb_dbi_open's transactions, one at a time */
  /* Read-only transactions reset for read_one to renew: each keeps its
   * reader slot, so a renewal takes neither LMDB's reader mutex (shared by
   * every process) nor the calloc of a transaction (room for MAX_TYPES
   * databases). Guarded by idle_mutex. */
  pthread_mutex_t idle_mutex;
  MDB_txn *idle[IDLE_READERS];
  int n_idle;
  _Atomic int64_t reader_check_at;
  /* Group commit (sync = disk): the queued writes and whether a commit is
   * under way. Guarded by queue_mutex. */
  pthread_mutex_t queue_mutex;
  commit_op_t *queue_head, *queue_tail;
  bool committing;
} env_t;

/* A store's backend. */
typedef struct file {
  env_t *env;
  int64_t grace_ms;
  int64_t timeout_ms; /* the store's, for the calls that give none */
  int32_t max_holds;
  bool no_create; /* the option: a type's database is never created */
  resv__stats_t *stats; /* where set-up failures are counted (NULL: nowhere) */
} file_t;

/* A write waiting in the commit queue; lives on its caller's stack. */
struct commit_op {
  commit_op_t *next;
  file_t *file;
  resv__file_type_t *ft;
  const resv_request_t *req;
  int64_t now;
  resv_answer_t *answer;
  resv_error_t *err;
  int64_t deadline;
  pthread_cond_t wake; /* its commit is done, or it is to lead the next */
  bool ok;
  bool taken; /* in a leader's batch */
  bool done;  /* its batch committed and flushed */
};

/* ---- the environment (file_env.c) --------------------------------------- */

/* The environment of the directory at path (st: its stat) for this
 * process: the one already open there, with one more reference, or a new
 * one opened and checked. NULL with err filled when it cannot, or when
 * it is open already with the other sync. */
env_t *resv__file_env_get(const char *path, const struct stat *st, int64_t map_size,
                          bool disk, bool reset, int64_t timeout_ms, resv_error_t *err);
/* Drops a reference; the last one closes the environment. */
void resv__file_env_release(env_t *e);

/* ---- transactions (file_txn.c) ------------------------------------------ */

/* resv__file_begin_write's answer when the write gate was not taken (err
 * says why). */
#define RESV__GATE_REFUSED (-1)

/* Fills err for an LMDB code (or an errno, or a code of
 * file_identity.c's) met while doing what; returns false. */
bool resv__file_lmdb_fail(const env_t *e, resv_error_t *err, int rc, const char *what);
/* resv__file_lmdb_fail for a code of resv__file_begin_write's: err is
 * filled already when the gate was refused. */
bool resv__file_write_fail(const env_t *e, resv_error_t *err, int rc, const char *what);
/* Begins a transaction (flags 0 or MDB_RDONLY) with e->resize held
 * shared; resv__file_end_txn releases it once the transaction is
 * committed or aborted. Returns an LMDB code or one of file_identity.c's. */
int resv__file_begin_txn(env_t *e, unsigned flags, MDB_txn **txn);
void resv__file_end_txn(env_t *e);
/* A write transaction behind the write gate, waited for until deadline
 * (RESV__DEADLINE_NO_WAIT: only tried). checked: the caller's call
 * checked the files a moment ago. Returns RESV__GATE_REFUSED with err
 * filled, or resv__file_begin_txn's code or an errno (the gate held when
 * 0); resv__file_end_write ends what it began. */
int resv__file_begin_write_checked(env_t *e, int64_t deadline, bool checked,
                                   const char *what, resv_error_t *err, MDB_txn **txn);
int resv__file_begin_write(env_t *e, int64_t deadline, const char *what,
                           resv_error_t *err, MDB_txn **txn);
void resv__file_end_write(env_t *e);
/* Ends a write transaction begun by resv__file_begin_write: commits it
 * when rc is 0 and commit (else aborts it), leaves the gate and, with
 * sync = "disk" and sync, flushes the commit (resv__file_sync), holding
 * no lock by then. Returns rc, or the commit's or the flush's code. */
int resv__file_finish_write(env_t *e, MDB_txn *txn, int rc, bool commit, bool sync);
/* sync = "disk": every commit made before the call is on the disk once
 * it returns 0. LMDB commits with MDB_NOMETASYNC, flushing its data pages
 * under its writer's lock and writing its meta page after them; this
 * flush (an fdatasync) takes the meta page to the disk outside every
 * lock, so the next writer, of any process, does not wait for it. A
 * failed flush fails every write of the environment from then on. */
int resv__file_sync(env_t *e);
/* A read-only transaction, renewed from the idle ones when there is one;
 * resv__file_end_read resets it and keeps it. */
int resv__file_begin_read(env_t *e, MDB_txn **txn);
void resv__file_end_read(env_t *e, MDB_txn *txn);
/* Clears the reader slots of dead processes, at most once a second
 * unless now_anyway. Returns how many it cleared. */
int resv__file_check_readers(env_t *e, bool now_anyway);
/* The name of a call's operation, for errors. */
const char *resv__file_op_name(int32_t op);

/* ---- writes (file_commit.c) --------------------------------------------- */

/* One write in its own transaction, with the expired records it passes
 * reclaimed; when the map is full, reclaims and tries once more. plan
 * (or NULL): what the call's read planned, written as it is when the
 * write is on the read's snapshot (resv__file_apply_planned). */
bool resv__file_write_one(file_t *f, resv__file_type_t *ft, const resv_request_t *r,
                          int64_t now, int64_t deadline, bool checked,
                          const resv__file_peek_t *plan, resv_answer_t *a,
                          resv_error_t *err);
/* A write queued for the next shared commit, waited for (sync = "disk"). */
bool resv__file_write_grouped(file_t *f, resv__file_type_t *ft, const resv_request_t *r,
                              int64_t now, int64_t deadline, resv_answer_t *a,
                              resv_error_t *err);

/* ---- reclaiming a whole type (file_sweep.c) ----------------------------- */

/* With the map full: deletes what has expired past the grace in the
 * type, a few records per transaction. */
void resv__file_reclaim_when_full(file_t *f, resv__file_type_t *ft, int64_t now,
                                  int64_t deadline);
/* The sweep operation: every expired reservation of the type deleted,
 * their number answered. */
bool resv__file_sweep(file_t *f, resv__file_type_t *ft, int64_t now, int64_t deadline,
                      resv_answer_t *a, resv_error_t *err);

#endif /* RESV_FILE_ENV_H */
