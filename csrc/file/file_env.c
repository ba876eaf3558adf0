/* file_env.c: the LMDB environment of a store's directory, one per
 * directory per process, shared by reference (docs/design.md section 6).
 *
 * LMDB forbids opening one environment twice in a process (closing either
 * would drop the other's locks), so stores of one process on one directory
 * share it through a registry counted by reference; a child after fork()
 * never uses its parent's (store.c answers closed, and a store the child
 * opens gets its own environment).
 *
 * Opening checks the directory (nothing but the store's files), the state
 * file (file_state.c), data.mdb's meta pages (file_check.c) and the
 * store's format record, upgrading a store of format 1; an existing store
 * opens reading only, so it waits for no writer. It must not run a call's
 * operation: file_store.c does. */
#include "file_env.h"

#include <bson/bson.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The store's format: 2, records of file_record.h; 1, BSON documents,
 * upgraded at open (file_upgrade.c). */
#define STORE_FORMAT 2

static const char marker_name[] = "resv";
static const unsigned char marker_key[] = "format";

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

/* Writes the store's format record (STORE_FORMAT) into the "resv"
 * database. Returns an LMDB error code. */
static int put_marker(MDB_txn *txn, MDB_dbi marker) {
  MDB_val key = {sizeof marker_key - 1, (void *)marker_key};
  bson_t b = BSON_INITIALIZER;
  BSON_APPEND_INT32(&b, "format", STORE_FORMAT);
  MDB_val val = {b.len, (void *)bson_get_data(&b)};
  int rc = mdb_put(txn, marker, &key, &val, 0);
  bson_destroy(&b);
  return rc;
}

/* What check_marker found in its transaction. */
typedef struct marker_check {
  bool write;       /* behind the gate: may mark or upgrade the store */
  bool ok;          /* false: err is filled */
  bool unmarked;    /* empty or of format 1: to run again with write */
  bool commit;      /* the transaction wrote: commit it */
  const char *what; /* names the step for an LMDB error */
} marker_check_t;

/* No "resv" database (rc MDB_NOTFOUND), or a key of that name that is
 * not a database (MDB_INCOMPATIBLE): an empty environment is a new store,
 * marked with write; anything else is not a resv store. Returns an LMDB
 * error code. */
static int check_unmarked(env_t *e, MDB_txn *txn, int rc, marker_check_t *m,
                          resv_error_t *err) {
  MDB_dbi main_dbi, marker;
  MDB_stat st;
  if (rc == MDB_NOTFOUND && (rc = mdb_dbi_open(txn, NULL, 0, &main_dbi)) == 0 &&
      (rc = mdb_stat(txn, main_dbi, &st)) == 0 && st.ms_entries == 0) {
    if (!m->write) {
      m->unmarked = true;
      return 0;
    }
    m->commit = true; /* a new store: mark it */
    rc = mdb_dbi_open(txn, marker_name, MDB_CREATE, &marker);
    return rc ? rc : put_marker(txn, marker);
  }
  if (rc == 0 || rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE) {
    m->ok = resv__fail(err, RESV_EFORMAT,
                       "path: %s holds an LMDB database that is not a resv store "
                       "(it has no resv format record); nothing was written", e->path);
    rc = 0;
  }
  return rc;
}

/* The "resv" database's format record: of this format, or of format 1,
 * whose records are rewritten and the store marked STORE_FORMAT (with
 * write; file_upgrade.c). Returns an LMDB error code. */
static int check_format(env_t *e, MDB_txn *txn, MDB_dbi marker, marker_check_t *m,
                        resv_error_t *err) {
  MDB_val key = {sizeof marker_key - 1, (void *)marker_key}, val;
  bson_t b;
  bson_iter_t it;
  int rc = mdb_get(txn, marker, &key, &val);
  if (rc == MDB_NOTFOUND) {
    m->ok = resv__fail(err, RESV_EFORMAT, "path: %s has no resv format record", e->path);
    return 0;
  }
  if (rc) return rc;
  if (!bson_init_static(&b, val.mv_data, val.mv_size) ||
      !bson_iter_init_find(&it, &b, "format") || !BSON_ITER_HOLDS_NUMBER(&it)) {
    m->ok = resv__fail(err, RESV_EFORMAT,
                       "path: %s has a resv format record without a numeric format",
                       e->path);
    return 0;
  }
  double format = bson_iter_as_double(&it);
  if (format == 1 && !m->write) {
    m->unmarked = true; /* the upgrade writes: again, behind the gate */
    return 0;
  }
  if (format == 1) {
    m->what = "open: upgrade the store from format 1";
    m->commit = true;
    rc = resv__file_upgrade(txn);
    return rc ? rc : put_marker(txn, marker);
  }
  if (format != STORE_FORMAT)
    m->ok = resv__fail(err, RESV_EFORMAT,
                       "path: %s holds a resv file store of format %g, this store "
                       "reads formats 1 and 2; nothing was written", e->path, format);
  return 0;
}

/* Checks the "resv" database's format record, or writes it into an empty
 * environment (and upgrades a store of format 1). Without write it reads
 * only (a store opens without waiting for its writers) and sets
 * *unmarked when the environment is empty or of format 1: then it is to
 * run again with write, behind the gate. */
static bool check_marker(env_t *e, bool write, int64_t deadline, resv_error_t *err,
                         bool *unmarked) {
  MDB_txn *txn;
  MDB_dbi marker;
  marker_check_t m = {.write = write, .ok = true, .what = "open"};
  int rc = write ? resv__file_begin_write(e, deadline, "open", err, &txn)
                 : resv__file_begin_txn(e, MDB_RDONLY, &txn);
  if (rc) return resv__file_write_fail(e, err, rc, "open");
  rc = mdb_dbi_open(txn, marker_name, 0, &marker);
  if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE)
    rc = check_unmarked(e, txn, rc, &m, err);
  else if (rc == 0)
    rc = check_format(e, txn, marker, &m, err);
  if (write) {
    rc = resv__file_finish_write(e, txn, rc, m.commit, true);
  } else {
    if (rc == 0 && m.commit)
      rc = mdb_txn_commit(txn);
    else
      mdb_txn_abort(txn);
    resv__file_end_txn(e);
  }
  if (m.unmarked) *unmarked = true;
  return rc ? resv__file_lmdb_fail(e, err, rc, m.what) : m.ok;
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
  pthread_mutex_destroy(&e->queue_mutex);
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
  pthread_mutex_init(&e->queue_mutex, NULL);
  atomic_init(&e->reader_check_at, 0);
  atomic_init(&e->sync_failed, 0);
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
    /* disk: the meta page's flush is resv__file_sync's, outside the lock */
    rc = mdb_env_open(e->mdb, path,
                      MDB_NOTLS | (disk ? MDB_NOMETASYNC : MDB_NOSYNC | MDB_WRITEMAP), 0666);
    if (rc == 0) rc = resv__file_identity_init(&e->id, e->mdb, path, !disk);
  }
  if (rc) {
    if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH)
      resv__fail(err, RESV_EFORMAT, "path: %s is not a resv store: %s", path,
                 mdb_strerror(rc));
    else
      resv__file_lmdb_fail(e, err, rc, "open");
    env_free(e);
    return NULL;
  }
  MDB_stat est;
  mdb_env_stat(e->mdb, &est);
  e->limit_pages = (size_t)map_size / est.ms_psize;
  resv__file_check_readers(e, true);
  if (!resv__file_walk_trees(e->mdb, path, err)) { /* file_walk.c */
    env_free(e);
    return NULL;
  }
  bool unmarked = false;
  int64_t deadline = resv__add_ms_sat(resv__monotonic_ms(), timeout_ms);
  if (!check_marker(e, false, deadline, err, &unmarked) ||
      (unmarked && !check_marker(e, true, deadline, err, &unmarked)) ||
      !resv__file_state_start(e->state, e->mdb, &e->resize, e->gate, &e->id, deadline, err)) {
    env_free(e);
    return NULL;
  }
  return e;
}

void resv__file_env_release(env_t *e) {
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

env_t *resv__file_env_get(const char *path, const struct stat *st, int64_t map_size,
                          bool disk, bool reset, int64_t timeout_ms, resv_error_t *err) {
  pthread_once(&registry_once, registry_atfork);
  registry_lock();
  pid_t pid = getpid();
  env_t *e = registry;
  /* An environment whose files were removed or replaced is not shared:
   * its stores answer closed, a new one opens what the path holds now. */
  while (e && !(e->dev == st->st_dev && e->ino == st->st_ino && e->pid == pid &&
                resv__file_identity_check(&e->id, e->mdb, true) != RESV__FILE_GONE))
    e = e->next;
  if (e && e->disk != disk) {
    resv__fail(err, RESV_EINVALID,
               "sync: %s is already open in this process with sync = %s", path,
               e->disk ? "disk" : "process");
    e = NULL;
  } else if (e) {
    e->refs++;
  } else if ((e = env_new(path, st, map_size, disk, reset, timeout_ms, err))) {
    e->next = registry;
    registry = e;
  }
  registry_unlock();
  return e;
}
