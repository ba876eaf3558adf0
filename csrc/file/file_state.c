/* file_state.c: the file store's state file, resv.state, and its
 * checkpoints: how a store with sync = "process" knows, at open, whether
 * a crash of the OS may have damaged it.
 *
 * With sync = "process" LMDB commits without syncing (MDB_NOSYNC): the
 * OS writes the pages back in any order, so after a crash of the OS the
 * file may be damaged in ways LMDB cannot see (a meta page that names
 * pages never written). So the store keeps a state file beside data.mdb:
 * "clean" means every commit is on the disk, "dirty" that commits may
 * not be. The rules:
 * - the first write after a checkpoint, holding LMDB's writer lock and
 *   before it writes a page, makes the file say dirty (a temporary
 *   written, fsynced and renamed over resv.state, the directory fsynced);
 * - a checkpoint, holding the writer lock, syncs data.mdb, then records
 *   clean the same way. Each process checkpoints its own writes once it
 *   has been idle for CHECKPOINT_IDLE_MS (a thread per environment;
 *   RESV_CHECKPOINT_IDLE_MS in the environment sets another, for tests),
 *   and at close.
 * Each record names the boot (/proc/sys/kernel/random/boot_id, or
 * RESV_BOOT_ID from the environment, which the crash-state test uses to
 * fake a reboot). At open, before LMDB reads data.mdb: dirty in an earlier
 * boot is refused (or, with on_os_crash = "reset", the files are moved
 * aside into <path>.crashed-<UTC time> and the store starts empty); dirty
 * in this boot opens (only processes crashed: the page cache holds every
 * commit) and checkpoints. sync = "disk" syncs every commit, so its writes
 * never make the state dirty; the file is written there too, at creation,
 * and marks the directory as a store that has had data: a missing or
 * empty data.mdb beside it is damage, never a new store.
 *
 * Several processes share the state without a system call per write:
 * each maps the file it last read (its content never changes after the
 * rename), and the process that replaces it sets the old file's last
 * "replaced" digit through its own map; every process sees that byte
 * under the writer lock and reads the new file only then. */
#include "file_state.h"
#include "file_check.h"    /* the files, before a transaction maps them */
#include "file_internal.h" /* the write gate */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHECKPOINT_IDLE_MS 200
/* How long a checkpoint waits for the write gate before it tries again. */
#define CHECKPOINT_GATE_MS 1000
/* Pages of data.mdb allocated ahead of the last one used (sync =
 * "process"), and the least left before the next allocation: more than
 * one write transaction adds. */
#define ROOM_AHEAD_PAGES 2048
#define ROOM_LEFT_PAGES 512
#define STATE_MAX 512
#define BOOT_MAX 64

struct resv__file_state {
  char path[PATH_MAX];
  /* The directory at open (dir_known false: it could not be looked at):
   * the state is read and written only while the path still leads to it,
   * never in another directory put at the path later (a store whose
   * directory was replaced must not write the new store's state). */
  bool dir_known;
  dev_t dir_dev;
  ino_t dir_ino;
  char boot[BOOT_MAX + 1];
  bool disk;
  bool fresh;    /* no state file at open: record one at start */
  int64_t idle_ms; /* CHECKPOINT_IDLE_MS, or RESV_CHECKPOINT_IDLE_MS */
  bool recheck;  /* dirty in this boot at open: checkpoint at start */
  /* The state file this process last read or wrote, mapped: map_size
   * bytes, whose digit at map_size - 2 turns from 0 to 1 once another
   * file replaces it. Read and replaced under LMDB's writer lock only. */
  char *map;
  size_t map_size;
  bool map_dirty;
  MDB_env *env;
  pthread_rwlock_t *resize;
  resv__gate_t *gate; /* every writer's, taken before LMDB's writer lock */
  resv__file_identity_t *id; /* checked before each checkpoint's transaction */
  /* data.mdb is allocated on the disk up to room (sync = "process"); 0
   * when the file system cannot allocate ahead. Under the writer lock. */
  int64_t room;
  bool no_room_ahead;
  /* The checkpoint thread (sync = "process"). */
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  bool stop;
  atomic_bool wrote; /* a write since the thread last looked */
  _Atomic int64_t last_write_ms;
};

/* ---- the file --------------------------------------------------------- */

static void name_in(char *buf, size_t size, const char *dir, const char *name) {
  snprintf(buf, size, "%s/%s", dir, name);
}

static void read_boot_id(char *boot) {
  const char *env = getenv("RESV_BOOT_ID");
  boot[0] = 0;
  if (env && *env) {
    snprintf(boot, BOOT_MAX + 1, "%s", env);
  } else {
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
      if (!fgets(boot, BOOT_MAX + 1, f)) boot[0] = 0;
      fclose(f);
    }
  }
  for (char *c = boot; *c; c++)
    if (*c == '\n' || *c == ' ') *c = 0;
  if (!boot[0]) snprintf(boot, BOOT_MAX + 1, "unknown");
}

/* Parses "resv-state 1\nstate S\nboot B\nreplaced D\n". */
static bool parse_state(const char *text, size_t len, bool *dirty, char *boot) {
  char state[16], replaced[4];
  if (len < 8 || len >= STATE_MAX || text[len - 1] != '\n') return false;
  char copy[STATE_MAX];
  memcpy(copy, text, len);
  copy[len] = 0;
  if (sscanf(copy, "resv-state 1\nstate %15s\nboot %64s\nreplaced %3s\n", state, boot,
             replaced) != 3)
    return false;
  if (strcmp(state, "dirty") && strcmp(state, "clean")) return false;
  *dirty = strcmp(state, "dirty") == 0;
  return true;
}

/* Maps the open state file fd as this process's current one. */
static int map_file(resv__file_state_t *s, int fd, bool dirty) {
  struct stat st;
  if (fstat(fd, &st) != 0) return errno;
  if (st.st_size < 8 || st.st_size >= STATE_MAX) return EINVAL;
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return errno;
  if (s->map) munmap(s->map, s->map_size);
  s->map = m;
  s->map_size = (size_t)st.st_size;
  s->map_dirty = dirty;
  return 0;
}

static bool map_current(const resv__file_state_t *s) {
  return s->map && __atomic_load_n(&s->map[s->map_size - 2], __ATOMIC_ACQUIRE) == '0';
}

/* Reads path's resv.state: 0 (*dirty, boot filled), ENOENT, EINVAL (not
 * a state file) or another errno. With s, maps it as the current one. */
/* Whether s's path still leads to the directory it had at open. */
static bool same_dir(const resv__file_state_t *s) {
  struct stat st;
  return !s->dir_known ||
         (stat(s->path, &st) == 0 && st.st_dev == s->dir_dev && st.st_ino == s->dir_ino);
}

static int read_state(const char *dir, resv__file_state_t *s, bool *dirty, char *boot) {
  char name[PATH_MAX + 16], text[STATE_MAX];
  name_in(name, sizeof name, dir, "resv.state");
  if (s && !same_dir(s)) return ESTALE;
  int fd = open(name, (s ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = pread(fd, text, sizeof text, 0);
  int rc = n < 0 ? errno : parse_state(text, (size_t)n, dirty, boot) ? 0 : EINVAL;
  if (rc == 0 && s) rc = map_file(s, fd, *dirty);
  close(fd);
  return rc;
}

static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int rc = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  return rc;
}

/* Records the state durably: a temporary written and fsynced, renamed
 * over resv.state, the directory fsynced; then marks the file it replaced
 * and maps the new one. Under the writer lock (or before anyone shares
 * the store). */
static int write_state(resv__file_state_t *s, bool dirty) {
  char tmp[PATH_MAX + 16], name[PATH_MAX + 16], text[STATE_MAX];
  name_in(tmp, sizeof tmp, s->path, "resv.state.tmp");
  name_in(name, sizeof name, s->path, "resv.state");
  int len = snprintf(text, sizeof text, "resv-state 1\nstate %s\nboot %s\nreplaced 0\n",
                     dirty ? "dirty" : "clean", s->boot);
  if (!same_dir(s)) return ESTALE;
  int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return errno;
  int rc = 0;
  if (pwrite(fd, text, (size_t)len, 0) != len)
    rc = errno ? errno : EIO;
  else if (fsync(fd) != 0 || rename(tmp, name) != 0)
    rc = errno;
  else
    rc = fsync_dir(s->path);
  if (rc == 0) {
    if (s->map) __atomic_store_n(&s->map[s->map_size - 2], '1', __ATOMIC_RELEASE);
    rc = map_file(s, fd, dirty);
  }
  close(fd);
  return rc;
}

/* ---- checkpoints -------------------------------------------------------- */

/* Holding the write gate and LMDB's writer lock (an empty write
 * transaction): syncs data.mdb and records clean, unless the state is
 * clean already. Waits for the gate until deadline (resv__monotonic_ms's
 * clock): a writer frozen inside a commit costs a checkpoint, never a
 * caller. The files are checked first, as before every transaction: a
 * data.mdb truncated while open would kill the process at LMDB's first
 * read of its map (SIGBUS), and files removed or replaced are no longer
 * this store's to sync. Returns 0, an LMDB code, an errno (ETIMEDOUT for
 * the gate) or resv__file_identity_check's RESV__FILE_GONE or
 * RESV__FILE_SHORT. */
static int checkpoint(resv__file_state_t *s, int64_t deadline) {
  MDB_txn *txn;
  resv_error_t gate_err;
  int rc;
  if (!resv__gate_try(s->gate) &&
      !resv__gate_enter(s->gate, deadline, "checkpoint", &gate_err))
    return ETIMEDOUT;
  if ((rc = resv__file_identity_check(s->id, s->env, false))) goto leave_gate;
  for (;;) { /* as file_txn.c's resv__file_begin_txn: adopt a map another process grew */
    pthread_rwlock_rdlock(s->resize);
    if ((rc = mdb_txn_begin(s->env, NULL, 0, &txn)) != MDB_MAP_RESIZED) break;
    pthread_rwlock_unlock(s->resize);
    pthread_rwlock_wrlock(s->resize);
    rc = mdb_env_set_mapsize(s->env, 0);
    pthread_rwlock_unlock(s->resize);
    if (rc) goto leave_gate;
  }
  if (rc == 0) {
    bool dirty = true, unused;
    char boot[BOOT_MAX + 1];
    if (map_current(s)) {
      dirty = s->map_dirty;
    } else {
      int r = read_state(s->path, s, &unused, boot);
      if (r == 0) dirty = s->map_dirty;
    }
    if (dirty && (rc = mdb_env_sync(s->env, 1)) == 0) rc = write_state(s, false);
    mdb_txn_abort(txn);
  }
  pthread_rwlock_unlock(s->resize);
leave_gate:
  resv__gate_leave(s->gate);
  return rc;
}

static void *checkpoint_thread(void *arg) {
  resv__file_state_t *s = arg;
  pthread_mutex_lock(&s->mutex);
  while (!s->stop) {
    if (!atomic_load(&s->wrote)) {
      pthread_cond_wait(&s->cond, &s->mutex);
      continue;
    }
    int64_t due = atomic_load(&s->last_write_ms) + s->idle_ms;
    int64_t now = resv__monotonic_ms();
    if (now < due) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      int64_t ns = ts.tv_nsec + (due - now) * 1000000;
      ts.tv_sec += ns / 1000000000;
      ts.tv_nsec = ns % 1000000000;
      pthread_cond_timedwait(&s->cond, &s->mutex, &ts);
      continue;
    }
    atomic_store(&s->wrote, false);
    pthread_mutex_unlock(&s->mutex);
    int rc = checkpoint(s, resv__add_ms_sat(resv__monotonic_ms(), CHECKPOINT_GATE_MS));
    if (rc != 0 && rc != RESV__FILE_GONE) {
      /* tried again after the next idle moment (the files gone, never) */
      atomic_store(&s->last_write_ms, resv__monotonic_ms());
      atomic_store(&s->wrote, true);
    }
    pthread_mutex_lock(&s->mutex);
  }
  pthread_mutex_unlock(&s->mutex);
  return NULL;
}

bool resv__file_state_marked(const resv__file_state_t *s) {
  return !s || s->disk || (map_current(s) && s->map_dirty);
}

int resv__file_state_dirty(resv__file_state_t *s) {
  if (!s || s->disk) return 0;
  if (map_current(s) && s->map_dirty) return 0;
  bool dirty = false;
  char boot[BOOT_MAX + 1];
  int rc = read_state(s->path, s, &dirty, boot);
  if (rc == 0 && dirty) return 0;
  if (rc != 0 && rc != ENOENT && rc != EINVAL) return rc;
  return write_state(s, true);
}

/* ---- room on the disk (sync = "process") ---------------------------------
 *
 * With MDB_WRITEMAP LMDB sizes data.mdb to the whole map, a sparse file,
 * and writes its pages through the map: on a full disk the first store
 * into a page not yet allocated would kill the process (SIGBUS) instead
 * of failing a call. So the file is allocated ahead (fallocate, which
 * keeps the data) before a write transaction can reach past it; a full
 * disk then answers ENOSPC before anything is written. */
int resv__file_state_room(resv__file_state_t *s) {
  if (!s || s->disk || s->no_room_ahead) return 0;
  MDB_envinfo info;
  MDB_stat st;
  int fd;
  if (mdb_env_info(s->env, &info) || mdb_env_stat(s->env, &st) || mdb_env_get_fd(s->env, &fd))
    return 0;
  int64_t page = st.ms_psize, used = ((int64_t)info.me_last_pgno + 1) * page;
  if (used + ROOM_LEFT_PAGES * page <= s->room) return 0;
  int64_t to = used + ROOM_AHEAD_PAGES * page;
  if (to > (int64_t)info.me_mapsize) to = (int64_t)info.me_mapsize;
  if (to <= s->room) return 0;
  if (fallocate(fd, 0, (off_t)s->room, (off_t)(to - s->room)) != 0) {
    if (errno == ENOSPC || errno == EDQUOT) return ENOSPC;
    s->no_room_ahead = true; /* not supported here: LMDB as it is */
    return 0;
  }
  s->room = to;
  return 0;
}

void resv__file_state_wrote(resv__file_state_t *s) {
  if (!s || s->disk) return;
  atomic_store_explicit(&s->last_write_ms, resv__coarse_ms(), memory_order_relaxed);
  if (atomic_load_explicit(&s->wrote, memory_order_relaxed)) return;
  pthread_mutex_lock(&s->mutex);
  atomic_store(&s->wrote, true);
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->mutex);
}

/* ---- open and close ----------------------------------------------------- */

/* Moves path's files into a new sibling directory <path>.crashed-<UTC>,
 * named into kept. */
static bool move_aside(const char *path, char *kept, size_t size, resv_error_t *err) {
  static const char *const files[] = {"data.mdb", "lock.mdb", "resv.state", "resv.state.tmp"};
  char stamp[32], parent[PATH_MAX];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  int made = -1;
  for (int i = 0; i < 100 && made != 0; i++) {
    if (i == 0) snprintf(kept, size, "%s.crashed-%s", path, stamp);
    else snprintf(kept, size, "%s.crashed-%s-%d", path, stamp, i);
    made = mkdir(kept, 0777);
    if (made != 0 && errno != EEXIST) break;
  }
  if (made != 0)
    return resv__fail(err, RESV_EUNAVAILABLE, "path: cannot make %s: %s", kept, strerror(errno));
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char from[PATH_MAX + 16], to[PATH_MAX + 32];
    name_in(from, sizeof from, path, files[i]);
    snprintf(to, sizeof to, "%s/%s", kept, files[i]);
    if (rename(from, to) != 0 && errno != ENOENT)
      return resv__fail(err, RESV_EUNAVAILABLE, "path: cannot move %s to %s: %s", from, to,
                        strerror(errno));
  }
  snprintf(parent, sizeof parent, "%s/..", path);
  fsync_dir(kept);
  fsync_dir(path);
  fsync_dir(parent);
  return true;
}

/* What an open finds: 0 fine (*fresh: a new store), 1 crashed in an
 * earlier boot, 2 damaged otherwise (err filled for 1 and 2). */
static int inspect(const char *path, const char *boot, bool *fresh, bool *recheck,
                   resv_error_t *err) {
  char data[PATH_MAX + 16], old_boot[BOOT_MAX + 1];
  struct stat st;
  bool dirty = false;
  name_in(data, sizeof data, path, "data.mdb");
  bool has_data = stat(data, &st) == 0 && st.st_size > 0;
  int rc = read_state(path, NULL, &dirty, old_boot);
  *fresh = rc == ENOENT;
  *recheck = false;
  if (rc == ENOENT) return 0; /* a new store, or one made before state files */
  if (rc != 0)
    return resv__fail(err, RESV_EFORMAT,
                      "%s/resv.state is damaged (%s): run resv recover --path %s", path,
                      rc == EINVAL ? "not a resv state file" : strerror(rc), path), 2;
  if (!has_data)
    return resv__fail(err, RESV_EFORMAT,
                      "%s is damaged: its data.mdb is missing or empty, but its "
                      "resv.state says it has had data: run resv recover --path %s",
                      path, path), 2;
  if (dirty && strcmp(old_boot, boot) != 0)
    return resv__fail(err, RESV_EFORMAT,
                      "%s may be damaged by a crash of the OS (its last commits came "
                      "after its last checkpoint, in an earlier boot): run resv recover "
                      "--path %s, or open it with on_os_crash = \"reset\"", path, path), 1;
  *recheck = dirty;
  return 0;
}

resv__file_state_t *resv__file_state_open(const char *path, bool disk, bool reset,
                                          resv_error_t *err) {
  resv__file_state_t *s = calloc(1, sizeof *s);
  if (!s) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a file store");
    return NULL;
  }
  snprintf(s->path, sizeof s->path, "%s", path);
  read_boot_id(s->boot);
  s->disk = disk;
  const char *idle = getenv("RESV_CHECKPOINT_IDLE_MS");
  s->idle_ms = idle && atoll(idle) > 0 ? atoll(idle) : CHECKPOINT_IDLE_MS;
  pthread_mutex_init(&s->mutex, NULL);
  pthread_condattr_t attr; /* the thread's deadlines are on the monotonic clock */
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cond, &attr);
  pthread_condattr_destroy(&attr);
  atomic_init(&s->wrote, false);
  atomic_init(&s->last_write_ms, 0);
  int found = inspect(path, s->boot, &s->fresh, &s->recheck, err);
  if (found == 1 && reset) {
    char kept[PATH_MAX + 64];
    if (move_aside(path, kept, sizeof kept, err)) {
      fprintf(stderr, "resv: %s may have been damaged by a crash of the OS: its files "
                      "are now in %s, and the store starts empty\n", path, kept);
      found = 0;
      s->fresh = true;
    }
  }
  if (found != 0) {
    resv__file_state_close(s);
    return NULL;
  }
  struct stat st;
  if (stat(path, &st) == 0) {
    s->dir_known = true;
    s->dir_dev = st.st_dev;
    s->dir_ino = st.st_ino;
  }
  return s;
}

bool resv__file_state_start(resv__file_state_t *s, MDB_env *env, pthread_rwlock_t *resize,
                            resv__gate_t *gate, resv__file_identity_t *id, int64_t deadline,
                            resv_error_t *err) {
  s->env = env;
  s->resize = resize;
  s->gate = gate;
  s->id = id;
  if (s->fresh || s->recheck) {
    int rc = checkpoint(s, deadline);
    if (rc == ETIMEDOUT)
      return resv__fail(err, RESV_ETIMEOUT, "open: %s: another writer held the store's "
                        "write gate past the deadline", s->path);
    if (rc)
      return resv__fail(err, RESV_EUNAVAILABLE, "open: cannot record %s/resv.state: %s",
                        s->path, mdb_strerror(rc));
  }
  if (!s->disk) {
    if (resv__thread_start(&s->thread, checkpoint_thread, s) != 0)
      return resv__fail(err, RESV_ENOMEM, "open: cannot start the checkpoint thread");
    s->thread_started = true;
  }
  return true;
}

void resv__file_state_close(resv__file_state_t *s) {
  if (!s) return;
  if (s->thread_started) {
    pthread_mutex_lock(&s->mutex);
    s->stop = true;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->mutex);
    pthread_join(s->thread, NULL);
    checkpoint(s, resv__add_ms_sat(resv__monotonic_ms(), CHECKPOINT_GATE_MS));
  }
  if (s->map) munmap(s->map, s->map_size);
  pthread_mutex_destroy(&s->mutex);
  pthread_cond_destroy(&s->cond);
  free(s);
}

/* ---- resv_store_recover ------------------------------------------------- */

int resv_store_recover(const char *path, char *kept, size_t kept_size, resv_error_t *err) {
  char boot[BOOT_MAX + 1], buf[PATH_MAX + 64];
  bool fresh, recheck;
  resv_error_t why = {0};
  if (!path || !*path) return resv__fail(err, RESV_EINVALID, "path: empty"), -1;
  read_boot_id(boot);
  if (inspect(path, boot, &fresh, &recheck, &why) == 0) {
    int sound = resv__file_sound(path, err); /* file_walk.c */
    if (sound != 0) return sound > 0 ? 0 : -1;
  }
  if (!move_aside(path, buf, sizeof buf, err)) return -1;
  if (kept && kept_size) snprintf(kept, kept_size, "%s", buf);
  return 1;
}
