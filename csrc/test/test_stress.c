/* test_stress.c: many threads on few keys, every answer checked.
 *
 * THREADS threads share KEYS keys; two threads share each owner (so one
 * owner's attempts meet, as two requests of one user do), each thread has
 * its own attempts. They call reserve/confirm/abandon/release/get at
 * random while a clock thread moves the store's frozen clock forward in
 * jumps (expiry happens all the time). After every answer the thread
 * checks it against a ledger of what earlier answers proved (docs/design.md 5):
 *
 *   - one owner: an answer that gives owner o the key (reserved,
 *     confirmed) while the ledger holds a live claim of another owner
 *     (confirmed, or pending with an expiry past the clock) is a
 *     violation, unless a release of o overlapped the call (then the
 *     other may have taken the key after the release, rightly);
 *   - confirmed is never lost: while o's confirmed claim stands (no
 *     release of o since), a get shows it, an abandon by o answers kept,
 *     and o's own reserve/confirm never meets a conflict;
 *   - holds are never lost: an attempt whose reserve answered before this
 *     call started, with an expiry past the clock and no abandon, release
 *     or confirm of its owner since, is among the holds of a reserved or
 *     get answer, and an abandon of another attempt does not delete it.
 *
 * A call of two keys (reserve_all, confirm_all, abandon_all; a call in
 * ten) has each key's answer checked so, as the single-key op's (the keys
 * a conflicting reserve_all was not in conflict on, as an abandon's), and
 * its status against its keys' answers.
 *
 * A claim is only recorded when nothing of its owner that could undo it
 * (a release, a confirm) overlapped the call, so the ledger never asserts
 * what it does not know. The clock only moves forward, so a claim the
 * clock has passed stays dead.
 *
 * The stores: memory and MongoDB, 8 threads on one store; the file store
 * with sync "process" and "disk", 8 threads on one store, and 4 processes
 * of 2 threads each on one directory (what the file store is for: every
 * process of a host), the two threads of an owner in two processes. Then
 * the ledger, its locks and the clock live in shared memory: the first
 * process moves the clock, and each process sets its store's clock from
 * it, so a store is never ahead of the clock an answer is checked at.
 *
 * RESV_STRESS_MS sets each run's length (default 1500 ms; make stress
 * runs longer). Figures go to stderr ("stress:"). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu.h"

#define THREADS 8
#define PROCS 4 /* of THREADS / PROCS threads each, on a file store */
#define OWNERS (THREADS / 2)
#define KEYS 3
#define ATTEMPTS 3

typedef struct hold {
  bool live;
  int64_t expires;
  uint64_t seq; /* when it was recorded */
} hold_t;

typedef struct owner_ledger {
  bool confirmed;
  uint64_t confirmed_seq;
  uint64_t release_epoch; /* bumped as a release starts and ends */
  uint64_t hold_epoch;    /* bumped as a release or confirm starts and ends */
  int releases, confirms; /* in flight */
  hold_t holds[THREADS][ATTEMPTS];
} owner_ledger_t;

typedef struct key_ledger {
  pthread_mutex_t mutex;
  owner_ledger_t owners[OWNERS];
} key_ledger_t;

/* Shared by every thread and process of a run (a shared mapping). */
typedef struct run {
  key_ledger_t keys[KEYS];
  _Atomic int64_t clock; /* moves only forward */
  atomic_ullong seq;
  atomic_bool stop;
  atomic_int violations;
  atomic_long calls, errors, answers[10];
  atomic_int kills;
  int64_t max_jump;
  int clock_step_us;
} run_t;

/* One process's store and type. */
typedef struct local {
  resv_store_t *store;
  resv_type_t *type;
} local_t;

typedef struct worker {
  run_t *run;
  local_t *local;
  int id;
  unsigned rnd;
} worker_t;

static const char *key_names[KEYS] = {"k0", "k1", "k2"};
static const char *owner_names[OWNERS] = {"o0", "o1", "o2", "o3"};

static void violation(run_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violation(run_t *r, const char *fmt, ...) {
  if (atomic_fetch_add(&r->violations, 1) < 10) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "stress: VIOLATION: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
  }
}

static int owner_of_answer(const resv_answer_t *a) {
  for (int o = 0; o < OWNERS; o++)
    if (test_str_is(a->owner_id, owner_names[o])) return o;
  return -1;
}

static bool has_hold(const resv_answer_t *a, const char *attempt) {
  for (size_t i = 0; i < a->nholds; i++)
    if (test_str_is(a->holds[i], attempt)) return true;
  return false;
}

/* Another owner than o with a live claim on the key, or -1; why says
 * which claim. */
static int live_other(const key_ledger_t *k, int o, int64_t now, char *why, size_t size) {
  for (int p = 0; p < OWNERS; p++) {
    if (p == o) continue;
    if (k->owners[p].confirmed) {
      snprintf(why, size, "confirmed (seq %llu)", (unsigned long long)k->owners[p].confirmed_seq);
      return p;
    }
    for (int t = 0; t < THREADS; t++)
      for (int j = 0; j < ATTEMPTS; j++)
        if (k->owners[p].holds[t][j].live && k->owners[p].holds[t][j].expires > now) {
          snprintf(why, size, "hold t%da%d until %lld (seq %llu), now %lld", t, j,
                   (long long)k->owners[p].holds[t][j].expires,
                   (unsigned long long)k->owners[p].holds[t][j].seq, (long long)now);
          return p;
        }
  }
  return -1;
}

/* The owner's pending holds that must show: recorded before start, live. */
static bool holds_kept(run_t *r, const key_ledger_t *k, int o, uint64_t start,
                       int64_t now, const resv_answer_t *a, const char *what) {
  bool ok = true;
  for (int t = 0; t < THREADS; t++)
    for (int j = 0; j < ATTEMPTS; j++) {
      const hold_t *h = &k->owners[o].holds[t][j];
      if (!h->live || h->seq >= start || h->expires <= now) continue;
      char attempt[32];
      snprintf(attempt, sizeof attempt, "t%da%d", t, j);
      if (!a || !has_hold(a, attempt)) {
        violation(r, "%s: hold %s of %s (expires %lld, now %lld) lost", what, attempt,
                  owner_names[o], (long long)h->expires, (long long)now);
        ok = false;
      }
    }
  return ok;
}

/* What one call saw of the ledger of one of its keys and its owner,
 * before and after it: what its answer for the key is checked against. */
typedef struct step {
  run_t *r;
  worker_t *w;
  key_ledger_t *k;
  owner_ledger_t *me;
  int ki, o, j;
  const char *attempt;
  int32_t op; /* the single-key op the key's answer is checked as */
  uint64_t start, done, hold_epoch, rel_epoch, confirmed_seq;
  int64_t now;
  bool was_confirmed, unreleased, confirmed_stood, holds_idle, releases_idle;
} step_t;

/* A claim is written before it is marked live: a process killed between
 * the two (the runs with kills) leaves a claim that was never made, not
 * one with another's expiry. */
static void record_hold(hold_t *h, int64_t expires, uint64_t seq) {
  h->expires = expires;
  h->seq = seq;
  atomic_signal_fence(memory_order_seq_cst);
  h->live = true;
}

/* Checks an answer against the ledger and records what it proves, under
 * the key's mutex. */
static void check_answer(const step_t *st, const resv_answer_t *a, int holder) {
  switch (a->status) {
  case RESV_RESERVED: {
    char why[128];
    int other = st->unreleased && a->expires_at > st->now
                    ? live_other(st->k, st->o, st->now, why, sizeof why)
                    : -1;
    if (other >= 0)
      violation(st->r, "reserved %s for %s (seq %llu..%llu) while %s holds it: %s",
                key_names[st->ki], owner_names[st->o], (unsigned long long)st->start,
                (unsigned long long)st->done, owner_names[other], why);
    if (holder != st->o || !has_hold(a, st->attempt))
      violation(st->r, "reserved answer without our owner or attempt");
    if (st->confirmed_stood)
      violation(st->r, "reserved, but %s had it confirmed", owner_names[st->o]);
    if (a->expires_at > st->now) holds_kept(st->r, st->k, st->o, st->start, st->now, a, "reserve");
    if (st->holds_idle && st->me->hold_epoch == st->hold_epoch &&
        st->me->release_epoch == st->rel_epoch)
      record_hold(&st->me->holds[st->w->id][st->j], a->expires_at, st->done);
    break;
  }
  case RESV_CONFIRMED: {
    if (st->op == RESV_OP_GET) {
      if (holder < 0)
        violation(st->r, "get: confirmed without an owner");
      else if (st->confirmed_stood && holder != st->o)
        violation(st->r, "get: confirmed by %s, but %s had it", owner_names[holder],
                  owner_names[st->o]);
      break;
    }
    char why[128];
    int other = st->unreleased ? live_other(st->k, st->o, st->now, why, sizeof why) : -1;
    if (other >= 0)
      violation(st->r, "confirmed %s for %s (seq %llu..%llu) while %s holds it: %s",
                key_names[st->ki], owner_names[st->o], (unsigned long long)st->start,
                (unsigned long long)st->done, owner_names[other], why);
    if (holder != st->o) violation(st->r, "confirmed answer for another owner");
    if (st->releases_idle && st->me->release_epoch == st->rel_epoch) {
      st->me->confirmed_seq = st->done;
      atomic_signal_fence(memory_order_seq_cst); /* see record_hold */
      st->me->confirmed = true;
    }
    memset(st->me->holds, 0, sizeof st->me->holds);
    break;
  }
  case RESV_CONFLICT:
    if (holder == st->o) violation(st->r, "conflict with ourselves");
    if (st->confirmed_stood)
      violation(st->r, "conflict, but %s had it confirmed", owner_names[st->o]);
    else
      holds_kept(st->r, st->k, st->o, st->start, st->now, NULL, "conflict");
    break;
  case RESV_ABANDONED:
    if (st->confirmed_stood)
      violation(st->r, "abandon deleted %s's confirmed reservation", owner_names[st->o]);
    holds_kept(st->r, st->k, st->o, st->start, st->now, NULL, "abandon");
    break;
  case RESV_ABSENT:
    if (st->confirmed_stood)
      violation(st->r, "absent, but %s had it confirmed", owner_names[st->o]);
    if (st->op == RESV_OP_ABANDON || st->op == RESV_OP_GET)
      holds_kept(st->r, st->k, st->o, st->start, st->now, NULL, "absent");
    break;
  case RESV_PENDING:
  case RESV_EXPIRED:
    if (st->confirmed_stood)
      violation(st->r, "get: pending, but %s had it confirmed", owner_names[st->o]);
    if (holder == st->o)
      holds_kept(st->r, st->k, st->o, st->start, st->now, a, "get");
    else if (a->status == RESV_PENDING && a->expires_at > st->now) {
      /* another's live pending: ours must all be dead */
      holds_kept(st->r, st->k, st->o, st->start, st->now, NULL, "get of another's");
    }
    break;
  default:
    break;
  }
}

/* Before the call, under the key's mutex: what the call may undo leaves
 * the ledger now. call_op: the call's own op (a reserve_all that meets a
 * conflict gives up its attempt's hold, as an abandon does). */
static void begin_key(step_t *st, uint64_t start, int32_t call_op) {
  owner_ledger_t *me = st->me;
  st->start = start;
  st->releases_idle = me->releases == 0;
  st->holds_idle = st->releases_idle && me->confirms == 0;
  st->rel_epoch = me->release_epoch;
  st->hold_epoch = me->hold_epoch;
  st->was_confirmed = me->confirmed;
  st->confirmed_seq = me->confirmed_seq;
  if (st->op == RESV_OP_RELEASE) {
    me->releases++;
    me->release_epoch++;
    me->hold_epoch++;
    me->confirmed = false;
    memset(me->holds, 0, sizeof me->holds);
  } else if (st->op == RESV_OP_CONFIRM) {
    me->confirms++;
    me->hold_epoch++;
  } else if (st->op == RESV_OP_ABANDON || call_op == RESV_OP_RESERVE_ALL) {
    me->holds[st->w->id][st->j].live = false;
  }
}

/* After the call, under the key's mutex: what overlapped it. */
static void end_key(step_t *st, uint64_t done, int64_t now) {
  owner_ledger_t *me = st->me;
  st->done = done;
  st->now = now;
  /* Whether no release of o overlapped the call: else what it answered
   * may be undone already, and another owner may rightly hold the key. */
  st->unreleased = st->releases_idle && me->release_epoch == st->rel_epoch;
  /* Whether o's confirmed claim stood for the whole call. */
  st->confirmed_stood = st->was_confirmed && st->unreleased && st->confirmed_seq < st->start;
  if (st->op == RESV_OP_RELEASE) {
    me->releases--;
    me->release_epoch++;
    me->hold_epoch++;
  } else if (st->op == RESV_OP_CONFIRM) {
    me->confirms--;
    me->hold_epoch++;
  }
}

/* The call's status against its keys' answers (the *_all ops). */
static void check_status(run_t *r, const resv_request_t *req, const resv_answer_t *a) {
  size_t conflicts = 0, held = 0, confirmed = 0;
  for (size_t i = 0; i < a->nkeys; i++) {
    conflicts += a->keys[i].status == RESV_CONFLICT;
    held += a->keys[i].status == RESV_RESERVED || a->keys[i].status == RESV_CONFIRMED;
    confirmed += a->keys[i].status == RESV_CONFIRMED;
  }
  bool sound = a->nkeys == req->nkeys;
  if (req->op == RESV_OP_RESERVE_ALL)
    sound = sound && (a->status == RESV_RESERVED ? held == a->nkeys
                      : a->status == RESV_CONFLICT && conflicts > 0 && held == confirmed);
  else if (req->op == RESV_OP_CONFIRM_ALL)
    sound = sound && (a->status == RESV_CONFIRMED ? confirmed == a->nkeys
                      : a->status == RESV_CONFLICT && confirmed < a->nkeys);
  else
    sound = sound && a->status == RESV_ABANDONED;
  if (!sound)
    violation(r, "op %d answered %s with %zu conflicts, %zu held of %zu keys", (int)req->op,
              resv_status_name(a->status), conflicts, held, a->nkeys);
}

/* The ledger's locks are robust: one a killed process held goes to the
 * next locker, with what the dead one wrote under it (each write a truth
 * of its own, or a claim not yet marked live; a call it had begun stays
 * in flight for good, so what it might have undone is never asserted). */
static void lock_keys(run_t *r, const int *ki, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (pthread_mutex_lock(&r->keys[ki[i]].mutex) == EOWNERDEAD)
      pthread_mutex_consistent(&r->keys[ki[i]].mutex);
}

static void unlock_keys(run_t *r, const int *ki, size_t n) {
  for (size_t i = n; i-- > 0;) pthread_mutex_unlock(&r->keys[ki[i]].mutex);
}

/* One call of one key, or of two (reserve_all, confirm_all, abandon_all,
 * the keys in either order): every key's answer checked as the single-key
 * op's, the ledgers of its keys locked in key order. */
static void step(worker_t *w) {
  run_t *r = w->run;
  int o = w->id / 2, j = rand_r(&w->rnd) % ATTEMPTS;
  int dice = rand_r(&w->rnd) % 100;
  char attempt[32];
  snprintf(attempt, sizeof attempt, "t%da%d", w->id, j);
  resv_request_t req = {.owner = test_owner("", owner_names[o]),
                        .attempt = resv_cstr(attempt),
                        .ttl_ms = 20 + rand_r(&w->rnd) % 200,
                        .version = rand_r(&w->rnd) % 100};
  req.op = dice < 28 ? RESV_OP_RESERVE : dice < 40 ? RESV_OP_CONFIRM
           : dice < 60 ? RESV_OP_ABANDON : dice < 65 ? RESV_OP_RELEASE
           : dice < 80 ? RESV_OP_GET : dice < 90 ? RESV_OP_RESERVE_ALL
           : dice < 95 ? RESV_OP_CONFIRM_ALL : RESV_OP_ABANDON_ALL;
  size_t n = resv__op_is_all(req.op) ? 2 : 1;
  int ki[2] = {rand_r(&w->rnd) % KEYS, 0};
  ki[1] = (ki[0] + 1 + rand_r(&w->rnd) % (KEYS - 1)) % KEYS;
  if (ki[1] < ki[0]) { /* the ledgers in key order */
    int lower = ki[1];
    ki[1] = ki[0];
    ki[0] = lower;
  }
  bool swap = n == 2 && rand_r(&w->rnd) % 2; /* the request's keys the other way */
  resv_key_t keys[2];
  for (size_t i = 0; i < n; i++)
    keys[swap ? n - 1 - i : i] = test_key("email", key_names[ki[i]]);
  req.key = keys[0];
  if (n == 2) req.keys = keys, req.nkeys = 2;

  step_t st[2];
  lock_keys(r, ki, n);
  uint64_t start = atomic_fetch_add(&r->seq, 1);
  for (size_t i = 0; i < n; i++) {
    key_ledger_t *k = &r->keys[ki[i]];
    st[i] = (step_t){.r = r, .w = w, .k = k, .me = &k->owners[o], .ki = ki[i], .o = o,
                     .j = j, .attempt = attempt, .op = resv__op_single(req.op)};
    begin_key(&st[i], start, req.op);
  }
  unlock_keys(r, ki, n);

  resv_answer_t a = {0};
  resv_error_t err;
  bool ok = resv_call(w->local->type, &req, &a, &err);
  atomic_fetch_add(&r->calls, 1);

  lock_keys(r, ki, n);
  int64_t now = atomic_load(&r->clock); /* no store is ahead of it */
  uint64_t done = atomic_fetch_add(&r->seq, 1);
  for (size_t i = 0; i < n; i++) end_key(&st[i], done, now);
  if (!ok) {
    atomic_fetch_add(&r->errors, 1);
    if (!(err.code == RESV_ETIMEOUT || (err.code == RESV_ESERVER && err.server_code == 11000)))
      violation(r, "op %d: %s: %s", (int)req.op, resv_code_name(err.code), err.message);
  } else {
    atomic_fetch_add(&r->answers[a.status], 1);
    if (n == 2) check_status(r, &req, &a);
    for (size_t i = 0; i < n && (n == 1 || a.nkeys == n); i++) {
      const resv_answer_t *ai = n == 1 ? &a : &a.keys[swap ? n - 1 - i : i];
      /* A reserve_all that conflicts abandons its attempt on the keys
       * that were not in conflict. */
      if (req.op == RESV_OP_RESERVE_ALL && a.status == RESV_CONFLICT && ai->status != RESV_CONFLICT)
        st[i].op = RESV_OP_ABANDON;
      check_answer(&st[i], ai, owner_of_answer(ai));
    }
  }
  unlock_keys(r, ki, n);
  resv_answer_clear(&a);
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  while (!atomic_load(&w->run->stop)) step(w);
  return NULL;
}

/* One step of the run's clock. */
static void tick(run_t *r, unsigned *rnd) {
  int64_t jump = rand_r(rnd) % 4 == 0 ? rand_r(rnd) % (r->max_jump + 1) : 1;
  atomic_fetch_add(&r->clock, jump);
}

/* The clock of a process: the first one moves the run's clock forward in
 * jumps; each sets its store's from it (so a store's time is never ahead
 * of the run's, and only moves forward). */
typedef struct clock_arg {
  run_t *r;
  local_t *local;
  bool leads;
} clock_arg_t;

static void *clock_main(void *arg) {
  clock_arg_t *c = arg;
  unsigned rnd = 7;
  while (!atomic_load(&c->r->stop)) {
    usleep((useconds_t)c->r->clock_step_us);
    if (c->leads) tick(c->r, &rnd);
    if (c->local) resv_store_set_time(c->local->store, atomic_load(&c->r->clock));
  }
  return NULL;
}

static int64_t stress_ms(void) {
  const char *s = getenv("RESV_STRESS_MS");
  return s && atoll(s) > 0 ? atoll(s) : 1500;
}

/* Where a run's store is: a MongoDB URI, a file store (in a directory
 * of its own) and its sync, or neither (memory); procs 1 (threads of one
 * process) or PROCS. */
typedef struct where {
  const char *uri, *path;
  bool file;
  int32_t sync;
  int procs;
  bool kills; /* processes killed (SIGKILL) at random and started again */
  const char *name;
} where_t;

static resv_store_t *open_store(const where_t *at, resv_error_t *err) {
  resv_options_t o = {.uri = at->uri, .path = at->path, .sync = at->sync, .threads = 4,
                      .timeout_ms = getenv("RESV_TEST_SLOW") ? 30000 : 5000,
                      .map_size = 64 << 20};
  return resv_store_open(&o, err);
}

/* Runs n workers (ids first, first + step, ...) on a store of their own
 * until the run stops; 0, or why not (a store that did not open). */
static int run_workers(run_t *r, const where_t *at, int first, int step_by, int n, bool leads) {
  local_t local;
  resv_error_t err;
  if (!(local.store = open_store(at, &err)) ||
      !(local.type = resv_store_type(local.store, "test", 4, "stress", 6, &err))) {
    fprintf(stderr, "stress: %s: %s: %s\n", at->name, resv_code_name(err.code), err.message);
    atomic_store(&r->stop, true);
    return 1;
  }
  resv_store_set_time(local.store, atomic_load(&r->clock));
  worker_t workers[THREADS];
  pthread_t threads[THREADS], clock;
  clock_arg_t c = {r, &local, leads};
  for (int i = 0; i < n; i++) {
    int id = first + i * step_by;
    workers[i] = (worker_t){r, &local, id, (unsigned)(id * 7919 + getpid())};
    if (pthread_create(&threads[i], NULL, worker_main, &workers[i])) abort();
  }
  if (pthread_create(&clock, NULL, clock_main, &c)) abort();
  if (leads) {
    usleep((useconds_t)(stress_ms() * 1000));
    atomic_store(&r->stop, true);
  }
  for (int i = 0; i < n; i++) pthread_join(threads[i], NULL);
  pthread_join(clock, NULL);
  resv_store_close(local.store);
  return 0;
}

/* Process p of a run: ids p, p + PROCS, ... (an owner's two threads in
 * two processes). It dies with this one (a failed assertion here must not
 * leave it running). */
static pid_t start_process(run_t *r, const where_t *at, int p) {
  pid_t parent = getpid(), pid = fork();
  ck_assert_int_ne(pid, -1);
  if (pid == 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) test_child_exit(2);
    test_child_exit(run_workers(r, at, p, PROCS, THREADS / PROCS, false));
  }
  return pid;
}

/* PROCS processes of THREADS / PROCS workers; this one moves the clock
 * and, with kills, kills one of them every 20 to 120 ms (whatever it was
 * doing: inside a write transaction, holding the write gate, between two
 * pages of a commit) and starts it again. It runs no thread of its own:
 * a process forked beside a running thread gets that thread's stack for
 * its own next thread, which ThreadSanitizer reports as one thread
 * started twice. */
static void run_processes(run_t *r, const where_t *at) {
  pid_t pids[PROCS];
  for (int p = 0; p < PROCS; p++) pids[p] = start_process(r, at, p);
  unsigned rnd = (unsigned)getpid();
  int64_t end = resv__now_ns() + stress_ms() * 1000000;
  int64_t kill_at = at->kills ? resv__now_ns() + (20 + rand_r(&rnd) % 100) * 1000000 : INT64_MAX;
  while (resv__now_ns() < end) {
    usleep((useconds_t)r->clock_step_us);
    tick(r, &rnd);
    if (resv__now_ns() < kill_at) continue;
    kill_at = resv__now_ns() + (20 + rand_r(&rnd) % 100) * 1000000;
    int p = rand_r(&rnd) % PROCS, status;
    ck_assert_int_eq(kill(pids[p], SIGKILL), 0);
    ck_assert_int_eq(waitpid(pids[p], &status, 0), pids[p]);
    ck_assert_msg(WIFSIGNALED(status), "stress: process %d ended before it was killed", p);
    atomic_fetch_add(&r->kills, 1);
    pids[p] = start_process(r, at, p);
  }
  atomic_store(&r->stop, true);
  for (int p = 0; p < PROCS; p++) {
    int status = 0;
    ck_assert_int_eq(waitpid(pids[p], &status, 0), pids[p]);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "stress: process %d ended with status %d", p, status);
  }
}

static void stress(where_t at) {
  char dir[256];
  run_t *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert(r != MAP_FAILED);
  memset(r, 0, sizeof *r);
  pthread_mutexattr_t shared;
  pthread_mutexattr_init(&shared);
  pthread_mutexattr_setpshared(&shared, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&shared, PTHREAD_MUTEX_ROBUST);
  for (int i = 0; i < KEYS; i++) pthread_mutex_init(&r->keys[i].mutex, &shared);
  pthread_mutexattr_destroy(&shared);
  r->max_jump = 150;
  r->clock_step_us = at.uri ? 3000 : 200;
  r->clock = 1700000000000;
  if (at.file) {
    test_temp_dir(dir, sizeof dir);
    at.path = dir;
  }
  if (at.procs > 1)
    run_processes(r, &at);
  else
    ck_assert_int_eq(run_workers(r, &at, 0, 1, THREADS, true), 0);
  fprintf(stderr,
          "stress: %s, %d threads, %d keys, %lld ms: %ld calls (%ld/s), %ld errors; "
          "reserved %ld confirmed %ld conflict %ld abandoned %ld kept %ld absent %ld "
          "released %ld pending %ld expired %ld; %d processes killed; %d violations\n",
          at.name, THREADS, KEYS, (long long)stress_ms(),
          atomic_load(&r->calls), atomic_load(&r->calls) * 1000 / stress_ms(),
          atomic_load(&r->errors), atomic_load(&r->answers[RESV_RESERVED]),
          atomic_load(&r->answers[RESV_CONFIRMED]), atomic_load(&r->answers[RESV_CONFLICT]),
          atomic_load(&r->answers[RESV_ABANDONED]), atomic_load(&r->answers[RESV_KEPT]),
          atomic_load(&r->answers[RESV_ABSENT]), atomic_load(&r->answers[RESV_RELEASED]),
          atomic_load(&r->answers[RESV_PENDING]), atomic_load(&r->answers[RESV_EXPIRED]),
          atomic_load(&r->kills), atomic_load(&r->violations));
  ck_assert_int_eq(atomic_load(&r->violations), 0);
  ck_assert_int_gt(atomic_load(&r->answers[RESV_RESERVED]), 0);
  ck_assert_int_gt(atomic_load(&r->answers[RESV_CONFLICT]), 0);
  for (int i = 0; i < KEYS; i++) pthread_mutex_destroy(&r->keys[i].mutex);
  munmap(r, sizeof *r);
  if (at.path) test_remove_dir(dir);
}

START_TEST(one_owner_per_key_under_load_on_memory) {
  stress((where_t){.procs = 1, .name = "memory"});
}
END_TEST

START_TEST(one_owner_per_key_under_load_on_mongo) {
  stress((where_t){.uri = test_mongo_uri(), .procs = 1, .name = "mongodb"});
}
END_TEST

START_TEST(one_owner_per_key_under_load_on_file_threads) {
  stress((where_t){.file = true, .sync = RESV_SYNC_PROCESS, .procs = 1, .name = "file (process), threads"});
  stress((where_t){.file = true, .sync = RESV_SYNC_DISK, .procs = 1, .name = "file (disk), threads"});
}
END_TEST

START_TEST(one_owner_per_key_under_load_on_file_processes) {
  stress((where_t){.file = true, .sync = RESV_SYNC_PROCESS, .procs = PROCS,
                   .name = "file (process), 4 processes"});
  stress((where_t){.file = true, .sync = RESV_SYNC_DISK, .procs = PROCS, .name = "file (disk), 4 processes"});
}
END_TEST

START_TEST(one_owner_per_key_under_load_on_file_processes_killed) {
  stress((where_t){.file = true, .sync = RESV_SYNC_PROCESS, .procs = PROCS, .kills = true,
                   .name = "file (process), 4 processes killed"});
  stress((where_t){.file = true, .sync = RESV_SYNC_DISK, .procs = PROCS, .kills = true,
                   .name = "file (disk), 4 processes killed"});
}
END_TEST

Suite *stress_suite(void) {
  Suite *s = suite_create("stress");
  const TTest *tests[] = {
      one_owner_per_key_under_load_on_memory, one_owner_per_key_under_load_on_mongo,
      one_owner_per_key_under_load_on_file_threads,
      one_owner_per_key_under_load_on_file_processes,
      one_owner_per_key_under_load_on_file_processes_killed, NULL};
  TCase *tc = test_tcase(s, "stress", 0, NULL, NULL, tests);
  tcase_set_timeout(tc, (double)(2 * stress_ms() / 1000 + 120));
  return s;
}
