/* crash_state.c: what a crash of the OS may leave of a file store, and
 * whether the store copes: every state it may leave either opens holding
 * every reservation answered before the crash and nothing the store never
 * had, or (sync = "process" only) is refused at open with RESV_EFORMAT.
 *
 * usage: crash_state disk|process [STATES] [SEED]
 *
 * 1. Records. A store is made and closed, everything synced; then a
 *    workload (open, reserves, confirms and releases with pauses a
 *    checkpoint fits in, close) runs while this program, which defines
 *    open, close, pwrite, write, writev, fsync, fdatasync, ftruncate and
 *    rename, msync itself (so they interpose the C library's for
 *    liblmdb.so and libresv alike), logs every write to data.mdb,
 *    resv.state and its temporary (offset and bytes) and every barrier:
 *    an fsync or fdatasync of a file, of the directory, a rename, a write
 *    on a file opened with O_DSYNC, an msync. sync = "process" writes
 *    data.mdb through LMDB's map (MDB_WRITEMAP), which no call shows: so
 *    before each event is logged, and at each answer, data.mdb is read and
 *    every page that changed is logged as written there. Each answer of
 *    the workload is kept with the points in the log at which its call
 *    began and was answered.
 * 2. Builds the states an OS crash may leave at a crash point (a position
 *    in the log): each file as of its last barrier before it, plus any
 *    subset of the 4 KiB pages written since, each page as of any of the
 *    writes to it since; the name resv.state bound to what it was at the
 *    last fsync of the directory or to the target of any rename since.
 * 3. Opens each in a child process after a fake reboot (RESV_BOOT_ID), so
 *    that a crash of LMDB (SIGABRT, SIGBUS, a hang) is counted, never
 *    kills the test, and gets every key of the workload. A key may hold
 *    the state its last answered call left, or that of a call begun
 *    before the crash point and answered after it.
 * Prints the counts; exits 1 when a state is corrupt (or, for "disk",
 * refused). The log and the workload (1.) are crash_record.c; this file
 * builds and checks the states (2., 3.). */
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

/* ---- the states a crash may leave ---------------------------------------- */


static file_t base[2]; /* data.mdb and resv.state before the workload */
static int base_state_name;
static uint64_t rng;

static uint64_t next_random(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}


/* Applies write e, only its bytes within page pg (all of it for -1). */
static void apply(file_t *f, const event_t *e, int64_t pg) {
  int64_t lo = e->off, hi = e->off + (int64_t)e->len;
  if (pg >= 0) {
    if (lo < pg * PAGE) lo = pg * PAGE;
    if (hi > (pg + 1) * PAGE) hi = (pg + 1) * PAGE;
    if (lo >= hi) return;
  }
  put_bytes(f, lo, bytes + e->data + (lo - e->off), (size_t)(hi - lo));
}

static bool touches(const event_t *e, int64_t pg) {
  return e->off < (pg + 1) * PAGE && e->off + (int64_t)e->len > pg * PAGE;
}

/* File ino as a crash at log position c may leave it. */
static void crashed_file(int ino, size_t c, file_t *f) {
  f->len = 0;
  if (ino < 2 && base[ino].len) put_bytes(f, 0, base[ino].p, base[ino].len);
  size_t last_sync = 0;
  for (size_t i = 0; i < c; i++)
    if (events[i].type == EV_SYNC && events[i].inode == ino) last_sync = i + 1;
  for (size_t i = 0; i < last_sync; i++) {
    if (events[i].inode != ino) continue;
    if (events[i].type == EV_WRITE) apply(f, &events[i], -1);
    if (events[i].type == EV_TRUNC) resize(f, (size_t)events[i].off);
  }
  for (size_t i = last_sync; i < c; i++) /* a size not synced may or may not be there */
    if (events[i].inode == ino && events[i].type == EV_TRUNC && next_random() % 2)
      resize(f, (size_t)events[i].off);
  int how = (int)(next_random() % 4); /* 0 none, 1 all (latest), else random */
  /* Every page written since: kept or not, as of one of its writes. */
  int64_t pages = 0;
  for (size_t i = last_sync; i < c; i++)
    if (events[i].type == EV_WRITE && events[i].inode == ino &&
        (events[i].off + (int64_t)events[i].len + PAGE - 1) / PAGE > pages)
      pages = (events[i].off + (int64_t)events[i].len + PAGE - 1) / PAGE;
  for (int64_t pg = 0; pg < pages; pg++) {
    size_t writes = 0, upto = 0;
    for (size_t j = last_sync; j < c; j++)
      if (events[j].type == EV_WRITE && events[j].inode == ino && touches(&events[j], pg))
        writes++;
    if (!writes || how == 0 || (how > 1 && next_random() % 2)) continue;
    size_t pick = how == 1 ? writes : 1 + next_random() % writes;
    for (size_t j = last_sync; j < c && upto < pick; j++)
      if (events[j].type == EV_WRITE && events[j].inode == ino && touches(&events[j], pg))
        apply(f, &events[j], pg), upto++;
  }
}

/* The file the name resv.state is bound to after a crash at c. */
static int crashed_name(size_t c) {
  int bound = base_state_name, durable = base_state_name;
  int pending[64], n = 0;
  for (size_t i = 0; i < c; i++) {
    if (events[i].type == EV_RENAME) {
      bound = events[i].inode;
      if (n < 64) pending[n++] = bound;
    } else if (events[i].type == EV_DIRSYNC) {
      durable = bound;
      n = 0;
    }
  }
  size_t pick = next_random() % (size_t)(n + 1);
  return pick == 0 ? durable : pending[pick - 1];
}

static void write_file(const char *dir, const char *name, const file_t *f) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *out = fopen(path, "w");
  if (!out || (f->len && fwrite(f->p, 1, f->len, out) != f->len) || fclose(out) != 0) {
    perror(path);
    exit(2);
  }
}

static void empty_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  char path[PATH_MAX + 300];
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    unlink(path);
  }
  if (d) closedir(d);
}

static void read_file(const char *path, file_t *f) {
  FILE *in = fopen(path, "r");
  unsigned char buf[65536];
  size_t n;
  f->len = 0;
  while (in && (n = fread(buf, 1, sizeof buf, in)) > 0) put_bytes(f, (int64_t)f->len, buf, n);
  if (in) fclose(in);
}

/* ---- opening each state ---------------------------------------------------- */

enum { OPENS_CONSISTENT = 0, REFUSED = 10, OPEN_FAILED = 11, WRONG = 12 };

/* Whether key k may hold state st after a crash at c. */
static bool may_hold(int k, int st, size_t c) {
  int settled = ABSENT;
  bool in_flight = false;
  for (int i = 0; i < n_ops; i++) {
    if (ops[i].key != k) continue;
    if (ops[i].answered <= c) settled = ops[i].state;
    else if (ops[i].begun < c && ops[i].state == st) in_flight = true;
  }
  return st == settled || in_flight;
}

/* In the child: opens the state after a fake reboot and checks each key. */
static void check_state(const char *dir, size_t c) {
  alarm(20);
  setenv("RESV_BOOT_ID", "crash-state-after-a-reboot", 1);
  resv_error_t err = {0};
  resv_store_t *s = open_store(dir, &err);
  if (!s) {
    bool crash = err.code == RESV_EFORMAT && strstr(err.message, "crash of the OS");
    if (!crash) fprintf(stderr, "  open at %zu: %s: %s\n", c, resv_code_name(err.code), err.message);
    _exit(crash ? REFUSED : OPEN_FAILED);
  }
  resv_type_t *t = type_of(s);
  for (int k = 0; k < BURSTS * KEYS_PER_BURST; k++) {
    char key[32], owner[32];
    key_name(key, sizeof key, k);
    owner_name(owner, sizeof owner, k);
    resv_key_t rk = {resv_cstr(""), resv_cstr("seats"), resv_cstr(key)};
    resv_answer_t a = {0};
    if (!resv_get(t, &rk, &a, &err)) {
      fprintf(stderr, "  get %s at %zu: %s: %s\n", key, c, resv_code_name(err.code), err.message);
      _exit(WRONG);
    }
    int st = a.status == RESV_PENDING ? PENDING : a.status == RESV_CONFIRMED ? CONFIRMED
             : a.status == RESV_ABSENT ? ABSENT : -1;
    bool mine = st == ABSENT || (a.owner_id.len == strlen(owner) &&
                                 !memcmp(a.owner_id.ptr, owner, a.owner_id.len));
    if (st < 0 || !mine || !may_hold(k, st, c)) {
      fprintf(stderr, "  %s at %zu: %s by %.*s, not what the answers before the crash left\n", key, c,
              resv_status_name(a.status), (int)a.owner_id.len, a.owner_id.ptr);
      _exit(WRONG);
    }
  }
  _exit(OPENS_CONSISTENT); /* no close: nothing of this state need be kept */
}

/* Builds the state of a crash at c into dir and opens it in a child:
 * 0 consistent, 1 refused, 2 corrupt. */
static int try_state(const char *dir, size_t c) {
  static file_t data, state;
  empty_dir(dir);
  crashed_file(0, c, &data);
  write_file(dir, "data.mdb", &data);
  int bound = crashed_name(c);
  if (bound >= 0) {
    crashed_file(bound, c, &state);
    write_file(dir, "resv.state", &state);
  }
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(2);
  }
  if (pid == 0) check_state(dir, c);
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == OPENS_CONSISTENT) return 0;
  if (WIFEXITED(st) && WEXITSTATUS(st) == REFUSED) return 1;
  if (WIFSIGNALED(st))
    fprintf(stderr, "  at %zu: the child died of signal %d (%s)\n", c, WTERMSIG(st),
            strsignal(WTERMSIG(st)));
  return 2;
}

/* Makes the store, closes it and syncs, keeps its files as the state
 * before the workload. */
static void set_up(const char *dir) {
  resv_error_t err;
  resv_store_t *s = open_store(dir, &err);
  if (!s) {
    fprintf(stderr, "crash_state: open: %s\n", err.message);
    exit(2);
  }
  resv_answer_t a = {0};
  resv_key_t rk = {resv_cstr(""), resv_cstr("seats"), resv_cstr("before")};
  resv_owner_t ro = {resv_cstr(""), resv_cstr("before")};
  if (!resv_reserve(type_of(s), &rk, &ro, resv_cstr("a"), HOUR, &a, &err)) exit(2);
  resv_answer_clear(&a);
  resv_store_close(s);
  sync();
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/data.mdb", dir);
  read_file(path, &base[0]);
  snprintf(path, sizeof path, "%s/resv.state", dir);
  read_file(path, &base[1]);
  base_state_name = base[1].len ? 1 : -1;
  state_name = base_state_name;
  n_inodes = 2;
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "disk") && strcmp(argv[1], "process"))) {
    fprintf(stderr, "usage: crash_state disk|process [STATES] [SEED]\n");
    return 2;
  }
  mode_name = argv[1];
  sync_mode = strcmp(mode_name, "disk") ? RESV_SYNC_PROCESS : RESV_SYNC_DISK;
  int states = argc > 2 ? atoi(argv[2]) : 300;
  rng = argc > 3 ? strtoull(argv[3], NULL, 10) : (uint64_t)time(NULL);
  uint64_t seed = rng |= 1;
  for (int i = 0; i < MAX_FDS; i++) fd_inode[i] = -1;
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char root[PATH_MAX - 64], scratch[PATH_MAX];
  snprintf(root, sizeof root, "%s/crash_state.XXXXXX", tmp);
  if (!mkdtemp(root)) return perror("mkdtemp"), 2;
  snprintf(store_dir, sizeof store_dir, "%s/store", root);
  snprintf(scratch, sizeof scratch, "%s/state", root);
  mkdir(scratch, 0770);
  set_up(store_dir);
  char data_path[PATH_MAX + 16];
  snprintf(data_path, sizeof data_path, "%s/data.mdb", store_dir);
  snap_fd = open(data_path, O_RDONLY | O_CLOEXEC); /* before recording: not tracked */
  put_bytes(&model, 0, base[0].p, base[0].len);
  recording = true;
  workload(store_dir);
  recording = false;
  size_t total = n_events;
  if (total == 0) {
    fprintf(stderr, "crash_state: recorded no write: the calls were not interposed\n");
    return 1;
  }
  int counts[3] = {0, 0, 0};
  size_t barriers[4096], n_barriers = 0;
  for (size_t i = 0; i < total && n_barriers < 4096; i++)
    if (events[i].type != EV_WRITE) barriers[n_barriers++] = i + 1;
  /* Half the crash points anywhere, half just around a barrier. */
  for (int i = 0; i < states; i++) {
    size_t c = next_random() % (total + 1);
    if (i % 2 && n_barriers) {
      c = barriers[next_random() % n_barriers] + next_random() % 5;
      c = c < 2 ? 0 : c - 2 > total ? total : c - 2;
    }
    counts[try_state(scratch, c)]++;
  }
  empty_dir(scratch);
  rmdir(scratch);
  empty_dir(store_dir);
  rmdir(store_dir);
  rmdir(root);
  bool ok = counts[2] == 0 && (sync_mode == RESV_SYNC_PROCESS || counts[1] == 0);
  printf("crash_state %s (seed %llu): %zu writes and barriers, %d answers; %d states: "
         "%d refused, %d consistent, %d corrupt: %s\n", mode_name, (unsigned long long)seed,
         total, n_ops, states, counts[1], counts[0], counts[2], ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

