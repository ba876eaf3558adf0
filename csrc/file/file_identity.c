/* file_identity.c: a running file store's check that its files are still
 * the ones behind its path, and still whole.
 *
 * One store behind one path: a cleanup job that deletes the directory
 * (rm -rf) under a running store leaves the store answering from files no
 * other process can reach, while a new process makes a fresh store at the
 * path: two worlds, each granting the same key to a different owner. So
 * the store looks at the open data.mdb's link count at the start of every
 * transaction (one fstat: 0 once the file is deleted, or replaced by a
 * rename), and compares the device and inode of the data.mdb and lock.mdb
 * it opened with the files found at their paths (which also sees a file
 * moved away and a copy put in its place, lock.mdb deleted alone, the
 * directory moved away and another put at the path) at the start of every
 * write transaction, once LMDB's writer lock is held, and at most once a
 * second on reads (a call answered from a read snapshot, such as a
 * conflict, is a read). Once anything differs, the store answers closed
 * from then on, on every call: it never goes back to answering from
 * either world.
 *
 * The same fstat measures data.mdb: a file truncated while the store has
 * it mapped would kill the process at the first read of a page past its
 * new end (SIGBUS), so a transaction that finds the file shorter than the
 * newest meta page says (its last page + 1, times the page size) reads
 * nothing and answers format (as long as the file stays short: the state
 * is not kept, see below). The check runs before LMDB begins
 * the transaction (which reads the meta pages from the map: a file
 * shorter than those two pages is short without reading them). LMDB
 * writes a commit's pages before its meta and never shortens the file,
 * so when the size measured before the meta was read falls short, a
 * second fstat after it tells a commit of another process in between
 * from a truncation. A truncation during a transaction, after its check,
 * is not caught: the check narrows the window to the transaction
 * itself. (Not lseek to the end, which costs half an fstat: LMDB writes
 * several pages with lseek then writev on the same descriptor, and a
 * seek of another thread in between sends them to the wrong place.)
 *
 * LMDB itself may leave a file shorter than its meta says: pages a commit
 * allocated at the end and freed again before it ended ("loose" pages)
 * are listed as free and never written, so the file can stop short of
 * its last page. So the store keeps data.mdb GROW_PAGES pages or more
 * longer than its meta says (ftruncate, a sparse hole that takes no room
 * on the disk): at open, and after each write transaction of this
 * process. A commit would have to add more pages than that at once for
 * another process's read to find the file short between the commit and
 * the growth after it; such a read answers format once, and the next one
 * finds the file grown (which is why a short file is not remembered). */
#include "file_check.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PATH_CHECK_MS 1000

/* Milliseconds of the coarse monotonic clock: the tick of the kernel,
 * read without the cost of the precise one, enough to look at the paths
 * about once a second. */
static int64_t coarse_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
#define GROW_PAGES 512 /* of room kept past the last page */

int resv__file_identity_init(resv__file_identity_t *id, MDB_env *mdb, const char *path) {
  struct stat data, lock;
  char file[sizeof id->path + 16];
  MDB_stat est;
  int rc = mdb_env_get_fd(mdb, &id->fd);
  if (rc) return rc;
  if (fstat(id->fd, &data) != 0) return errno;
  snprintf(file, sizeof file, "%s/lock.mdb", path);
  if (stat(file, &lock) != 0) return errno;
  if ((rc = mdb_env_stat(mdb, &est))) return rc;
  /* A relative path is the one of the working directory at open: the
   * process may change directory since. Symbolic links stay as given, so
   * that a link pointed at another directory is a replacement too. */
  char cwd[sizeof id->path];
  int n = path[0] != '/' && getcwd(cwd, sizeof cwd)
              ? snprintf(id->path, sizeof id->path, "%s/%s", cwd, path)
              : snprintf(id->path, sizeof id->path, "%s", path);
  if (n < 0 || (size_t)n >= sizeof id->path) return ENAMETOOLONG;
  id->psize = est.ms_psize;
  id->data_dev = data.st_dev;
  id->data_ino = data.st_ino;
  id->lock_dev = lock.st_dev;
  id->lock_ino = lock.st_ino;
  atomic_init(&id->state, 0);
  atomic_init(&id->path_at, coarse_ms() + PATH_CHECK_MS);
  atomic_init(&id->short_size, 0);
  atomic_init(&id->short_need, 0);
  resv__file_identity_grow(id, mdb);
  return 0;
}

void resv__file_identity_grow(resv__file_identity_t *id, MDB_env *mdb) {
  MDB_envinfo info;
  struct stat st;
  if (atomic_load_explicit(&id->state, memory_order_relaxed) || fstat(id->fd, &st) != 0 ||
      mdb_env_info(mdb, &info) != 0)
    return;
  int64_t need = (int64_t)(info.me_last_pgno + 1) * (int64_t)id->psize;
  int64_t room = GROW_PAGES * (int64_t)id->psize;
  /* A failure leaves the file as it was: LMDB writes the pages it uses. */
  if (st.st_size < need + room && ftruncate(id->fd, (off_t)(need + 2 * room)) != 0) return;
}

static bool same_file(const char *path, const char *name, dev_t dev, ino_t ino) {
  char file[4096 + 16];
  struct stat st;
  snprintf(file, sizeof file, "%s/%s", path, name);
  return stat(file, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

/* Records the end state rc; the first one found stays. */
static int found(resv__file_identity_t *id, int rc) {
  int none = 0;
  atomic_compare_exchange_strong(&id->state, &none, rc);
  return atomic_load(&id->state);
}

int resv__file_identity_check(resv__file_identity_t *id, MDB_env *mdb, bool paths) {
  int state = atomic_load_explicit(&id->state, memory_order_relaxed);
  if (state) return state;
  MDB_envinfo info;
  struct stat st;
  if (fstat(id->fd, &st) != 0) return 0;
  if (st.st_nlink == 0) return found(id, RESV__FILE_GONE);
  int64_t need = 2 * (int64_t)id->psize; /* the meta pages, before LMDB reads them */
  if (st.st_size >= need && mdb_env_info(mdb, &info) == 0) {
    need = (int64_t)(info.me_last_pgno + 1) * (int64_t)id->psize;
    /* A commit between the fstat and the meta may have grown both. */
    if (st.st_size < need && fstat(id->fd, &st) != 0) return 0;
  }
  if (st.st_size < need) { /* not kept: see the top of the file */
    atomic_store(&id->short_size, (int64_t)st.st_size);
    atomic_store(&id->short_need, need);
    return RESV__FILE_SHORT;
  }
  if (!paths) {
    int64_t now = coarse_ms();
    int64_t at = atomic_load_explicit(&id->path_at, memory_order_relaxed);
    if (now < at || !atomic_compare_exchange_strong(&id->path_at, &at, now + PATH_CHECK_MS))
      return 0;
  }
  return resv__file_identity_paths(id);
}

int resv__file_identity_paths(resv__file_identity_t *id) {
  int state = atomic_load_explicit(&id->state, memory_order_relaxed);
  if (state) return state;
  if (!same_file(id->path, "data.mdb", id->data_dev, id->data_ino) ||
      !same_file(id->path, "lock.mdb", id->lock_dev, id->lock_ino))
    return found(id, RESV__FILE_GONE);
  return 0;
}

bool resv__file_identity_fail(const resv__file_identity_t *id, int rc, const char *what,
                              resv_error_t *err) {
  if (rc == RESV__FILE_GONE)
    return resv__fail(err, RESV_ECLOSED,
                      "%s: the store's files were removed or replaced while it was "
                      "open; close the store and open it again", id->path);
  return resv__fail(err, RESV_EFORMAT,
                    "%s: %s/data.mdb is damaged: it was truncated while the store "
                    "was open (%lld bytes, its meta page says %lld); nothing more is "
                    "read from it", what, id->path, (long long)atomic_load(&id->short_size),
                    (long long)atomic_load(&id->short_need));
}
