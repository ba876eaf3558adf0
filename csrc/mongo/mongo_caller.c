/* mongo_caller.c: blocking calls on the caller's own thread.
 *
 * resv_call waits for its answer whatever runs the call, so a MongoDB
 * store runs it where it is called (docs/design.md section 7) rather than
 * handing it to a dispatcher thread and back: two thread wake-ups a call,
 * which cost this VM's kernel more CPU than the driver's whole command.
 * Calls that must not block (resv_submit, resv_try_call) keep the
 * dispatcher.
 *
 * A blocking call borrows a client lent by this file and gives it back at
 * its end. The clients are popped from the store's mongoc pool, whose
 * maxPoolSize is twice the dispatcher's threads: each thread holds one,
 * and at most `threads` are lent to callers at once, so the pool never
 * runs dry and its pop (which waits without a deadline) is never needed:
 * a caller that finds every client lent waits on this file's condition
 * until its deadline, then answers RESV_ETIMEOUT. A lent client keeps the
 * collection handle of the type it ran last, and the most recently
 * returned is lent first, so one thread calling over and over reuses the
 * same client and handle.
 *
 * The deadline rule is the dispatcher's: every command carries maxTimeMS
 * (mongo_ops.c), and since no waiter gives up on the caller's behalf, the
 * socket does: each client's connections are made through
 * resv__mongo_deadline_stream (mongo_stream.c), whose reads, writes and
 * connects end by the call's deadline plus RESV__DEADLINE_GRACE_MS.
 *
 * One wait has no per-call bound in mongoc: a pooled client's server
 * selection takes the URI's serverSelectionTimeoutMS (the store's
 * timeout). A call with less time left than that, when no server is
 * known to take writes, is handed to the dispatcher (RESV__EWOULDBLOCK),
 * whose waiter answers at the deadline plus the grace.
 *
 * Shutdown refuses new borrowers and wakes the waiting ones (they answer
 * RESV_ECLOSED); the store then waits for the calls still running, and
 * only then are the clients given back and the pool destroyed. A child
 * forked after open never gets here (store.c answers RESV_ECLOSED first),
 * so it never touches its parent's clients. */
#include "mongo_internal.h"

#include <errno.h>
#include <stdlib.h>

/* A client lent to blocking calls. */
typedef struct slot {
  resv__mongo_conn_t conn;
  resv__mongo_deadline_t deadline; /* of the call using it */
  struct slot *next_idle;
  struct slot *next; /* every slot made */
} slot_t;

struct resv__mongo_callers {
  pthread_mutex_t mutex;
  pthread_cond_t cond; /* a client came back, or the store shuts down */
  slot_t *idle;        /* the clients not lent, last returned first */
  slot_t *all;
  int made, limit;
  bool refused;
};

resv__mongo_callers_t *resv__mongo_callers_new(int limit) {
  resv__mongo_callers_t *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  pthread_mutex_init(&c->mutex, NULL);
  resv__cond_init(&c->cond);
  c->limit = limit;
  return c;
}

/* A new slot with a client of m's pool, its connections made through the
 * deadline stream. NULL (err filled) when the pool has none to give. */
static slot_t *slot_new(resv__mongo_t *m, resv_error_t *err) {
  /* The pool's first pop starts mongoc's monitoring threads, from this
   * host's thread: with no signal to take (base.h). */
  sigset_t mask;
  resv__signals_block(&mask);
  mongoc_client_t *client = mongoc_client_pool_try_pop(m->pool);
  resv__signals_restore(&mask);
  if (!client) {
    resv__fail(err, RESV_EUNAVAILABLE, "no client in the pool");
    return NULL;
  }
  slot_t *s = bson_malloc0(sizeof *s);
  s->conn.client = client;
  s->deadline.client = client;
  s->deadline.deadline = INT64_MAX;
  /* Before the client's first command: every connection it makes from
   * here goes through the stream. */
  mongoc_client_set_stream_initiator(client, resv__mongo_deadline_stream, &s->deadline);
  return s;
}

/* Waits (mutex held) for a client to come back or for shutdown until
 * deadline; false when the deadline came first. */
static bool wait_for_client(resv__mongo_callers_t *c, int64_t deadline) {
  if (deadline == INT64_MAX) {
    pthread_cond_wait(&c->cond, &c->mutex);
    return true;
  }
  struct timespec ts;
  resv__deadline_timespec(deadline, &ts);
  return pthread_cond_timedwait(&c->cond, &c->mutex, &ts) != ETIMEDOUT;
}

/* Lends a client for a call due at deadline, or fails: RESV_ECLOSED after
 * refuse_blocking, RESV_ETIMEOUT when every client stayed lent until the
 * deadline. */
static slot_t *borrow(resv__mongo_t *m, int64_t deadline, resv_error_t *err) {
  resv__mongo_callers_t *c = m->callers;
  slot_t *s = NULL;
  bool make = false, timed_out = false;
  pthread_mutex_lock(&c->mutex);
  for (;;) {
    if (c->refused) {
      resv__fail(err, RESV_ECLOSED, "the store is closed");
      break;
    }
    if ((s = c->idle)) {
      c->idle = s->next_idle;
      break;
    }
    if (c->made < c->limit) {
      c->made++; /* this caller's, made outside the lock */
      make = true;
      break;
    }
    if (timed_out) {
      resv__fail(err, RESV_ETIMEOUT,
                 "no MongoDB client free for the call before its deadline "
                 "(%d blocking calls at once at most: the threads option)",
                 c->limit);
      break;
    }
    timed_out = !wait_for_client(c, deadline);
  }
  pthread_mutex_unlock(&c->mutex);
  if (!make)
    return s;
  s = slot_new(m, err);
  pthread_mutex_lock(&c->mutex);
  if (s) {
    s->next = c->all;
    c->all = s;
  } else {
    c->made--;
    pthread_cond_signal(&c->cond);
  }
  pthread_mutex_unlock(&c->mutex);
  return s;
}

static void give_back(resv__mongo_callers_t *c, slot_t *s) {
  pthread_mutex_lock(&c->mutex);
  s->next_idle = c->idle;
  c->idle = s;
  pthread_mutex_unlock(&c->mutex);
  pthread_cond_signal(&c->cond);
}

bool resv__mongo_execute_blocking(void *backend, resv_type_t *type,
                                  const resv_request_t *req, int64_t now,
                                  int64_t deadline, resv_answer_t *answer,
                                  resv_error_t *err) {
  resv__mongo_t *m = backend;
  slot_t *s = borrow(m, deadline, err);
  if (!s)
    return false;
  /* mongoc's pooled selection waits serverSelectionTimeoutMS whatever the
   * call's deadline: a call that has less left and knows no server to
   * write to leaves the wait to the dispatcher. (The list of servers is
   * only read while the last call did not reach one.) */
  if (deadline - resv__monotonic_ms() + RESV__DEADLINE_GRACE_MS < m->selection_ms &&
      !atomic_load_explicit(&m->last_reached, memory_order_relaxed) &&
      !resv__mongo_writable_known(s->conn.client)) {
    give_back(m->callers, s);
    return resv__fail(err, RESV__EWOULDBLOCK, "no server known to take writes");
  }
  s->deadline.deadline = deadline;
  bool ok = resv__mongo_execute_on(m, &s->conn, type, req, now, deadline, answer, err);
  /* Between calls (and for the driver's endSessions at shutdown) the
   * URI's timeouts apply. */
  s->deadline.deadline = INT64_MAX;
  give_back(m->callers, s);
  return ok;
}

void resv__mongo_refuse_blocking(void *backend) {
  resv__mongo_callers_t *c = ((resv__mongo_t *)backend)->callers;
  pthread_mutex_lock(&c->mutex);
  c->refused = true;
  pthread_mutex_unlock(&c->mutex);
  pthread_cond_broadcast(&c->cond);
}

void resv__mongo_callers_release(resv__mongo_t *m) {
  resv__mongo_callers_t *c = m->callers;
  if (!c)
    return;
  for (slot_t *s = c->all; s; s = s->next) {
    if (!s->conn.client)
      continue;
    resv__mongo_conn_forget(&s->conn);
    mongoc_client_pool_push(m->pool, s->conn.client);
    s->conn.client = NULL;
  }
  c->idle = NULL;
}

void resv__mongo_callers_free(resv__mongo_callers_t *c) {
  if (!c)
    return;
  slot_t *s = c->all;
  while (s) {
    slot_t *next = s->next;
    bson_free(s);
    s = next;
  }
  pthread_mutex_destroy(&c->mutex);
  pthread_cond_destroy(&c->cond);
  free(c);
}
