/* file_check.h: the file store's checks of its own files, beside LMDB's.
 *
 * file_check.c runs before LMDB opens a directory: each file the store
 * needs can be opened as the user the process runs as (a refusal names
 * the path, the operation and the user), and data.mdb's meta pages are
 * whole and the file as long as they say, so that a truncated or damaged
 * file is refused with format instead of killing the process at its
 * first read (LMDB maps the file; a page past its end is SIGBUS).
 *
 * file_walk.c runs once LMDB has opened the directory, before anything
 * reads through it: every page a lookup or a write can reach is what LMDB
 * writes, so that a damaged page is refused with format instead of
 * crashing LMDB's cursor code.
 *
 * file_identity.c runs while the store is open: the files behind the path
 * are still the ones the store has open (a directory deleted or replaced
 * under a running store must never give two worlds behind one path), and
 * data.mdb is still as long as its meta page says (a file truncated while
 * open). file_store.c calls it at the start of every transaction. */
#ifndef RESV_FILE_CHECK_H
#define RESV_FILE_CHECK_H

#include "base.h"
#include "file_ring.h"

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

/* What resv__file_identity_check returns besides 0 and LMDB's codes
 * (which are from -30799 to -30780; errno values are positive): the
 * store's files were removed or replaced (for good: every later check
 * returns it too), or data.mdb is shorter than its meta page says (as
 * long as it is). lmdb_fail turns them into errors with
 * resv__file_identity_fail. */
#define RESV__FILE_GONE (-30600)
#define RESV__FILE_SHORT (-30601)

/* What an error about a damaged data.mdb says to do; its %s is the
 * store's directory. */
#define RESV__FILE_REMEDY \
  "restore the directory from a copy, or run resv recover --path %s to move it aside"

/* The most directories above a store's that are watched; a deeper path is
 * checked without watches. */
#define RESV__FILE_WATCH_UP 64

/* What a store checks its files against. Set by resv__file_identity_init
 * once LMDB has opened the directory; read by every thread after. */
typedef struct resv__file_identity {
  char path[4096]; /* the directory */
  int fd;          /* data.mdb, LMDB's descriptor */
  size_t psize;
  dev_t data_dev, lock_dev; /* the files as LMDB opened them */
  ino_t data_ino, lock_ino;
  _Atomic int state;          /* 0 or RESV__FILE_GONE */
  _Atomic int64_t path_at;    /* when the paths are to be looked at next */
  _Atomic int64_t short_size; /* what data.mdb measured when found short */
  _Atomic int64_t short_need;
  /* The watches (inotify) on the directory, data.mdb and every directory
   * above, while they stand (file_identity.c). */
  bool ready;               /* init ran: close has something to free */
  _Atomic bool watching;    /* false: every check measures and stats */
  int ino;                  /* the inotify descriptor, or -1 */
  int dir_wd, data_wd;
  int n_up;
  struct { int wd; unsigned short off, len; } up[RESV__FILE_WATCH_UP];
  resv__file_ring_t ring;   /* whether ino has anything to read (file_ring.h) */
  pthread_mutex_t drain;    /* reading ino and acting on what it says */
  bool measured;            /* size is data.mdb's since the last event; under drain */
  _Atomic int64_t size;     /* data.mdb's size as last measured */
} resv__file_identity_t;

/* Before mdb_env_open on the directory path: refuses (false, err filled)
 * a data.mdb or lock.mdb the process cannot open for reading and writing,
 * a missing one the process cannot create (RESV_EINVALID, naming the user
 * the process runs as), and a data.mdb whose meta pages are damaged or
 * that is shorter than its newest whole meta page says (RESV_EFORMAT). A
 * missing or empty data.mdb passes: LMDB makes a new store of it. */
bool resv__file_check(const char *path, resv_error_t *err);

/* After mdb_env_open on the directory path, before any other read through
 * mdb: walks the trees of data.mdb in the snapshot of a read transaction
 * (file_walk.c says what it checks). False with err RESV_EFORMAT, naming
 * the database, the page and what is wrong, when a page is not what LMDB
 * writes; RESV_EUNAVAILABLE when it cannot read the file. */
bool resv__file_walk_trees(MDB_env *mdb, const char *path, resv_error_t *err);

/* For a store no process has open (resv recover): 1 when data.mdb is
 * missing, empty or passes resv__file_check and the walk; 0 with err
 * (RESV_EFORMAT) when open would refuse it as damaged; -1 with err when it
 * cannot be looked at. */
int resv__file_sound(const char *path, resv_error_t *err);

/* Fills err for a failed operation on file (a path) with errno errnum:
 * RESV_EINVALID when retrying cannot help (a permission refused, a
 * read-only file system), naming the operation, the user the process
 * runs as and the file's (or its directory's) owner and mode; else
 * RESV_EUNAVAILABLE. op is a verb phrase: "open", "make the directory".
 * how follows the path ("for writing", or ""). Returns false. */
bool resv__file_fail_access(resv_error_t *err, int errnum, const char *op,
                            const char *file, const char *how);

/* Records what mdb, just opened on the directory path, has open, sets
 * the watches up when watch (else every check looks at the files), and
 * grows data.mdb as resv__file_identity_grow does. Returns an LMDB error
 * code or errno (0 on success). */
int resv__file_identity_init(resv__file_identity_t *id, MDB_env *mdb, const char *path,
                             bool watch);

/* Frees what init made (the watches); accepts a zeroed one. */
void resv__file_identity_close(resv__file_identity_t *id);

/* Keeps data.mdb some pages longer than its newest meta page says (a
 * sparse hole; LMDB may leave the pages at its end unwritten): for the
 * end of every write transaction of this process. */
void resv__file_identity_grow(resv__file_identity_t *id, MDB_env *mdb);

/* 0 when the store's files are still behind its path and data.mdb holds
 * every page its meta page names; else RESV__FILE_GONE or
 * RESV__FILE_SHORT. While the watches stand, each call reads what they
 * saw (one read of the inotify descriptor, which finds nothing when
 * nothing changed) and measures data.mdb or looks at the paths only when
 * they saw something; without them, the size and the link count of the
 * open data.mdb are looked at on every call (one fstat). The paths of
 * data.mdb and lock.mdb are looked at with paths true, and at most once a
 * second anyway. */
int resv__file_identity_check(resv__file_identity_t *id, MDB_env *mdb, bool paths);

/* For a write transaction once it holds LMDB's writer lock (checked
 * just before, with the write gate held): without the watches, the paths
 * part of resv__file_identity_check, every time; with them, what the
 * check found (it read the watches behind the gate, which every writer
 * takes). */
int resv__file_identity_paths(resv__file_identity_t *id);

/* For tests: how many times this process has read its watches' queues. */
uint64_t resv__file_identity_reads(void);

/* Fills err for rc (RESV__FILE_GONE: RESV_ECLOSED; RESV__FILE_SHORT:
 * RESV_EFORMAT), what being the operation. Returns false. */
bool resv__file_identity_fail(const resv__file_identity_t *id, int rc, const char *what,
                              resv_error_t *err);

#endif /* RESV_FILE_CHECK_H */
