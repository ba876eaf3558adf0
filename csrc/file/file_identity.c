/* file_identity.c: a running file store's check that its files are still
 * the ones behind its path, and still whole.
 *
 * One store behind one path: a cleanup job that deletes the directory
 * (rm -rf) under a running store leaves the store answering from files no
 * other process can reach, while a new process makes a fresh store at the
 * path: two worlds, each granting the same key to a different owner. So
 * the store compares the device and inode of the data.mdb and lock.mdb it
 * opened with the files found at their paths (which also sees a file
 * moved away and a copy put in its place, lock.mdb deleted alone, the
 * directory moved away and another put at the path), and looks at the
 * open data.mdb's link count (0 once the file is deleted). Once anything
 * differs, the store answers closed from then on, on every call: it never
 * goes back to answering from either world.
 *
 * When it is looked at: the store watches (inotify) its directory, its
 * data.mdb and every directory above it, each for the one name that
 * leads to the store. The kernel queues an event before the call that
 * removes, renames, creates or truncates returns, so a check that reads
 * the queue (one read, which finds it empty when nothing happened) sees
 * every such change made before it (on the thread that opened the store,
 * the read is made only when the kernel's mark in a ring says the queue
 * has news, file_ring.h): at the start of every transaction,
 * and for a write once it holds the write gate (file_gate.c: every writer
 * takes it before LMDB's writer lock). A write that follows its own
 * call's read transaction (file_store.c: a reserve reads first, so that
 * a conflict needs no write) and takes the gate without waiting counts
 * as checked by that read, a moment before; one that waited checks
 * again. Only an event sends the check to
 * the files themselves: a change of data.mdb measures it (fstat), any
 * other compares the paths (stat of both). A file system mounted over
 * the path or a directory above it makes no event: the paths are also
 * compared at most once a second, on any call. With sync = "disk" (each
 * commit a pwrite, an event for every process watching, beside a sync
 * that costs far more than the checks), where the watches cannot stand
 * (no inotify left, a path through a symbolic link, a directory above
 * moved: its watch follows it), or once one is lost, every
 * transaction measures data.mdb (one fstat) and every write transaction,
 * once LMDB's writer lock is held, compares the paths.
 *
 * The same measure checks data.mdb: a file truncated while the store has
 * it mapped would kill the process at the first read of a page past its
 * new end (SIGBUS), so a transaction that finds the file shorter than the
 * newest meta page says (its last page + 1, times the page size) reads
 * nothing and answers format (as long as the file stays short: the state
 * is not kept, see below). A size measured stays true until the watch on
 * data.mdb sees it modified (a truncation, a growth, a write with
 * pwrite), so a watched store measures only after such an event, and
 * compares the size kept with the meta on every transaction (no system
 * call). The check runs before LMDB begins
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
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_CHECK_MS 1000
#define GROW_PAGES 512 /* of room kept past the last page */
/* What the watches report: on the directory, its entries; on data.mdb,
 * its size and links; on each directory above, its entries. A watch
 * reports its own end (IN_IGNORED) and the queue's overflow always. */
#define DIR_EVENTS                                                                  \
  (IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |   \
   IN_DELETE_SELF | IN_MOVE_SELF)
#define DATA_EVENTS (IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)
#define UP_EVENTS                                                                   \
  (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF)

/* Watches the directory above each component of id->path, for that
 * component's name. False when one cannot be watched. */
static bool watch_up(resv__file_identity_t *id) {
  char dir[sizeof id->path];
  size_t len = strlen(id->path);
  for (size_t at = 0; at < len; at++) {
    if (id->path[at] != '/') continue;
    size_t end = at + 1;
    while (end < len && id->path[end] != '/') end++;
    if (id->n_up == RESV__FILE_WATCH_UP || end - at - 1 == 0) return false;
    memcpy(dir, id->path, at ? at : 1);
    dir[at ? at : 1] = '\0';
    int wd = inotify_add_watch(id->ino, dir, UP_EVENTS | IN_ONLYDIR | IN_DONT_FOLLOW);
    if (wd < 0) return false;
    id->up[id->n_up].wd = wd;
    id->up[id->n_up].off = (unsigned short)(at + 1);
    id->up[id->n_up].len = (unsigned short)(end - at - 1);
    id->n_up++;
  }
  return true;
}

/* Sets the watches up; without them (a path through a symbolic link or
 * not in its plain form, no inotify left) every check looks at the files. */
static void watch_start(resv__file_identity_t *id) {
  char real[PATH_MAX], data[sizeof id->path + 16];
  id->n_up = 0;
  if (!realpath(id->path, real) || strcmp(real, id->path) != 0) return;
  if ((id->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) return;
  snprintf(data, sizeof data, "%s/data.mdb", id->path);
  id->dir_wd = inotify_add_watch(id->ino, id->path, DIR_EVENTS | IN_ONLYDIR | IN_DONT_FOLLOW);
  id->data_wd = inotify_add_watch(id->ino, data, DATA_EVENTS | IN_DONT_FOLLOW);
  if (id->dir_wd < 0 || id->data_wd < 0 || !watch_up(id)) {
    close(id->ino);
    id->ino = -1;
    return;
  }
  resv__file_ring_open(&id->ring, id->ino);
  atomic_store(&id->watching, true);
}

int resv__file_identity_init(resv__file_identity_t *id, MDB_env *mdb, const char *path,
                             bool watch) {
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
  atomic_init(&id->path_at, resv__coarse_ms() + PATH_CHECK_MS);
  atomic_init(&id->short_size, 0);
  atomic_init(&id->short_need, 0);
  atomic_init(&id->size, 0);
  id->measured = false;
  pthread_mutex_init(&id->drain, NULL);
  id->ready = true;
  /* Watched before the first measure: a change after it is an event. */
  id->ino = -1;
  memset(&id->ring, 0, sizeof id->ring); /* no ring until the watches stand */
  atomic_init(&id->watching, false);
  if (watch) watch_start(id);
  resv__file_identity_grow(id, mdb);
  return 0;
}

void resv__file_identity_close(resv__file_identity_t *id) {
  if (!id->ready) return;
  resv__file_ring_close(&id->ring);
  if (id->ino >= 0) close(id->ino);
  pthread_mutex_destroy(&id->drain);
  id->ready = false;
}

void resv__file_identity_grow(resv__file_identity_t *id, MDB_env *mdb) {
  MDB_envinfo info;
  struct stat st;
  if (atomic_load_explicit(&id->state, memory_order_relaxed) || mdb_env_info(mdb, &info) != 0)
    return;
  int64_t need = (int64_t)(info.me_last_pgno + 1) * (int64_t)id->psize;
  int64_t room = GROW_PAGES * (int64_t)id->psize;
  /* Watched, the size kept is the file's until an event says otherwise
   * (a stale one only delays the growth to the next write). */
  int64_t size = atomic_load_explicit(&id->size, memory_order_relaxed);
  if (!atomic_load_explicit(&id->watching, memory_order_relaxed) || size < need + room) {
    if (fstat(id->fd, &st) != 0) return;
    size = (int64_t)st.st_size;
  }
  /* A failure leaves the file as it was: LMDB writes the pages it uses. */
  if (size < need + room && ftruncate(id->fd, (off_t)(need + 2 * room)) != 0) return;
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

static int paths_now(resv__file_identity_t *id) {
  int state = atomic_load_explicit(&id->state, memory_order_relaxed);
  if (state) return state;
  if (!same_file(id->path, "data.mdb", id->data_dev, id->data_ino) ||
      !same_file(id->path, "lock.mdb", id->lock_dev, id->lock_ino))
    return found(id, RESV__FILE_GONE);
  return 0;
}

/* Measures data.mdb into id->size: RESV__FILE_GONE once unlinked,
 * UNMEASURED when fstat fails (nothing is known then). */
#define UNMEASURED 1
static int measure(resv__file_identity_t *id) {
  struct stat st;
  if (fstat(id->fd, &st) != 0) return UNMEASURED;
  if (st.st_nlink == 0) return found(id, RESV__FILE_GONE);
  atomic_store_explicit(&id->size, (int64_t)st.st_size, memory_order_relaxed);
  return 0;
}

/* data.mdb's size (id->size, measured) against the newest meta page:
 * before LMDB reads the meta, the two meta pages. */
static int whole(resv__file_identity_t *id, MDB_env *mdb) {
  MDB_envinfo info;
  int64_t size = atomic_load_explicit(&id->size, memory_order_relaxed);
  int64_t need = 2 * (int64_t)id->psize; /* the meta pages, before LMDB reads them */
  if (size >= need && mdb_env_info(mdb, &info) == 0) {
    need = (int64_t)(info.me_last_pgno + 1) * (int64_t)id->psize;
    /* A commit between the measure and the meta may have grown both. */
    if (size < need && measure(id) != 0) return atomic_load(&id->state);
    size = atomic_load_explicit(&id->size, memory_order_relaxed);
  }
  if (size >= need) return 0;
  /* Not kept: see the top of the file. */
  atomic_store(&id->short_size, size);
  atomic_store(&id->short_need, need);
  return RESV__FILE_SHORT;
}

/* What one event of the watches asks: a measure of data.mdb, a look at
 * the paths, or (the watch gone) both and no more watching. */
static void event(resv__file_identity_t *id, const struct inotify_event *ev, bool *size,
                  bool *paths, bool *lost) {
  if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT)) {
    *lost = *paths = *size = true;
  } else if (ev->mask & IN_Q_OVERFLOW) {
    *paths = *size = true;
  } else if (ev->wd == id->data_wd) {
    *size = true;
    if (ev->mask & IN_ATTRIB) *paths = true;
  } else if (ev->wd == id->dir_wd) {
    bool data = ev->len && strcmp(ev->name, "data.mdb") == 0;
    if (data || (ev->len && strcmp(ev->name, "lock.mdb") == 0)) {
      *size = *size || data;
      if (!(ev->mask & IN_MODIFY)) *paths = true;
    }
  } else {
    for (int i = 0; i < id->n_up; i++)
      if (ev->wd == id->up[i].wd && ev->len && strlen(ev->name) == id->up[i].len &&
          memcmp(ev->name, id->path + id->up[i].off, id->up[i].len) == 0)
        *paths = true;
  }
}

static _Atomic uint64_t queue_reads;

uint64_t resv__file_identity_reads(void) { return atomic_load(&queue_reads); }

/* Reads every event queued (under id->drain). */
static void drain(resv__file_identity_t *id, bool *size, bool *paths, bool *lost) {
  char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
  atomic_fetch_add_explicit(&queue_reads, 1, memory_order_relaxed);
  for (;;) {
    ssize_t n = read(id->ino, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) { /* cannot read the watches: as without them */
      *lost = *paths = *size = true;
      return;
    }
    for (ssize_t at = 0; at + (ssize_t)sizeof(struct inotify_event) <= n;) {
      const struct inotify_event *ev = (const void *)(buf + at);
      event(id, ev, size, paths, lost);
      at += (ssize_t)(sizeof *ev + ev->len);
    }
  }
}

/* The check with the watches standing: what they saw since the last. */
static int check_watched(resv__file_identity_t *id, MDB_env *mdb, bool *paths) {
  bool size = false, lost = false;
  pthread_mutex_lock(&id->drain);
  if (resv__file_ring_news(&id->ring)) drain(id, &size, paths, &lost);
  if (lost) atomic_store(&id->watching, false);
  int rc = 0;
  if (size || !id->measured) {
    id->measured = (rc = measure(id)) == 0;
    if (rc == UNMEASURED) rc = 0;
  }
  if (rc == 0) rc = whole(id, mdb);
  if (rc == RESV__FILE_SHORT) id->measured = false; /* measured again next time */
  pthread_mutex_unlock(&id->drain);
  return rc;
}

int resv__file_identity_check(resv__file_identity_t *id, MDB_env *mdb, bool paths) {
  int state = atomic_load_explicit(&id->state, memory_order_relaxed);
  if (state) return state;
  int rc;
  if (atomic_load_explicit(&id->watching, memory_order_acquire)) {
    rc = check_watched(id, mdb, &paths);
  } else {
    rc = measure(id);
    if (rc == UNMEASURED) return 0;
    if (rc == 0) rc = whole(id, mdb);
  }
  if (rc) return rc;
  if (!paths) {
    int64_t now = resv__coarse_ms();
    int64_t at = atomic_load_explicit(&id->path_at, memory_order_relaxed);
    if (now < at || !atomic_compare_exchange_strong(&id->path_at, &at, now + PATH_CHECK_MS))
      return 0;
  }
  return paths_now(id);
}

int resv__file_identity_paths(resv__file_identity_t *id) {
  if (atomic_load_explicit(&id->watching, memory_order_acquire))
    return atomic_load_explicit(&id->state, memory_order_relaxed);
  return paths_now(id);
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
