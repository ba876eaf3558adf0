/* crash_record.c: the recording half of crash_state (crash_state.c
 * says what the program does): the log of every write and barrier to the
 * store's files, kept by open, close, pwrite, write, writev, fsync,
 * fdatasync, ftruncate, rename and msync defined here (they interpose
 * the C library's for liblmdb.so and libresv alike), and the workload
 * whose answers are kept with their points in the log. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "resv.h"
#include "crash.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the log ---------------------------------------------------------- */

static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;
bool recording;
char store_dir[PATH_MAX];
event_t *events;
size_t n_events;
static size_t cap_events;
unsigned char *bytes;
static size_t n_bytes, cap_bytes;
int fd_inode[MAX_FDS]; /* -1 untracked, -2 the directory */
static bool fd_dsync[MAX_FDS];
int state_name = -1, tmp_name = -1; /* inodes bound to the names */
int n_inodes;

static void *grow(void *p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return p;
  size_t c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  p = realloc(p, c * size);
  if (!p) abort();
  *cap = c;
  return p;
}

void put_bytes(file_t *f, int64_t off, const unsigned char *p, size_t len) {
  size_t end = (size_t)off + len;
  f->p = grow(f->p, &f->cap, end, 1);
  if (end > f->len) {
    memset(f->p + f->len, 0, end - f->len);
    f->len = end;
  }
  memcpy(f->p + off, p, len);
}


file_t model; /* data.mdb as the log says it is */
int snap_fd = -1;

void resize(file_t *f, size_t len) {
  f->p = grow(f->p, &f->cap, len, 1);
  if (len > f->len) memset(f->p + f->len, 0, len - f->len);
  f->len = len;
}

static void log_event(int type, int inode, int64_t off, const void *buf, size_t len) {
  events = grow(events, &cap_events, n_events + 1, sizeof *events);
  bytes = grow(bytes, &cap_bytes, n_bytes + len, 1);
  if (len) memcpy(bytes + n_bytes, buf, len);
  events[n_events++] = (event_t){type, inode, off, len, n_bytes};
  n_bytes += len;
  if (inode == 0 && type == EV_WRITE && len) put_bytes(&model, off, buf, len);
  if (inode == 0 && type == EV_TRUNC) resize(&model, (size_t)off);
}

/* data.mdb as the log says it is. With MDB_WRITEMAP, LMDB writes its
 * pages through its map, which no call shows: before each event is
 * logged, and at each answer, the file is read and each 4 KiB page that
 * differs from the model is logged as written then. (Between two looks a
 * page may have had other versions; with sync = "process" none may change
 * before the state file says dirty, which these looks do catch.) */

static uint64_t meta_last_page(const unsigned char *page) {
  uint64_t last;
  memcpy(&last, page + 136, sizeof last); /* MDB_meta's mm_last_pg */
  return last;
}

static void snapshot(void) {
  static unsigned char *buf;
  static size_t cap;
  if (!recording || snap_fd < 0) return;
  struct stat st;
  unsigned char metas[2 * PAGE];
  if (fstat(snap_fd, &st) != 0 || pread(snap_fd, metas, sizeof metas, 0) != sizeof metas) return;
  uint64_t last = meta_last_page(metas);
  if (meta_last_page(metas + PAGE) > last) last = meta_last_page(metas + PAGE);
  size_t extent = (size_t)(last + 1 + 64) * PAGE;
  if (extent < model.len) extent = model.len;
  if (extent > (size_t)st.st_size) extent = (size_t)st.st_size;
  buf = grow(buf, &cap, extent, 1);
  ssize_t n = pread(snap_fd, buf, extent, 0);
  for (size_t off = 0; n > 0 && off < (size_t)n; off += PAGE) {
    size_t len = (size_t)n - off < PAGE ? (size_t)n - off : PAGE;
    bool same;
    if (off + len <= model.len) {
      same = !memcmp(buf + off, model.p + off, len);
    } else { /* past the model's end: only zeros (a hole) are nothing new */
      same = true;
      for (size_t i = 0; i < len && same; i++) same = buf[off + i] == 0;
    }
    if (same) continue;
    log_event(EV_WRITE, 0, (int64_t)off, buf + off, len);
    put_bytes(&model, (int64_t)off, buf + off, len);
  }
}

static size_t log_position(void) {
  pthread_mutex_lock(&log_mutex);
  snapshot();
  size_t n = n_events;
  pthread_mutex_unlock(&log_mutex);
  return n;
}

/* The file of the store directory path names: 0 data.mdb, 1 resv.state,
 * 2 resv.state.tmp, 3 the directory itself, -1 another. */
static int which(const char *path) {
  size_t n = strlen(store_dir);
  if (!recording || strncmp(path, store_dir, n)) return -1;
  if (!path[n]) return 3;
  if (path[n] != '/') return -1;
  const char *b = path + n + 1;
  return !strcmp(b, "data.mdb") ? 0 : !strcmp(b, "resv.state") ? 1
         : !strcmp(b, "resv.state.tmp") ? 2 : -1;
}

/* ---- the interposed calls ---------------------------------------------- */

/* Exported even under -fvisibility=hidden: liblmdb.so's calls must find them. */
#define INTERPOSED __attribute__((visibility("default")))
#define REAL(name) static __typeof__(name) *real_##name; \
  if (!real_##name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

INTERPOSED int open(const char *path, int flags, ...) {
  REAL(open);
  mode_t mode = 0;
  if (flags & O_CREAT) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  pthread_mutex_lock(&log_mutex);
  int w = which(path);
  bool existed = w == 2 ? access(path, F_OK) == 0 : true;
  int fd = real_open(path, flags, mode);
  if (fd >= 0 && fd < MAX_FDS) {
    fd_inode[fd] = -1;
    fd_dsync[fd] = (flags & O_DSYNC) != 0;
    if (w == 0) fd_inode[fd] = 0;
    if (w == 1) fd_inode[fd] = state_name;
    if (w == 2) { /* truncated or new: a new file as far as a crash goes */
      if (!existed || tmp_name < 0 || (flags & O_TRUNC)) tmp_name = n_inodes++;
      fd_inode[fd] = tmp_name;
    }
    if (w == 3) fd_inode[fd] = -2;
  }
  pthread_mutex_unlock(&log_mutex);
  return fd;
}

INTERPOSED int close(int fd) {
  REAL(close);
  pthread_mutex_lock(&log_mutex);
  if (fd >= 0 && fd < MAX_FDS) fd_inode[fd] = -1;
  int rc = real_close(fd);
  pthread_mutex_unlock(&log_mutex);
  return rc;
}

static bool tracked(int fd) { return recording && fd >= 0 && fd < MAX_FDS && fd_inode[fd] >= 0; }

/* An O_DSYNC write is its own barrier. LMDB writes its meta page that way
 * only right after an fdatasync of the same file, so the barrier covers
 * no earlier write the OS still held; fail loudly if that ever changes. */
static void logged_write(int fd, int64_t off, const void *buf, size_t len) {
  log_event(EV_WRITE, fd_inode[fd], off, buf, len);
  if (fd_dsync[fd]) {
    for (size_t i = n_events - 1; i-- > 0;) {
      if (events[i].inode != fd_inode[fd]) continue;
      if (events[i].type == EV_SYNC) break;
      if (events[i].type == EV_WRITE) {
        fprintf(stderr, "crash_state: an O_DSYNC write after unsynced writes\n");
        abort();
      }
    }
    log_event(EV_SYNC, fd_inode[fd], 0, NULL, 0);
  }
}

INTERPOSED ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
  REAL(pwrite);
  pthread_mutex_lock(&log_mutex);
  if (tracked(fd)) snapshot();
  ssize_t rc = real_pwrite(fd, buf, n, off);
  if (rc > 0 && tracked(fd)) logged_write(fd, off, buf, (size_t)rc);
  pthread_mutex_unlock(&log_mutex);
  return rc;
}

INTERPOSED ssize_t write(int fd, const void *buf, size_t n) {
  REAL(write);
  pthread_mutex_lock(&log_mutex);
  if (tracked(fd)) snapshot();
  off_t off = tracked(fd) ? lseek(fd, 0, SEEK_CUR) : 0;
  ssize_t rc = real_write(fd, buf, n);
  if (rc > 0 && tracked(fd)) logged_write(fd, off, buf, (size_t)rc);
  pthread_mutex_unlock(&log_mutex);
  return rc;
}

INTERPOSED ssize_t writev(int fd, const struct iovec *iov, int cnt) {
  REAL(writev);
  pthread_mutex_lock(&log_mutex);
  if (tracked(fd)) snapshot();
  off_t off = tracked(fd) ? lseek(fd, 0, SEEK_CUR) : 0;
  ssize_t rc = real_writev(fd, iov, cnt);
  if (rc > 0 && tracked(fd)) {
    size_t left = (size_t)rc;
    for (int i = 0; i < cnt && left; i++) {
      size_t n = iov[i].iov_len < left ? iov[i].iov_len : left;
      log_event(EV_WRITE, fd_inode[fd], off, iov[i].iov_base, n);
      off += (off_t)n;
      left -= n;
    }
    if (fd_dsync[fd]) log_event(EV_SYNC, fd_inode[fd], 0, NULL, 0);
  }
  pthread_mutex_unlock(&log_mutex);
  return rc;
}

static int synced(int fd, int rc) {
  if (rc == 0 && recording && fd >= 0 && fd < MAX_FDS) {
    if (fd_inode[fd] >= 0) log_event(EV_SYNC, fd_inode[fd], 0, NULL, 0);
    if (fd_inode[fd] == -2) log_event(EV_DIRSYNC, -1, 0, NULL, 0);
  }
  return rc;
}

INTERPOSED int fsync(int fd) {
  REAL(fsync);
  pthread_mutex_lock(&log_mutex);
  snapshot();
  int rc = synced(fd, real_fsync(fd));
  pthread_mutex_unlock(&log_mutex);
  return rc;
}

INTERPOSED int fdatasync(int fd) {
  REAL(fdatasync);
  pthread_mutex_lock(&log_mutex);
  snapshot();
  int rc = synced(fd, real_fdatasync(fd));
  pthread_mutex_unlock(&log_mutex);
  return rc;
}

/* MDB_WRITEMAP syncs its map with msync: a barrier for data.mdb (the
 * only file this program's libraries map and sync). */
INTERPOSED int msync(void *addr, size_t len, int flags) {
  REAL(msync);
  pthread_mutex_lock(&log_mutex);
  snapshot();
  int rc = real_msync(addr, len, flags);
  if (rc == 0 && recording && (flags & MS_SYNC)) log_event(EV_SYNC, 0, 0, NULL, 0);
  pthread_mutex_unlock(&log_mutex);
  return rc;
}

INTERPOSED int ftruncate(int fd, off_t len) {
  REAL(ftruncate);
  pthread_mutex_lock(&log_mutex);
  if (tracked(fd)) snapshot();
  int rc = real_ftruncate(fd, len);
  if (rc == 0 && tracked(fd) && fd_inode[fd] == 0) {
    log_event(EV_TRUNC, 0, len, NULL, 0); /* MDB_WRITEMAP: data.mdb to the map's size */
  } else if (rc == 0 && tracked(fd)) {
    fprintf(stderr, "crash_state: ftruncate of the state file is not modelled\n");
    abort();
  }
  pthread_mutex_unlock(&log_mutex);
  return rc;
}

INTERPOSED int rename(const char *from, const char *to) {
  REAL(rename);
  pthread_mutex_lock(&log_mutex);
  snapshot();
  int wf = which(from), wt = which(to);
  int rc = real_rename(from, to);
  if (rc == 0 && wf == 2 && wt == 1) {
    state_name = tmp_name;
    tmp_name = -1;
    log_event(EV_RENAME, state_name, 0, NULL, 0);
  } else if (rc == 0 && (wf >= 0 || wt >= 0)) {
    fprintf(stderr, "crash_state: rename %s -> %s is not modelled\n", from, to);
    abort();
  }
  pthread_mutex_unlock(&log_mutex);
  return rc;
}

/* ---- the workload -------------------------------------------------------- */

op_t ops[BURSTS * KEYS_PER_BURST * 3];
atomic_int n_ops;
int32_t sync_mode;
const char *mode_name;

void key_name(char *buf, size_t size, int k) { snprintf(buf, size, "key-%03d", k); }
void owner_name(char *buf, size_t size, int k) { snprintf(buf, size, "owner-%03d", k); }

resv_store_t *open_store(const char *dir, resv_error_t *err) {
  resv_options_t o = {.path = dir, .sync = sync_mode, .threads = WORKERS, .map_size = 64 << 20};
  resv_store_t *s = resv_store_open(&o, err);
  if (s) resv_store_set_time(s, T0);
  return s;
}

resv_type_t *type_of(resv_store_t *s) {
  return resv_store_type(s, "crash", 5, "state", 5, NULL);
}

/* One call of the workload, kept with where it began and was answered. */
static void run_op(resv_type_t *t, int op, int k, int state, int32_t want) {
  char key[32], owner[32];
  key_name(key, sizeof key, k);
  owner_name(owner, sizeof owner, k);
  resv_key_t rk = {resv_cstr(""), resv_cstr("seats"), resv_cstr(key)};
  resv_owner_t ro = {resv_cstr(""), resv_cstr(owner)};
  resv_answer_t a = {0};
  resv_error_t err = {0};
  op_t *o = &ops[atomic_fetch_add(&n_ops, 1)];
  o->key = k;
  o->state = state;
  o->begun = log_position();
  bool ok = op == 0   ? resv_reserve(t, &rk, &ro, resv_cstr("a"), HOUR, &a, &err)
            : op == 1 ? resv_confirm(t, &rk, &ro, 1, &a, &err)
                      : resv_release(t, &rk, &ro, &a, &err);
  o->answered = log_position();
  if (!ok || a.status != want) {
    fprintf(stderr, "crash_state: the workload's call on %s answered %s %s\n", key,
            ok ? resv_status_name(a.status) : resv_code_name(err.code), ok ? "" : err.message);
    exit(2);
  }
  resv_answer_clear(&a);
}

typedef struct {
  resv_type_t *type;
  int burst, worker;
} burst_t;

/* A worker's part of a burst: the keys i of the burst with i % WORKERS
 * its number (so each key's calls come from one thread, in order):
 * reserves, confirms of every fourth key, releases of some confirmed
 * keys of the burst before. */
static void *burst_worker(void *arg) {
  const burst_t *w = arg;
  int b = w->burst;
  for (int i = w->worker; i < KEYS_PER_BURST; i += WORKERS) {
    int k = b * KEYS_PER_BURST + i;
    run_op(w->type, 0, k, PENDING, RESV_RESERVED);
    if (i % 4 == 0) run_op(w->type, 1, k, CONFIRMED, RESV_CONFIRMED);
    if (b > 0 && i % 8 == 0) run_op(w->type, 2, k - KEYS_PER_BURST, ABSENT, RESV_RELEASED);
  }
  return NULL;
}

/* Bursts of WORKERS threads at once (with sync = "disk" their writes
 * share commits); with sync = "process" a pause after each burst lets the
 * store checkpoint. */
void workload(const char *dir) {
  resv_error_t err;
  resv_store_t *s = open_store(dir, &err);
  if (!s) {
    fprintf(stderr, "crash_state: open: %s\n", err.message);
    exit(2);
  }
  resv_type_t *t = type_of(s);
  for (int b = 0; b < BURSTS; b++) {
    pthread_t th[WORKERS];
    burst_t w[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
      w[i] = (burst_t){t, b, i};
      pthread_create(&th[i], NULL, burst_worker, &w[i]);
    }
    for (int i = 0; i < WORKERS; i++) pthread_join(th[i], NULL);
    if (sync_mode == RESV_SYNC_PROCESS) usleep(400 * 1000);
  }
  resv_store_close(s);
}

