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
 * A claim is only recorded when nothing of its owner that could undo it
 * (a release, a confirm) overlapped the call, so the ledger never asserts
 * what it does not know. The clock only moves forward, so a claim the
 * clock has passed stays dead.
 *
 * RESV_STRESS_MS sets each run's length (default 1500 ms; make stress
 * runs longer). Figures go to stderr ("stress:"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"

#define THREADS 8
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

typedef struct run {
  resv_store_t *store;
  resv_type_t *type;
  key_ledger_t keys[KEYS];
  atomic_ullong seq;
  atomic_bool stop;
  atomic_int violations;
  atomic_long calls, errors, answers[10];
  int64_t max_jump;
  int clock_step_us;
} run_t;

typedef struct worker {
  run_t *run;
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

/* What one call saw of the ledger of its key and owner, before and after
 * it: what its answer is checked against. */
typedef struct step {
  run_t *r;
  worker_t *w;
  key_ledger_t *k;
  owner_ledger_t *me;
  int ki, o, j;
  const char *attempt;
  int32_t op;
  uint64_t start, done, hold_epoch, rel_epoch;
  int64_t now;
  bool unreleased, confirmed_stood, holds_idle, releases_idle;
} step_t;

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
      st->me->holds[st->w->id][st->j] = (hold_t){true, a->expires_at, st->done};
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
      st->me->confirmed = true;
      st->me->confirmed_seq = st->done;
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

static void step(worker_t *w) {
  run_t *r = w->run;
  int ki = rand_r(&w->rnd) % KEYS, o = w->id / 2, j = rand_r(&w->rnd) % ATTEMPTS;
  int dice = rand_r(&w->rnd) % 100;
  key_ledger_t *k = &r->keys[ki];
  owner_ledger_t *me = &k->owners[o];
  char attempt[32];
  snprintf(attempt, sizeof attempt, "t%da%d", w->id, j);
  resv_request_t req = {.key = test_key("email", key_names[ki]),
                        .owner = test_owner("", owner_names[o]),
                        .attempt = resv_cstr(attempt),
                        .ttl_ms = 20 + rand_r(&w->rnd) % 200,
                        .version = rand_r(&w->rnd) % 100};
  req.op = dice < 35 ? RESV_OP_RESERVE : dice < 50 ? RESV_OP_CONFIRM
           : dice < 75 ? RESV_OP_ABANDON : dice < 80 ? RESV_OP_RELEASE : RESV_OP_GET;

  /* Before the call: what it may undo leaves the ledger now. */
  pthread_mutex_lock(&k->mutex);
  uint64_t start = atomic_fetch_add(&r->seq, 1);
  bool releases_idle = me->releases == 0, holds_idle = releases_idle && me->confirms == 0;
  uint64_t rel_epoch = me->release_epoch, hold_epoch = me->hold_epoch;
  bool was_confirmed = me->confirmed;
  uint64_t confirmed_seq = me->confirmed_seq;
  if (req.op == RESV_OP_RELEASE) {
    me->releases++;
    me->release_epoch++;
    me->hold_epoch++;
    me->confirmed = false;
    memset(me->holds, 0, sizeof me->holds);
  } else if (req.op == RESV_OP_CONFIRM) {
    me->confirms++;
    me->hold_epoch++;
  } else if (req.op == RESV_OP_ABANDON) {
    me->holds[w->id][j].live = false;
  }
  pthread_mutex_unlock(&k->mutex);

  resv_answer_t a = {0};
  resv_error_t err;
  bool ok = resv_call(r->type, &req, &a, &err);
  atomic_fetch_add(&r->calls, 1);

  pthread_mutex_lock(&k->mutex);
  int64_t now = resv_store_now(r->store);
  uint64_t done = atomic_fetch_add(&r->seq, 1);
  /* Whether no release of o overlapped the call: else what it answered
   * may be undone already, and another owner may rightly hold the key. */
  bool unreleased = releases_idle && me->release_epoch == rel_epoch;
  /* Whether o's confirmed claim stood for the whole call. */
  bool confirmed_stood = was_confirmed && releases_idle && me->release_epoch == rel_epoch &&
                         confirmed_seq < start;
  if (req.op == RESV_OP_RELEASE) {
    me->releases--;
    me->release_epoch++;
    me->hold_epoch++;
  } else if (req.op == RESV_OP_CONFIRM) {
    me->confirms--;
    me->hold_epoch++;
  }
  if (!ok) {
    atomic_fetch_add(&r->errors, 1);
    if (!(err.code == RESV_ETIMEOUT || (err.code == RESV_ESERVER && err.server_code == 11000)))
      violation(r, "op %d: %s: %s", (int)req.op, resv_code_name(err.code), err.message);
    pthread_mutex_unlock(&k->mutex);
    resv_answer_clear(&a);
    return;
  }
  atomic_fetch_add(&r->answers[a.status], 1);
  step_t st = {r, w, k, me, ki, o, j, attempt, req.op, start, done, hold_epoch, rel_epoch,
               now, unreleased, confirmed_stood, holds_idle, releases_idle};
  check_answer(&st, &a, owner_of_answer(&a));
  pthread_mutex_unlock(&k->mutex);
  resv_answer_clear(&a);
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  while (!atomic_load(&w->run->stop)) step(w);
  return NULL;
}

static void *clock_main(void *arg) {
  run_t *r = arg;
  unsigned rnd = 7;
  while (!atomic_load(&r->stop)) {
    usleep((useconds_t)r->clock_step_us);
    int64_t jump = rand_r(&rnd) % 4 == 0 ? rand_r(&rnd) % (r->max_jump + 1) : 1;
    resv_store_set_time(r->store, resv_store_now(r->store) + jump);
  }
  return NULL;
}

static int64_t stress_ms(void) {
  const char *s = getenv("RESV_STRESS_MS");
  return s && atoll(s) > 0 ? atoll(s) : 1500;
}

static void stress(const char *uri) {
  run_t *r = calloc(1, sizeof *r);
  worker_t workers[THREADS];
  pthread_t threads[THREADS], clock;
  r->store = uri ? emu_open(uri, (resv_options_t){.threads = 4, .timeout_ms = 5000})
                 : test_open(NULL);
  r->type = test_fresh_type(r->store, "stress");
  r->max_jump = 150;
  r->clock_step_us = uri ? 3000 : 200;
  resv_store_set_time(r->store, 1700000000000);
  for (int i = 0; i < KEYS; i++) pthread_mutex_init(&r->keys[i].mutex, NULL);
  for (int i = 0; i < THREADS; i++) {
    workers[i] = (worker_t){r, i, (unsigned)(i * 7919 + getpid())};
    ck_assert(pthread_create(&threads[i], NULL, worker_main, &workers[i]) == 0);
  }
  ck_assert(pthread_create(&clock, NULL, clock_main, r) == 0);
  usleep((useconds_t)(stress_ms() * 1000));
  atomic_store(&r->stop, true);
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  pthread_join(clock, NULL);
  fprintf(stderr,
          "stress: %s, %d threads, %d keys, %lld ms: %ld calls (%ld/s), %ld errors; "
          "reserved %ld confirmed %ld conflict %ld abandoned %ld kept %ld absent %ld "
          "released %ld pending %ld expired %ld; %d violations\n",
          uri ? "mongodb" : "memory", THREADS, KEYS, (long long)stress_ms(),
          atomic_load(&r->calls), atomic_load(&r->calls) * 1000 / stress_ms(),
          atomic_load(&r->errors), atomic_load(&r->answers[RESV_RESERVED]),
          atomic_load(&r->answers[RESV_CONFIRMED]), atomic_load(&r->answers[RESV_CONFLICT]),
          atomic_load(&r->answers[RESV_ABANDONED]), atomic_load(&r->answers[RESV_KEPT]),
          atomic_load(&r->answers[RESV_ABSENT]), atomic_load(&r->answers[RESV_RELEASED]),
          atomic_load(&r->answers[RESV_PENDING]), atomic_load(&r->answers[RESV_EXPIRED]),
          atomic_load(&r->violations));
  ck_assert_int_eq(atomic_load(&r->violations), 0);
  ck_assert_int_gt(atomic_load(&r->answers[RESV_RESERVED]), 0);
  ck_assert_int_gt(atomic_load(&r->answers[RESV_CONFLICT]), 0);
  resv_store_close(r->store);
  for (int i = 0; i < KEYS; i++) pthread_mutex_destroy(&r->keys[i].mutex);
  free(r);
}

START_TEST(one_owner_per_key_under_load_on_memory) { stress(NULL); }
END_TEST

START_TEST(one_owner_per_key_under_load_on_mongo) { stress(test_mongo_uri()); }
END_TEST

Suite *stress_suite(void) {
  Suite *s = suite_create("stress");
  const TTest *tests[] = {
      one_owner_per_key_under_load_on_memory, one_owner_per_key_under_load_on_mongo, NULL};
  TCase *tc = test_tcase(s, "stress", 0, NULL, NULL, tests);
  tcase_set_timeout(tc, (double)(stress_ms() / 1000 + 60));
  return s;
}
