/* file_store.c: the file store, one LMDB environment shared by every
 * process that opens the same directory (docs/design.md section 6): its
 * open, the set-up of each type, and the backend's operations.
 *
 * A directory holds LMDB's data.mdb and lock.mdb, the state file
 * resv.state (file_state.c), the write gate resv.gate (file_gate.c) and
 * nothing else. Its main database lists one named database per aggregate
 * type, named as the type's MongoDB collection (file_ops.c says what is
 * inside), and one named "resv" whose "format" record marks the directory
 * as a resv store of format 2 (a store of format 1 is upgraded at open):
 * a directory with other files, an LMDB database without that record or
 * a record of another format is refused at open, before anything is
 * written.
 *
 * How a call runs, and why:
 * - sync = "disk" (the default) commits with fsync, which costs a disk
 *   flush, so an answered write survives a crash of the OS. These calls
 *   run on the dispatcher, and concurrent writes of the process share a
 *   commit (file_commit.c).
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
 *   whichever way its pages were written.) A write transaction without a
 *   flush costs less than a hop to a dispatcher thread and back, so these
 *   calls run inline on the caller's thread, as the memory store's do.
 * - Reads (get) use a read-only transaction: they never wait for a writer,
 *   and keep working when the map is full.
 *
 * A process killed at any instant: LMDB's writer lock is a robust
 * process-shared mutex, so the next writer takes it over and the dead
 * writer's uncommitted transaction is simply not there (nothing it had
 * answered was uncommitted).
 *
 * The parts (file_env.h): file_env.c opens and shares the environments,
 * file_txn.c begins and ends the transactions behind the write gate,
 * file_commit.c runs the writes, file_sweep.c deletes what has expired
 * over a whole type. This file must not begin a transaction but through
 * file_txn.c, nor read or write a record itself (file_ops.c,
 * file_scan.c and file_format.c do, inside the transaction). */
#include "file.h"
#include "file_env.h"

#include <dirent.h>
#include <errno.h>
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
/* The longest path of a store: room is left for the names of its files. */
#define PATH_ROOM (PATH_MAX - 16)

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
 * (RESV__GATE_REFUSED, err filled, past it). */
static int set_up_type(env_t *e, resv_type_t *type, unsigned flags, int64_t deadline,
                       MDB_dbi *dbi, resv_error_t *err, bool *ok) {
  MDB_txn *txn;
  int rc = flags ? resv__file_begin_txn(e, flags, &txn)
                 : resv__file_begin_write(e, deadline, "set up the type", err, &txn);
  if (rc) return rc;
  rc = mdb_dbi_open(txn, type->collection, flags ? 0 : MDB_CREATE, dbi);
  if (rc == 0) rc = resv__file_format(txn, *dbi, type->collection, err, ok);
  if (!flags) return resv__file_finish_write(e, txn, rc, *ok, true);
  if (rc == 0 && *ok)
    rc = mdb_txn_commit(txn); /* a read-only one keeps the handle too */
  else
    mdb_txn_abort(txn);
  resv__file_end_txn(e);
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
    if (rc == RESV__GATE_REFUSED)
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
      ok = resv__file_lmdb_fail(e, err, rc, "set up the type");
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

/* Runs r in a read-only transaction: a get, or a write that may turn out
 * to change nothing (a conflict, the owner's confirmed reservation, an
 * abandon or a release of nothing, a record that is not a reservation):
 * those answer from the snapshot, a consistent state no later than the
 * call, without the writer's lock or a commit. peek (NULL for a get)
 * tells when the write must run in a write transaction after all, and
 * what it plans to write (file_internal.h). */
static bool read_one(file_t *f, resv__file_type_t *ft, const resv_request_t *r,
                     int64_t now, resv_answer_t *a, resv_error_t *err,
                     resv__file_peek_t *peek) {
  MDB_txn *txn;
  bool ok = false;
  int rc = resv__file_begin_read(f->env, &txn);
  if (rc == 0) {
    rc = resv__file_apply(txn, ft, r, now, f->max_holds, a, err, &ok, peek);
    resv__file_end_read(f->env, txn);
  }
  return rc ? resv__file_lmdb_fail(f->env, err, rc, resv__file_op_name(r->op)) : ok;
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
               : resv__file_sweep(f, ft, now, call_deadline(f, r, deadline), a, err);
  resv__file_peek_t peek;
  peek.write_needed = true; /* a read that failed to begin: the write tries */
  peek.planned = false;
  bool ok = read_one(f, ft, r, now, a, err, &peek);
  if (!peek.write_needed) return ok;
  deadline = call_deadline(f, r, deadline); /* a write may wait for the gate */
  if (f->env->disk) return resv__file_write_grouped(f, ft, r, now, deadline, a, err);
  /* ok: the read transaction began, so it checked the files (a peek that
   * asks for a write has answered, to be thrown away unless its plan is
   * written). */
  return resv__file_write_one(f, ft, r, now, deadline, ok, ok && peek.planned ? &peek : NULL,
                              a, err);
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
  int rc = resv__file_begin_txn(e, MDB_RDONLY, &txn);
  if (rc == 0) {
    rc = mdb_dbi_open(txn, type->collection, 0, &dbi);
    if (rc == 0) rc = resv__file_scan(txn, dbi, after, limit, now, scan, err, &ok);
    else if (rc == MDB_NOTFOUND) rc = 0; /* never used: no format record, no entry */
    /* A commit keeps a handle the open made; a read-only one writes nothing. */
    if (rc == 0) rc = mdb_txn_commit(txn);
    else mdb_txn_abort(txn);
    resv__file_end_txn(e);
  }
  pthread_mutex_unlock(&e->setup);
  if (rc == MDB_INCOMPATIBLE)
    return resv__fail(err, RESV_EFORMAT, "%s: %s is not a type's database", e->path,
                      type->collection);
  return rc ? resv__file_lmdb_fail(e, err, rc, "scan") : ok;
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
  int rc = resv__file_begin_write(env, deadline, "put", err, &txn);
  if (rc == 0) {
    rc = resv__file_put(txn, ft, e, outcome, err, &ok);
    rc = resv__file_finish_write(env, txn, rc, ok && *outcome == RESV_PUT_ADDED, true);
  }
  return rc ? resv__file_write_fail(env, err, rc, "put") : ok;
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
  int rc = resv__file_begin_txn(e, MDB_RDONLY, &txn);
  if (rc) return resv__file_lmdb_fail(e, err, rc, "list the types");
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
  resv__file_end_txn(e);
  return rc ? resv__file_lmdb_fail(e, err, rc, "list the types") : ok;
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
  if (resv__file_begin_txn(f->env, MDB_RDONLY, &txn)) return;
  if (mdb_stat(txn, ft->dbi, &st) == 0) {
    *entries += st.ms_entries ? (int64_t)st.ms_entries - 1 : 0;
    *bytes += (int64_t)(st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages) *
              st.ms_psize;
  }
  mdb_txn_abort(txn);
  resv__file_end_txn(f->env);
}

static void file_describe(void *backend, char *buf, size_t size) {
  file_t *f = backend;
  snprintf(buf, size, "resv store (file %s, sync=%s)", f->env->path,
           f->env->disk ? "disk" : "process");
}

static void file_destroy(void *backend) {
  file_t *f = backend;
  resv__file_env_release(f->env);
  free(f);
}

static const resv__backend_ops_t process_ops = {
    .name = "file",
    .runs_inline = true,
    .hands_off = true,
    .several_keys = true,
    .sampled = true, /* a conflict or a get: about 0.5 us */
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

  env_t *e = resv__file_env_get(path, &st, map_size, disk,
                                 o->on_os_crash == RESV_OS_CRASH_RESET, o->timeout_ms, err);
  if (!e) {
    free(f);
    return NULL;
  }
  f->env = e;
  *ops = disk ? &disk_ops : &process_ops;
  return f;
}
