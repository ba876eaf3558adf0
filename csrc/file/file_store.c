/* file_store.c: the file store, one LMDB environment shared by every
 * process that opens the same directory (docs/design.md section 6).
 *
 * A directory holds LMDB's data.mdb and lock.mdb, the state file
 * resv.state (file_state.c), the write gate resv.gate (file_gate.c) and
 * nothing else. Its
 * main database lists one named database per aggregate type, named as the
 * type's MongoDB collection (file_ops.c says what is inside), and one
 * named "resv" whose "format" record marks the directory as a resv store
 * of format 2 (a store of format 1 is upgraded at open): a directory with other files, an LMDB database without
 * that record or a record of another format is refused at open, before
 * anything is written.
 *
 * How a call runs, and why:
 * - sync = "disk" (the default) commits with fsync, which costs a disk
 *   flush (hundreds of microseconds to milliseconds), so an answered
 *   write survives a crash of the OS. These calls run on the dispatcher,
 *   and concurrent writes of the process share a commit (group commit):
 *   the first writer to find no commit in progress takes every queued
 *   write into one transaction, commits it with one fsync and answers
 *   them all; writes queued meanwhile go into the next one.
 * - sync = "process" commits without fsync (MDB_NOSYNC), writing its
 *   pages through a writable map (MDB_WRITEMAP: no copy of each page
 *   into a buffer and out with pwrite, so a write of a new key costs
 *   less): a commit is in the OS's page cache when the call answers, so
 *   the crash of any process loses nothing answered. The OS writes the
 *   pages back in any order, so a crash of the OS may damage the file:
 *   file_state.c records checkpoints in resv.state, and a store that may
 *   be damaged is refused at open. (With MDB_WRITEMAP LMDB sizes data.mdb
 *   to the whole map, a sparse file. Processes of both modes may share a
 *   store: on Linux fdatasync and msync both flush the file's page cache,
 *   whichever way its pages were written.) A write transaction is a few
 *   microseconds, less than a hop to a dispatcher thread and back, so
 *   these calls run inline on the caller's thread, as the memory store's
 *   do.
 * - Reads (get) use a read-only transaction: they never wait for a writer,
 *   and keep working when the map is full.
 *
 * Every writer takes the write gate before LMDB's writer lock
 * (begin_write), so no call waits for another writer past its deadline:
 * a call on the caller's thread from a host that must not block only
 * tries the gate and, finding it taken, answers RESV__EWOULDBLOCK, which
 * hands it to the store's dispatcher; there, and in a caller that may
 * block, the wait for the gate ends at the call's deadline (timeout).
 * Opening an existing store only reads, so it waits for no writer either.
 *
 * A process killed at any instant: LMDB's writer lock is a robust
 * process-shared mutex, so the next writer takes it over and the dead
 * writer's uncommitted transaction is simply not there (nothing it had
 * answered was uncommitted). A reader slot left by a dead process pins old
 * pages: mdb_reader_check clears such slots at open, at most once a second
 * on writes and on reads that find the reader table full, and when the
 * map is full.
 *
 * Before LMDB opens a directory, file_check.c checks data.mdb's meta pages
 * against its size and that the files can be opened as the process's
 * user; at the start of every transaction, file_identity.c checks that
 * they are still the ones behind the path, and whole (begin_txn).
 *
 * LMDB forbids opening one environment twice in a process (closing either
 * would drop the other's locks), so stores of one process on one directory
 * share it through a registry counted by reference; a child after fork()
 * never uses its parent's (store.c answers closed, and a store the child
 * opens gets its own environment). */
#include "file.h"
#include "file_internal.h"
#include "file_check.h"
#include "file_state.h"

#include <bson/bson.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_MAP_SIZE (INT64_C(1) << 30)
#define MIN_MAP_SIZE (INT64_C(1) << 20)
#define MAX_MAP_SIZE (INT64_C(1) << 44)
#define DEFAULT_GRACE_MS 60000
#define MAX_GRACE_MS (INT64_C(1) << 53)
/* Named databases, besides "resv". LMDB zeroes room for each in every
 * read transaction it begins (about 61 bytes each), so not more. */
#define MAX_TYPES 256
#define MAX_READERS 1024 /* read transactions at once, all processes */
#define IDLE_READERS 8   /* reset read transactions kept for renewal */
#define RECLAIM_STEPS 2  /* records visited per write */
#define RECLAIM_CHUNK 32  /* records visited per transaction when full: few
                           * pages each, freed for the next one */
#define SWEEP_CHUNK 1024 /* records visited per transaction by sweep */
#define RECLAIM_WHEN_FULL 1000000   /* at most, when the map is full */
#define READER_CHECK_MS 1000
/* The longest path of a store: room is left for the names of its files. */
#define PATH_ROOM (PATH_MAX - 16)
/* Past map_size, a write that can add data finds room only in pages
 * freed before: with fewer than this many it is refused as full. */
#define FREE_PAGES_ENOUGH 64

/* The store's format: 2, records of file_record.h; 1, BSON documents,
 * upgraded at open (file_upgrade.c). */
#define STORE_FORMAT 2

static const char marker_name[] = "resv";
static const unsigned char marker_key[] = "format";

typedef struct gc_op gc_op_t;

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
   * under way. Guarded by gc_mutex. */
  pthread_mutex_t gc_mutex;
  gc_op_t *gc_head, *gc_tail;
  bool gc_busy;
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

/* A write waiting for its group commit; lives on its caller's stack. */
struct gc_op {
  gc_op_t *next;
  file_t *file;
  resv__file_type_t *ft;
  const resv_request_t *req;
  int64_t now;
  resv_answer_t *answer;
  resv_error_t *err;
  int64_t deadline;
  pthread_cond_t wake; /* its commit is done, or it is to lead the next */
  bool ok;
  bool done;
};

static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static env_t *registry;
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

/* A fork() while another thread opens or closes a store must not leave
 * the child's registry locked. */
static void registry_lock(void) { pthread_mutex_lock(&registry_mutex); }
static void registry_unlock(void) { pthread_mutex_unlock(&registry_mutex); }
static void registry_atfork(void) {
  pthread_atfork(registry_lock, registry_unlock, registry_unlock);
}

/* ---- errors ----------------------------------------------------------- */

static bool lmdb_fail(const env_t *e, resv_error_t *err, int rc, const char *what) {
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
 * transaction begins no other before it ends), for end_txn. */
static _Thread_local bool in_write;

/* Begins a transaction (flags 0 or MDB_RDONLY) with e->resize held
 * shared; end_txn releases it once the transaction is committed or
 * aborted. */
static int check_readers(env_t *e, bool now_anyway);

/* begin_txn; checked: the caller's call checked the files a moment ago
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
    if (rc == MDB_READERS_FULL && check_readers(e, false) > 0) continue;
    if (rc != MDB_MAP_RESIZED) return rc;
    /* Another process grew the map: adopt its size, with no transaction
     * of this process open. */
    pthread_rwlock_wrlock(&e->resize);
    rc = mdb_env_set_mapsize(e->mdb, 0);
    pthread_rwlock_unlock(&e->resize);
    if (rc) return rc;
  }
}

static int begin_txn(env_t *e, unsigned flags, MDB_txn **txn) {
  return open_txn(e, flags, false, txn);
}

static void end_txn(env_t *e) {
  if (in_write) { /* LMDB may leave its last pages unwritten (file_identity.c) */
    in_write = false;
    resv__file_identity_grow(&e->id, e->mdb);
  }
  pthread_rwlock_unlock(&e->resize);
}

/* begin_write's answer when the write gate was not taken (err says why). */
#define GATE_REFUSED (-1)

/* Begins a write transaction behind the write gate (file_gate.c), which
 * it waits for until deadline; with RESV__DEADLINE_NO_WAIT it only tries,
 * and answers RESV__EWOULDBLOCK when the gate is taken, or when the
 * state file is to be marked dirty (an fsync). Then (sync = "process")
 * data.mdb has room on the disk and the state file says dirty before
 * anything is written (file_state.c). Returns GATE_REFUSED with
 * err filled, or begin_txn's code or an errno (the gate held when 0);
 * end_write ends what it began. */
static int begin_write_checked(env_t *e, int64_t deadline, bool checked, const char *what,
                               resv_error_t *err, MDB_txn **txn) {
  if (!resv__gate_try(e->gate)) {
    if (deadline == RESV__DEADLINE_NO_WAIT) {
      resv__fail(err, RESV__EWOULDBLOCK, "%s: another writer holds the gate", what);
      return GATE_REFUSED;
    }
    if (!resv__gate_enter(e->gate, deadline, what, err)) return GATE_REFUSED;
    checked = false; /* it waited: anything may have happened meanwhile */
  }
  int rc = open_txn(e, 0, checked, txn);
  if (rc == 0 && deadline == RESV__DEADLINE_NO_WAIT && !resv__file_state_marked(e->state)) {
    /* Marking the state dirty syncs a file: not on a host's thread. */
    mdb_txn_abort(*txn);
    end_txn(e);
    resv__gate_leave(e->gate);
    resv__fail(err, RESV__EWOULDBLOCK, "%s: the state file is to be marked dirty", what);
    return GATE_REFUSED;
  }
  if (rc == 0 && ((rc = resv__file_state_room(e->state)) != 0 ||
                  (rc = resv__file_state_dirty(e->state)) != 0)) {
    mdb_txn_abort(*txn);
    end_txn(e);
  }
  if (rc) {
    resv__gate_leave(e->gate);
    return rc;
  }
  resv__file_state_wrote(e->state);
  return 0;
}

static int begin_write(env_t *e, int64_t deadline, const char *what, resv_error_t *err,
                       MDB_txn **txn) {
  return begin_write_checked(e, deadline, false, what, err, txn);
}

static void end_write(env_t *e) {
  end_txn(e);
  resv__gate_leave(e->gate);
}

/* lmdb_fail for a code of begin_write's: err is filled already when the
 * gate was refused. */
static bool write_fail(const env_t *e, resv_error_t *err, int rc, const char *what) {
  return rc == GATE_REFUSED ? false : lmdb_fail(e, err, rc, what);
}

/* A read-only transaction, renewed from the idle ones when there is one
 * (else begun); end_read resets it and keeps it, up to IDLE_READERS. A
 * renewal that fails (the map grew in another process, say) falls back to
 * begin_txn, which copes. */
static int begin_read(env_t *e, MDB_txn **txn) {
  pthread_rwlock_rdlock(&e->resize);
  pthread_mutex_lock(&e->idle_mutex);
  MDB_txn *t = e->n_idle ? e->idle[--e->n_idle] : NULL;
  pthread_mutex_unlock(&e->idle_mutex);
  if (t) {
    int rc = resv__file_identity_check(&e->id, e->mdb, false);
    if (rc == 0 && !(rc = mdb_txn_renew(t))) {
      *txn = t;
      return 0;
    }
    mdb_txn_abort(t);
    if (rc == RESV__FILE_GONE || rc == RESV__FILE_SHORT) {
      pthread_rwlock_unlock(&e->resize);
      return rc;
    }
  }
  pthread_rwlock_unlock(&e->resize);
  return begin_txn(e, MDB_RDONLY, txn);
}

static void end_read(env_t *e, MDB_txn *txn) {
  mdb_txn_reset(txn);
  pthread_mutex_lock(&e->idle_mutex);
  if (e->n_idle < IDLE_READERS) {
    e->idle[e->n_idle++] = txn;
    txn = NULL;
  }
  pthread_mutex_unlock(&e->idle_mutex);
  if (txn) mdb_txn_abort(txn);
  end_txn(e);
}

/* Clears the reader slots of dead processes, at most once a second.
 * Returns how many it cleared. */
static int check_readers(env_t *e, bool now_anyway) {
  int64_t now = resv__monotonic_ms();
  int64_t at = atomic_load_explicit(&e->reader_check_at, memory_order_relaxed);
  if (!now_anyway && (now < at || !atomic_compare_exchange_strong(
                                      &e->reader_check_at, &at, now + READER_CHECK_MS)))
    return 0;
  int dead = 0;
  mdb_reader_check(e->mdb, &dead);
  return dead;
}

/* ---- the directory and the environment --------------------------------- */

/* Makes the directory when it is missing and refuses one holding anything
 * but LMDB's two files and the state file (file_state.c). */
static bool check_directory(const char *path, struct stat *st, resv_error_t *err) {
  if (mkdir(path, 0777) != 0 && errno != EEXIST) /* the umask says who may enter */
    return errno == EACCES || errno == EPERM || errno == EROFS
               ? resv__file_fail_access(err, errno, "make the directory", path, "")
               : resv__fail(err, RESV_EINVALID, "path: cannot make the directory %s: %s",
                            path, strerror(errno));
  if (stat(path, st) != 0)
    return resv__fail(err, RESV_EINVALID, "path: %s: %s", path, strerror(errno));
  if (!S_ISDIR(st->st_mode))
    return resv__fail(err, RESV_EINVALID, "path: %s is not a directory", path);
  DIR *dir = opendir(path);
  if (!dir) return resv__file_fail_access(err, errno, "read the directory", path, "");
  bool ok = true;
  struct dirent *de;
  while (ok && (de = readdir(dir))) {
    const char *n = de->d_name;
    if (strcmp(n, ".") && strcmp(n, "..") && strcmp(n, "data.mdb") && strcmp(n, "lock.mdb") &&
        strcmp(n, "resv.state") && strcmp(n, "resv.state.tmp") && strcmp(n, RESV__GATE_FILE))
      ok = resv__fail(err, RESV_EFORMAT,
                      "path: %s is not a resv store: it holds %s (a resv store "
                      "holds only LMDB's data.mdb and lock.mdb, resv.state and "
                      RESV__GATE_FILE ")", path, n);
  }
  closedir(dir);
  return ok;
}

/* A store of format 1 (BSON records): its records rewritten and the
 * store marked 2, in txn (begun by begin_write), committed (or not at
 * all); ends txn with end_write. */
static bool upgrade_store(env_t *e, MDB_txn *txn, MDB_dbi marker, resv_error_t *err) {
  MDB_val key = {sizeof marker_key - 1, (void *)marker_key};
  bson_t b = BSON_INITIALIZER;
  BSON_APPEND_INT32(&b, "format", STORE_FORMAT);
  MDB_val val = {b.len, (void *)bson_get_data(&b)};
  int rc = resv__file_upgrade(txn);
  if (rc == 0 && (rc = mdb_put(txn, marker, &key, &val, 0)) == 0)
    rc = mdb_txn_commit(txn);
  else
    mdb_txn_abort(txn);
  bson_destroy(&b);
  end_write(e);
  return rc ? lmdb_fail(e, err, rc, "open: upgrade the store from format 1") : true;
}

/* Checks the "resv" database's format record, or writes it into an empty
 * environment (and upgrades a store of format 1). Without write it reads
 * only (a store opens without waiting for its writers) and sets
 * *unmarked when the environment is empty or of format 1: then it is to
 * run again with write, behind the gate. */
static bool check_marker(env_t *e, bool write, int64_t deadline, resv_error_t *err,
                         bool *unmarked) {
  MDB_txn *txn;
  MDB_dbi main_dbi, marker;
  MDB_stat st;
  bool ok = true;
  int rc = write ? begin_write(e, deadline, "open", err, &txn)
                 : begin_txn(e, MDB_RDONLY, &txn);
  if (rc) return write_fail(e, err, rc, "open");
  rc = mdb_dbi_open(txn, marker_name, 0, &marker);
  if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE) {
    if (rc == MDB_NOTFOUND && (rc = mdb_dbi_open(txn, NULL, 0, &main_dbi)) == 0 &&
        (rc = mdb_stat(txn, main_dbi, &st)) == 0 && st.ms_entries == 0) {
      if (!write) {
        mdb_txn_abort(txn);
        end_txn(e);
        *unmarked = true;
        return true;
      }
      /* A new store: mark it. */
      MDB_val key = {sizeof marker_key - 1, (void *)marker_key};
      bson_t b = BSON_INITIALIZER;
      BSON_APPEND_INT32(&b, "format", STORE_FORMAT);
      MDB_val val = {b.len, (void *)bson_get_data(&b)};
      if ((rc = mdb_dbi_open(txn, marker_name, MDB_CREATE, &marker)) == 0 &&
          (rc = mdb_put(txn, marker, &key, &val, 0)) == 0)
        rc = mdb_txn_commit(txn);
      else
        mdb_txn_abort(txn);
      bson_destroy(&b);
      end_write(e);
      return rc ? lmdb_fail(e, err, rc, "open") : true;
    }
    if (rc == 0 || rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE) {
      ok = resv__fail(err, RESV_EFORMAT,
                      "path: %s holds an LMDB database that is not a resv store "
                      "(it has no resv format record); nothing was written", e->path);
      rc = 0;
    }
  } else if (rc == 0) {
    MDB_val key = {sizeof marker_key - 1, (void *)marker_key}, val;
    bson_t b;
    bson_iter_t it;
    rc = mdb_get(txn, marker, &key, &val);
    if (rc == 0 && (!bson_init_static(&b, val.mv_data, val.mv_size) ||
                    !bson_iter_init_find(&it, &b, "format") ||
                    !BSON_ITER_HOLDS_NUMBER(&it)))
      ok = resv__fail(err, RESV_EFORMAT,
                      "path: %s has a resv format record without a numeric format",
                      e->path);
    else if (rc == 0 && bson_iter_as_double(&it) == 1 && !write) {
      mdb_txn_abort(txn); /* the upgrade writes: again, behind the gate */
      end_txn(e);
      *unmarked = true;
      return true;
    } else if (rc == 0 && bson_iter_as_double(&it) == 1)
      return upgrade_store(e, txn, marker, err);
    else if (rc == 0 && bson_iter_as_double(&it) != STORE_FORMAT)
      ok = resv__fail(err, RESV_EFORMAT,
                      "path: %s holds a resv file store of format %g, this store "
                      "reads formats 1 and 2; nothing was written",
                      e->path, bson_iter_as_double(&it));
    else if (rc == MDB_NOTFOUND)
      ok = resv__fail(err, RESV_EFORMAT, "path: %s has no resv format record", e->path),
      rc = 0;
  }
  mdb_txn_abort(txn);
  if (write)
    end_write(e);
  else
    end_txn(e);
  return rc ? lmdb_fail(e, err, rc, "open") : ok;
}

/* LMDB copies every page it changes, deletions too: a map filled to the
 * last page could not even delete what has expired. So LMDB's map is
 * map_size and this much more, and writes that can add data stop at
 * map_size (over_limit): the rest is room for the deletions that make
 * room again. */
static int64_t slack_of(int64_t map_size) {
  int64_t slack = map_size / 16;
  return slack < (INT64_C(256) << 10) ? INT64_C(256) << 10 : slack;
}

static void env_free(env_t *e) {
  for (int i = 0; i < e->n_idle; i++) mdb_txn_abort(e->idle[i]); /* frees the slots */
  resv__file_state_close(e->state); /* checkpoints: before LMDB closes */
  if (e->mdb) mdb_env_close(e->mdb);
  resv__file_identity_close(&e->id);
  resv__gate_close(e->gate);
  pthread_rwlock_destroy(&e->resize);
  pthread_mutex_destroy(&e->setup);
  pthread_mutex_destroy(&e->idle_mutex);
  pthread_mutex_destroy(&e->gc_mutex);
  free(e);
}

static env_t *env_new(const char *path, const struct stat *st, int64_t map_size,
                      bool disk, bool reset, int64_t timeout_ms, resv_error_t *err) {
  env_t *e = calloc(1, sizeof *e);
  if (!e) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a file store");
    return NULL;
  }
  e->dev = st->st_dev;
  e->ino = st->st_ino;
  e->pid = getpid();
  e->refs = 1;
  e->disk = disk;
  e->map_size = map_size;
  snprintf(e->path, sizeof e->path, "%s", path);
  pthread_rwlock_init(&e->resize, NULL);
  pthread_mutex_init(&e->setup, NULL);
  pthread_mutex_init(&e->idle_mutex, NULL);
  pthread_mutex_init(&e->gc_mutex, NULL);
  atomic_init(&e->reader_check_at, 0);
  /* The state file first: nothing may read data.mdb that resv.state says
   * an OS crash may have damaged. */
  if (!(e->state = resv__file_state_open(path, disk, reset, err)) ||
      !resv__file_check(path, err) || /* file_check.c */
      !(e->gate = resv__gate_open(path, err))) {
    env_free(e);
    return NULL;
  }
  int rc = mdb_env_create(&e->mdb);
  if (rc) {
    e->mdb = NULL;
  } else if (!(rc = mdb_env_set_maxdbs(e->mdb, MAX_TYPES + 1)) &&
             !(rc = mdb_env_set_maxreaders(e->mdb, MAX_READERS)) &&
             !(rc = mdb_env_set_mapsize(e->mdb, (size_t)(map_size + slack_of(map_size))))) {
    rc = mdb_env_open(e->mdb, path, MDB_NOTLS | (disk ? 0 : MDB_NOSYNC | MDB_WRITEMAP), 0666);
    if (rc == 0) rc = resv__file_identity_init(&e->id, e->mdb, path, !disk);
  }
  if (rc) {
    if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH)
      resv__fail(err, RESV_EFORMAT, "path: %s is not a resv store: %s", path,
                 mdb_strerror(rc));
    else
      lmdb_fail(e, err, rc, "open");
    env_free(e);
    return NULL;
  }
  MDB_stat est;
  mdb_env_stat(e->mdb, &est);
  e->limit_pages = (size_t)map_size / est.ms_psize;
  check_readers(e, true);
  bool unmarked = false;
  int64_t deadline = resv__add_ms_sat(resv__monotonic_ms(), timeout_ms);
  if (!check_marker(e, false, deadline, err, &unmarked) ||
      (unmarked && !check_marker(e, true, deadline, err, &unmarked)) ||
      !resv__file_state_start(e->state, e->mdb, &e->resize, e->gate, deadline, err)) {
    env_free(e);
    return NULL;
  }
  return e;
}

static void env_release(env_t *e) {
  registry_lock();
  bool last = --e->refs == 0;
  if (last) {
    env_t **p = &registry;
    while (*p != e) p = &(*p)->next;
    *p = e->next;
  }
  registry_unlock();
  if (last) env_free(e);
}

/* ---- types -------------------------------------------------------------- */

static bool file_type_init(void *backend, resv_type_t *type, resv_error_t *err) {
  resv__file_type_t *ft = calloc(1, sizeof *ft);
  if (!ft) return resv__fail(err, RESV_ENOMEM, "out of memory for a type");
  atomic_init(&ft->ready, false);
  ft->collection = type->collection;
  type->backend_state = ft;
  return true;
}

static void file_type_free(void *backend, resv_type_t *type) {
  free(type->backend_state);
  type->backend_state = NULL;
}

/* The type's database opened and its format record checked (flags 0)
 * in a write transaction that creates them when missing, or (MDB_RDONLY)
 * in a read-only one, which answers MDB_NOTFOUND or EACCES when there is
 * something to create. A write waits for the write gate until deadline
 * (GATE_REFUSED, err filled, past it). */
static int set_up_type(env_t *e, resv_type_t *type, unsigned flags, int64_t deadline,
                       MDB_dbi *dbi, resv_error_t *err, bool *ok) {
  MDB_txn *txn;
  int rc = flags ? begin_txn(e, flags, &txn)
                 : begin_write(e, deadline, "set up the type", err, &txn);
  if (rc) return rc;
  rc = mdb_dbi_open(txn, type->collection, flags ? 0 : MDB_CREATE, dbi);
  if (rc == 0) rc = resv__file_format(txn, *dbi, type->collection, err, ok);
  if (rc == 0 && *ok)
    rc = mdb_txn_commit(txn); /* a read-only one keeps the handle too */
  else
    mdb_txn_abort(txn);
  if (flags)
    end_txn(e);
  else
    end_write(e);
  return rc;
}

/* Opens (creating it on first use, unless no_create) the type's database
 * and checks its format record, once per store and type; a failure is
 * tried again on the next call. A type that is there already is set up
 * without a write (with sync = "process" a write would make the state file dirty). */
static bool type_ready(file_t *f, resv_type_t *type, int64_t deadline, resv_error_t *err) {
  resv__file_type_t *ft = type->backend_state;
  if (atomic_load_explicit(&ft->ready, memory_order_acquire)) return true;
  env_t *e = f->env;
  bool ok = true;
  if (deadline != RESV__DEADLINE_NO_WAIT)
    pthread_mutex_lock(&e->setup);
  else if (pthread_mutex_trylock(&e->setup) != 0) /* a set-up waits for the gate */
    return resv__fail(err, RESV__EWOULDBLOCK, "set up the type: another one is under way");
  if (!atomic_load_explicit(&ft->ready, memory_order_acquire)) {
    MDB_dbi dbi = 0;
    int rc = set_up_type(e, type, MDB_RDONLY, deadline, &dbi, err, &ok);
    if (rc == EACCES || (rc == MDB_NOTFOUND && !f->no_create))
      rc = set_up_type(e, type, 0, deadline, &dbi, err, &ok);
    if (rc == GATE_REFUSED)
      ok = false;
    else if (rc == MDB_INCOMPATIBLE)
      ok = resv__fail(err, RESV_EFORMAT, "%s: %s is not a type's database", e->path,
                      type->collection);
    else if (rc == MDB_NOTFOUND)
      ok = resv__fail(err, RESV_EINVALID,
                      "no type %s/%s in the file store %s (no database %s); "
                      "nothing was created", type->context, type->aggregate,
                      e->path, type->collection);
    else if (rc)
      ok = lmdb_fail(e, err, rc, "set up the type");
    if (ok) {
      ft->dbi = dbi;
      atomic_store_explicit(&ft->ready, true, memory_order_release);
    } else if (err && err->code != RESV__EWOULDBLOCK) {
      resv__stats_count(f->stats, RESV__STAT_SETUP_FAILURE);
    }
  }
  pthread_mutex_unlock(&e->setup);
  return ok;
}

/* ---- calls -------------------------------------------------------------- */

static const char *op_name(int32_t op) {
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

/* Runs r in a read-only transaction: a get, or a write that may turn out
 * to change nothing (a conflict, the owner's confirmed reservation, an
 * abandon or a release of nothing, a record that is not a reservation):
 * those answer from the snapshot, a consistent state no later than the
 * call, without the writer's lock or a commit. *write_needed (NULL for a
 * get) tells when the write must run in a write transaction after all. */
static bool read_one(file_t *f, resv__file_type_t *ft, const resv_request_t *r,
                     int64_t now, resv_answer_t *a, resv_error_t *err,
                     bool *write_needed) {
  MDB_txn *txn;
  bool ok = false;
  int rc = begin_read(f->env, &txn);
  if (rc == 0) {
    rc = resv__file_apply(txn, ft, r, now, f->max_holds, a, err, &ok, write_needed);
    end_read(f->env, txn);
  }
  return rc ? lmdb_fail(f->env, err, rc, op_name(r->op)) : ok;
}

/* With the map full: clears dead readers' slots, then deletes what has
 * expired past the grace in the type, a few records per transaction: a
 * deletion copies its pages too, and the pages a transaction frees are
 * free for the next one only, so when even a small chunk finds no room
 * the chunks shrink to one record and grow again as room comes back. */
static void reclaim_when_full(file_t *f, resv__file_type_t *ft, int64_t now,
                              int64_t deadline) {
  env_t *e = f->env;
  MDB_txn *txn;
  MDB_stat st;
  check_readers(e, true);
  if (begin_txn(e, MDB_RDONLY, &txn)) return;
  int rc = mdb_stat(txn, ft->dbi, &st);
  mdb_txn_abort(txn);
  end_txn(e);
  if (rc) return;
  size_t todo = st.ms_entries < RECLAIM_WHEN_FULL ? st.ms_entries : RECLAIM_WHEN_FULL;
  size_t chunk = RECLAIM_CHUNK;
  for (size_t done = 0; done <= todo;) {
    size_t deleted = 0;
    unsigned char at[RESV__FILE_KEY_MAX + 1];
    size_t at_len = ft->sweep_len;
    memcpy(at, ft->sweep_at, at_len);
    resv_error_t gate_err;
    if (begin_write(e, deadline, "reclaim", &gate_err, &txn)) return;
    rc = resv__file_reclaim(txn, ft, resv__add_ms_sat(now, -f->grace_ms), chunk, &deleted);
    if (rc == 0)
      rc = mdb_txn_commit(txn);
    else
      mdb_txn_abort(txn);
    end_write(e);
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
 * write checks them again only if it waits for the gate). */
static bool write_one(file_t *f, resv__file_type_t *ft, const resv_request_t *r,
                      int64_t now, int64_t deadline, bool checked, resv_answer_t *a,
                      resv_error_t *err) {
  env_t *e = f->env;
  for (int round = 0;; round++) {
    MDB_txn *txn;
    bool ok = false;
    size_t deleted = 0;
    check_readers(e, false);
    int rc = begin_write_checked(e, deadline, checked && round == 0, op_name(r->op), err, &txn);
    if (rc) return write_fail(e, err, rc, op_name(r->op));
    if (adds_data(r) && over_limit(e))
      rc = MDB_MAP_FULL;
    else
      rc = resv__file_apply(txn, ft, r, now, f->max_holds, a, err, &ok, NULL);
    if (rc == 0 && ok) rc = resv__file_reclaim(txn, ft, resv__add_ms_sat(now, -f->grace_ms), RECLAIM_STEPS, &deleted);
    if (rc == 0 && ok)
      rc = mdb_txn_commit(txn);
    else
      mdb_txn_abort(txn);
    end_write(e);
    if (rc == 0) return ok;
    if (rc != MDB_MAP_FULL || round > 0) return lmdb_fail(e, err, rc, op_name(r->op));
    reclaim_when_full(f, ft, now, deadline);
  }
}

/* Runs a batch of writes in one transaction and one synced commit. When
 * LMDB fails it (a full map, a disk error), each write runs again in its
 * own transaction, so one write's failure is only its own. */
static void run_batch(env_t *e, gc_op_t *batch) {
  MDB_txn *txn;
  int64_t deadline = batch->deadline; /* the batch's latest */
  for (gc_op_t *o = batch; o; o = o->next)
    if (o->deadline > deadline) deadline = o->deadline;
  check_readers(e, false);
  int rc = begin_write(e, deadline, op_name(batch->req->op), batch->err, &txn);
  if (rc == GATE_REFUSED) { /* every write of the batch answers why */
    for (gc_op_t *o = batch->next; o; o = o->next) *o->err = *batch->err;
    return;
  }
  if (rc == 0 && over_limit(e)) { /* each on its own, as write_one decides */
    mdb_txn_abort(txn);
    end_write(e);
    rc = MDB_MAP_FULL;
  } else if (rc == 0) {
    for (gc_op_t *o = batch; o && rc == 0; o = o->next) {
      size_t deleted = 0;
      rc = resv__file_apply(txn, o->ft, o->req, o->now, o->file->max_holds, o->answer, o->err,
                            &o->ok, NULL);
      if (rc == 0 && o->ok)
        rc = resv__file_reclaim(txn, o->ft, resv__add_ms_sat(o->now, -o->file->grace_ms), RECLAIM_STEPS,
                                &deleted);
    }
    if (rc == 0)
      rc = mdb_txn_commit(txn);
    else
      mdb_txn_abort(txn);
    end_write(e);
  }
  if (rc == 0) return;
  for (gc_op_t *o = batch; o; o = o->next)
    o->ok = write_one(o->file, o->ft, o->req, o->now, o->deadline, false, o->answer, o->err);
}

/* Queues a write for the next group commit and waits for it: the first
 * waiter to find no commit under way commits everything queued. Each
 * waiter sleeps on its own condition: the leader wakes the writes of its
 * commit, and the first of those queued meanwhile to lead the next (one
 * broadcast woke every waiter for each commit: a thundering herd). */
static bool write_grouped(file_t *f, resv__file_type_t *ft, const resv_request_t *r,
                          int64_t now, int64_t deadline, resv_answer_t *a,
                          resv_error_t *err) {
  env_t *e = f->env;
  gc_op_t op = {.file = f, .ft = ft, .req = r, .now = now, .answer = a, .err = err,
                .deadline = deadline};
  pthread_cond_init(&op.wake, NULL);
  pthread_mutex_lock(&e->gc_mutex);
  if (e->gc_tail)
    e->gc_tail->next = &op;
  else
    e->gc_head = &op;
  e->gc_tail = &op;
  while (!op.done) {
    if (e->gc_busy) {
      pthread_cond_wait(&op.wake, &e->gc_mutex);
      continue;
    }
    gc_op_t *batch = e->gc_head;
    e->gc_head = e->gc_tail = NULL;
    e->gc_busy = true;
    pthread_mutex_unlock(&e->gc_mutex);
    run_batch(e, batch);
    pthread_mutex_lock(&e->gc_mutex);
    for (gc_op_t *o = batch, *next; o; o = next) {
      next = o->next;
      /* o may be gone once the lock is dropped; it cannot go before. */
      o->done = true;
      if (o != &op) pthread_cond_signal(&o->wake);
    }
    e->gc_busy = false;
    if (e->gc_head) pthread_cond_signal(&e->gc_head->wake);
  }
  pthread_mutex_unlock(&e->gc_mutex);
  pthread_cond_destroy(&op.wake);
  return op.ok;
}

/* sweep: the whole type, SWEEP_CHUNK records per write transaction (so
 * other writers run between chunks); a chunk the full map refuses runs
 * again one record at a time. */
static bool sweep(file_t *f, resv__file_type_t *ft, int64_t now, int64_t deadline,
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
    check_readers(e, false);
    int rc = begin_write(e, deadline, "sweep", err, &txn);
    if (rc) return write_fail(e, err, rc, "sweep");
    rc = resv__file_walk(txn, ft->dbi, at, &at_len, limit, chunk, &n);
    if (rc == 0)
      rc = mdb_txn_commit(txn);
    else
      mdb_txn_abort(txn);
    end_write(e);
    if (rc == MDB_MAP_FULL && chunk > 1) {
      memcpy(at, before, before_len); /* the chunk did not happen */
      at_len = before_len;
      chunk = 1;
      continue;
    }
    if (rc) return lmdb_fail(e, err, rc, "sweep");
    deleted += n;
    if (chunk < SWEEP_CHUNK) chunk *= 2;
  } while (at_len);
  if (!resv__answer_status(a, RESV_SWEPT, err)) return false;
  a->count = (int64_t)deleted;
  return true;
}

/* The deadline a call waits for the gate until: a blocking caller's
 * (RESV__DEADLINE_MAY_WAIT) is timeout_ms from now, read only when it
 * may be needed (reads never wait). */
static int64_t call_deadline(const file_t *f, const resv_request_t *r, int64_t deadline) {
  if (deadline != RESV__DEADLINE_MAY_WAIT) return deadline;
  return resv__add_ms_sat(resv__monotonic_ms(),
                          r->timeout_ms > 0 ? r->timeout_ms : f->timeout_ms);
}

static bool file_execute(void *backend, resv_type_t *type, const resv_request_t *r,
                         int64_t now, int64_t deadline, resv_answer_t *a,
                         resv_error_t *err) {
  file_t *f = backend;
  resv__file_type_t *ft = type->backend_state;
  if (!atomic_load_explicit(&ft->ready, memory_order_acquire) &&
      !type_ready(f, type, call_deadline(f, r, deadline), err))
    return false;
  if (r->op == RESV_OP_GET) return read_one(f, ft, r, now, a, err, NULL);
  if (r->op == RESV_OP_SWEEP) /* a whole type: never on an event loop */
    return deadline == RESV__DEADLINE_NO_WAIT
               ? resv__fail(err, RESV__EWOULDBLOCK, "sweep: runs on the dispatcher")
               : sweep(f, ft, now, call_deadline(f, r, deadline), a, err);
  bool write_needed = true;
  bool ok = read_one(f, ft, r, now, a, err, &write_needed);
  if (!write_needed) return ok;
  deadline = call_deadline(f, r, deadline); /* a write may wait for the gate */
  if (f->env->disk) return write_grouped(f, ft, r, now, deadline, a, err);
  /* ok: the read transaction began, so it checked the files (a peek that
   * asks for a write has answered, to be thrown away). */
  return write_one(f, ft, r, now, deadline, ok, a, err);
}

/* A page of resv_type_scan (file_scan.c) in a read-only transaction. The
 * type's database is opened without MDB_CREATE, so a type never used
 * stays so; the set-up mutex orders that open with type_ready's. */
static bool file_scan(void *backend, resv_type_t *type, const resv_str_t *after,
                      size_t limit, int64_t now, int64_t deadline, resv_scan_t *scan,
                      resv_error_t *err) {
  file_t *f = backend;
  env_t *e = f->env;
  MDB_txn *txn;
  MDB_dbi dbi;
  bool ok = true;
  pthread_mutex_lock(&e->setup);
  int rc = begin_txn(e, MDB_RDONLY, &txn);
  if (rc == 0) {
    rc = mdb_dbi_open(txn, type->collection, 0, &dbi);
    if (rc == 0) rc = resv__file_scan(txn, dbi, after, limit, now, scan, err, &ok);
    else if (rc == MDB_NOTFOUND) rc = 0; /* never used: no format record, no entry */
    /* A commit keeps a handle the open made; a read-only one writes nothing. */
    if (rc == 0) rc = mdb_txn_commit(txn);
    else mdb_txn_abort(txn);
    end_txn(e);
  }
  pthread_mutex_unlock(&e->setup);
  if (rc == MDB_INCOMPATIBLE)
    return resv__fail(err, RESV_EFORMAT, "%s: %s is not a type's database", e->path,
                      type->collection);
  return rc ? lmdb_fail(e, err, rc, "scan") : ok;
}

/* resv_type_put in one write transaction, after the type's set-up. */
static bool file_put(void *backend, resv_type_t *type, const resv_scan_entry_t *e,
                     int64_t deadline, int32_t *outcome, resv_error_t *err) {
  file_t *f = backend;
  env_t *env = f->env;
  if (!type_ready(f, type, deadline, err)) return false;
  resv__file_type_t *ft = type->backend_state;
  MDB_txn *txn;
  bool ok = true;
  int rc = begin_write(env, deadline, "put", err, &txn);
  if (rc == 0) {
    rc = resv__file_put(txn, ft, e, outcome, err, &ok);
    if (rc == 0 && ok && *outcome == RESV_PUT_ADDED)
      rc = mdb_txn_commit(txn);
    else
      mdb_txn_abort(txn);
    end_write(env);
  }
  return rc ? write_fail(env, err, rc, "put") : ok;
}

/* resv_store_types: the named databases, read from LMDB's main database
 * (whose keys are their names) in a read-only transaction. */
static bool file_list_types(void *backend, int64_t deadline, resv_type_names_t *names,
                            resv_error_t *err) {
  file_t *f = backend;
  env_t *e = f->env;
  MDB_txn *txn;
  MDB_dbi main_dbi;
  MDB_cursor *c;
  MDB_val key, val;
  bool ok = true;
  int rc = begin_txn(e, MDB_RDONLY, &txn);
  if (rc) return lmdb_fail(e, err, rc, "list the types");
  rc = mdb_dbi_open(txn, NULL, 0, &main_dbi);
  if (rc == 0 && (rc = mdb_cursor_open(txn, main_dbi, &c)) == 0) {
    for (rc = mdb_cursor_get(c, &key, &val, MDB_FIRST); rc == 0 && ok;
         rc = mdb_cursor_get(c, &key, &val, MDB_NEXT))
      if (!resv__type_names_add(names, key.mv_data, key.mv_size))
        ok = resv__fail(err, RESV_ENOMEM, "out of memory");
    mdb_cursor_close(c);
    if (rc == MDB_NOTFOUND) rc = 0;
  }
  mdb_txn_abort(txn);
  end_txn(e);
  return rc ? lmdb_fail(e, err, rc, "list the types") : ok;
}

/* ---- the backend -------------------------------------------------------- */

/* The type's records but its format record, and the bytes of its pages,
 * from one read transaction (a type not set up yet in this process
 * counts nothing). */
static void file_usage(void *backend, resv_type_t *type, int64_t *entries,
                       int64_t *bytes) {
  file_t *f = backend;
  resv__file_type_t *ft = type->backend_state;
  if (!ft || !atomic_load_explicit(&ft->ready, memory_order_acquire)) return;
  MDB_txn *txn;
  MDB_stat st;
  if (begin_txn(f->env, MDB_RDONLY, &txn)) return;
  if (mdb_stat(txn, ft->dbi, &st) == 0) {
    *entries += st.ms_entries ? (int64_t)st.ms_entries - 1 : 0;
    *bytes += (int64_t)(st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages) *
              st.ms_psize;
  }
  mdb_txn_abort(txn);
  end_txn(f->env);
}

static void file_describe(void *backend, char *buf, size_t size) {
  file_t *f = backend;
  snprintf(buf, size, "resv store (file %s, sync=%s)", f->env->path,
           f->env->disk ? "disk" : "process");
}

static void file_destroy(void *backend) {
  file_t *f = backend;
  env_release(f->env);
  free(f);
}

static const resv__backend_ops_t process_ops = {
    .name = "file",
    .runs_inline = true,
    .hands_off = true,
    .several_keys = true,
    .type_init = file_type_init,
    .type_free = file_type_free,
    .execute = file_execute,
    .scan = file_scan,
    .list_types = file_list_types,
    .put = file_put,
    .describe = file_describe,
    .usage = file_usage,
    .destroy = file_destroy,
};

static const resv__backend_ops_t disk_ops = {
    .name = "file",
    .runs_inline = false,
    .blocking_inline = true,
    .several_keys = true,
    .type_init = file_type_init,
    .type_free = file_type_free,
    .execute = file_execute,
    .scan = file_scan,
    .list_types = file_list_types,
    .put = file_put,
    .describe = file_describe,
    .usage = file_usage,
    .destroy = file_destroy,
};

/* With no_create: the directory must exist and hold LMDB's data file, so
 * that opening makes neither a directory nor a store. */
static bool store_exists(const char *path, resv_error_t *err) {
  char data[PATH_MAX];
  struct stat st;
  if (stat(path, &st) != 0)
    return resv__fail(err, RESV_EINVALID, "path: no file store at %s: %s; nothing "
                      "was created", path, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return resv__fail(err, RESV_EINVALID, "path: %s is not a directory", path);
  snprintf(data, sizeof data, "%s/data.mdb", path);
  if (stat(data, &st) != 0)
    return resv__fail(err, RESV_EINVALID, "path: no file store in %s (no data.mdb: "
                      "%s); nothing was created", path, strerror(errno));
  return true;
}

/* The store's path made absolute against the working directory at open,
 * so that a process that changes directory later keeps its store (the
 * state file and the identity checks name it again on later calls). */
static bool absolute_path(const char *given, char out[PATH_ROOM], resv_error_t *err) {
  char cwd[PATH_MAX];
  int n = -1;
  if (given[0] == '/')
    n = snprintf(out, PATH_ROOM, "%s", given);
  else if (getcwd(cwd, sizeof cwd))
    n = snprintf(out, PATH_ROOM, "%s/%s", cwd, given);
  else
    return resv__fail(err, RESV_EINVALID, "path: %s is relative and the working "
                      "directory cannot be read: %s", given, strerror(errno));
  if (n < 0 || n >= PATH_ROOM)
    return resv__fail(err, RESV_EINVALID, "path: longer than %d bytes", PATH_ROOM - 1);
  return true;
}

void *resv__file_open(const resv_options_t *o, resv__stats_t *stats,
                      const resv__backend_ops_t **ops, resv_error_t *err) {
  int64_t map_size = o->map_size ? o->map_size : DEFAULT_MAP_SIZE;
  if (map_size < MIN_MAP_SIZE || map_size > MAX_MAP_SIZE) {
    resv__fail(err, RESV_EINVALID, "map_size: must be from %lld to %lld bytes, got %lld",
               (long long)MIN_MAP_SIZE, (long long)MAX_MAP_SIZE, (long long)map_size);
    return NULL;
  }
  if (o->sync != RESV_SYNC_PROCESS && o->sync != RESV_SYNC_DISK) {
    resv__fail(err, RESV_EINVALID, "sync: must be process or disk");
    return NULL;
  }
  if (o->on_os_crash != RESV_OS_CRASH_REFUSE && o->on_os_crash != RESV_OS_CRASH_RESET) {
    resv__fail(err, RESV_EINVALID, "on_os_crash: must be refuse or reset");
    return NULL;
  }
  if (o->sweep_grace_ms < 0 || o->sweep_grace_ms > MAX_GRACE_MS) {
    resv__fail(err, RESV_EINVALID, "sweep_grace_ms: must be from 0 to 2^53, got %lld",
               (long long)o->sweep_grace_ms);
    return NULL;
  }
  char path[PATH_ROOM];
  if (!absolute_path(o->path, path, err)) return NULL;
  bool disk = o->sync == RESV_SYNC_DISK;
  struct stat st;
  if (o->no_create && !store_exists(path, err)) return NULL;
  if (!check_directory(path, &st, err)) return NULL;
  file_t *f = calloc(1, sizeof *f);
  if (!f) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a file store");
    return NULL;
  }
  f->grace_ms = o->sweep_grace_ms ? o->sweep_grace_ms : DEFAULT_GRACE_MS;
  f->max_holds = o->max_holds ? o->max_holds : RESV__DEFAULT_MAX_HOLDS;
  f->no_create = o->no_create != 0;
  f->stats = stats;
  f->timeout_ms = o->timeout_ms ? o->timeout_ms : RESV__DEFAULT_TIMEOUT_MS;

  pthread_once(&registry_once, registry_atfork);
  registry_lock();
  pid_t pid = getpid();
  env_t *e = registry;
  /* An environment whose files were removed or replaced is not shared:
   * its stores answer closed, a new one opens what the path holds now. */
  while (e && !(e->dev == st.st_dev && e->ino == st.st_ino && e->pid == pid &&
                resv__file_identity_check(&e->id, e->mdb, true) != RESV__FILE_GONE))
    e = e->next;
  if (e && e->disk != disk) {
    resv__fail(err, RESV_EINVALID,
               "sync: %s is already open in this process with sync = %s", path,
               e->disk ? "disk" : "process");
    e = NULL;
  } else if (e) {
    e->refs++;
  } else if ((e = env_new(path, &st, map_size, disk,
                            o->on_os_crash == RESV_OS_CRASH_RESET, o->timeout_ms, err))) {
    e->next = registry;
    registry = e;
  }
  registry_unlock();
  if (!e) {
    free(f);
    return NULL;
  }
  f->env = e;
  *ops = disk ? &disk_ops : &process_ops;
  return f;
}
