/* mongo_log.c: the driver's log lines, through a handler of resv's.
 *
 * libmongoc logs through one handler per process (mongoc_log_set_handler),
 * and its default one prints every level to stderr, DEBUG included: a
 * store whose server is down printed a line for each heartbeat of the
 * monitor. The first MongoDB store to open installs resv's handler. A line
 * is shown when the store it concerns asks for its level: the store's
 * log_level option, or RESV_LOG in the environment when that asks for
 * more; by default warnings and errors only. At those levels each kind of
 * line (its level, domain and text, the digits left out) is shown at most
 * once per store and minute, and the next one of its kind says how many
 * were held back; at info and debug every line is shown.
 *
 * A line names its store ("resv: mongodb host:port/db: WARNING: ..."):
 * the store that says it (resv__mongo_log_say), else the open store whose
 * hosts it quotes, else the only one open, else none ("resv: mongodb:
 * ..."). Every open store's password is scrubbed from it.
 * Lines go to stderr, where mongoc's went (nginx sends a worker's stderr to
 * its error log).
 *
 * While a store parses its URI, the thread's lines are kept instead
 * (resv__mongo_log_capture): mongoc says why a URI is bad, or which option
 * it ignores, only in a log line, and open puts that into its error. A
 * program with its own handler sets it after opening its first store. */
#include "mongo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KINDS 16            /* kinds of line remembered per store */
#define KIND_PERIOD_MS 60000 /* one line of a kind per store and minute */

typedef struct kind {
  uint64_t hash;
  int64_t last_ms;
  uint32_t held; /* lines of the kind not shown since last_ms */
} kind_t;

/* An open store as the handler sees it (the registry's list). */
struct resv__mongo_log {
  struct resv__mongo_log *next;
  const resv__mongo_t *m;
  mongoc_log_level_t most; /* the most verbose level shown */
  char name[320];          /* "mongodb hosts/database" */
  kind_t kinds[KINDS];
};

static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static resv__mongo_log_t *registry;
static resv__mongo_log_t unnamed = {.name = "mongodb"};
static int32_t env_level; /* RESV_LOG as a resv_log_level_t; 0: unset */
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static _Thread_local resv__mongo_log_capture_t *capturing;
static _Thread_local resv__mongo_log_t *speaking; /* resv__mongo_log_say's */

static const char *const LEVEL_NAMES[] = {"", "error", "warning", "info", "debug"};

/* The most verbose mongoc level a resv_log_level_t shows. */
static mongoc_log_level_t most_shown(int32_t level) {
  switch (level) {
  case RESV_LOG_ERROR:
    return MONGOC_LOG_LEVEL_CRITICAL;
  case RESV_LOG_INFO:
    return MONGOC_LOG_LEVEL_INFO;
  case RESV_LOG_DEBUG:
    return MONGOC_LOG_LEVEL_TRACE;
  default:
    return MONGOC_LOG_LEVEL_WARNING;
  }
}

int32_t resv__mongo_log_level_named(const char *name) {
  for (int32_t i = RESV_LOG_ERROR; i <= RESV_LOG_DEBUG; i++)
    if (name && strcmp(name, LEVEL_NAMES[i]) == 0)
      return i;
  return 0;
}

/* The level a store with option level shows: RESV_LOG may ask for more. */
static mongoc_log_level_t effective(int32_t level) {
  mongoc_log_level_t mine = most_shown(level), env = most_shown(env_level);
  return env_level && env > mine ? env : mine;
}

/* FNV-1a of the line's level, domain and text without its digits (ports,
 * milliseconds, pids): lines that differ only there are one kind. */
static uint64_t kind_hash(mongoc_log_level_t level, const char *domain,
                          const char *message) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)level;
  for (int pass = 0; pass < 2; pass++)
    for (const char *p = pass ? message : domain; *p; p++)
      if (*p < '0' || *p > '9')
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

/* Whether e shows a line of this kind now; *held is how many of its kind
 * it held back before. Under registry_mutex. */
static bool kind_due(resv__mongo_log_t *e, uint64_t hash, uint32_t *held) {
  int64_t now = resv__monotonic_ms();
  kind_t *oldest = &e->kinds[0];
  *held = 0;
  for (int i = 0; i < KINDS; i++) {
    kind_t *k = &e->kinds[i];
    if (k->hash == hash && k->last_ms) {
      if (now - k->last_ms < KIND_PERIOD_MS) {
        k->held++;
        return false;
      }
      *held = k->held;
      k->last_ms = now;
      k->held = 0;
      return true;
    }
    if (k->last_ms < oldest->last_ms)
      oldest = k;
  }
  *oldest = (kind_t){.hash = hash, .last_ms = now};
  return true;
}

/* The store a line concerns: the one whose hosts it quotes, else the only
 * one open, else the unnamed entry. Under registry_mutex. */
static resv__mongo_log_t *concerned(const char *message) {
  if (speaking)
    return speaking;
  for (resv__mongo_log_t *e = registry; e; e = e->next) {
    char hosts[sizeof e->m->hosts];
    memcpy(hosts, e->m->hosts, sizeof hosts);
    for (char *save = NULL, *h = strtok_r(hosts, ",", &save); h;
         h = strtok_r(NULL, ",", &save))
      if (strstr(message, h))
        return e;
  }
  if (registry && !registry->next)
    return registry;
  unnamed.most = effective(0);
  return &unnamed;
}

static void handler(mongoc_log_level_t level, const char *domain,
                    const char *message, void *data) {
  char text[1024];
  uint32_t held = 0;
  resv__mongo_log_t *e;

  if (capturing) {
    resv__mongo_log_capture_t *c = capturing;
    if (level <= MONGOC_LOG_LEVEL_WARNING && !c->text[0])
      snprintf(c->text, sizeof c->text, "%s", message);
    return;
  }
  pthread_mutex_lock(&registry_mutex);
  e = concerned(message);
  bool shown = level <= e->most &&
               (e->most > MONGOC_LOG_LEVEL_WARNING ||
                kind_due(e, kind_hash(level, domain, message), &held));
  if (shown) {
    snprintf(text, sizeof text, "%s", message);
    for (resv__mongo_log_t *s = registry; s; s = s->next)
      resv__mongo_scrub(s->m, text);
    if (held)
      fprintf(stderr, "resv: %s: %s: %s: %s (and %u more like it in the last minute)\n",
              e->name, mongoc_log_level_str(level), domain, text, (unsigned)held);
    else
      fprintf(stderr, "resv: %s: %s: %s: %s\n", e->name,
              mongoc_log_level_str(level), domain, text);
  }
  pthread_mutex_unlock(&registry_mutex);
}

static void install(void) {
  env_level = resv__mongo_log_level_named(getenv("RESV_LOG"));
  mongoc_log_set_handler(handler, NULL);
}

void resv__mongo_log_capture(resv__mongo_log_capture_t *c) {
  pthread_once(&install_once, install);
  c->text[0] = '\0';
  capturing = c;
}

void resv__mongo_log_release(void) { capturing = NULL; }

void resv__mongo_log_say(resv__mongo_log_t *e, const char *domain, const char *text) {
  speaking = e;
  mongoc_log(MONGOC_LOG_LEVEL_WARNING, domain, "%s", text);
  speaking = NULL;
}

resv__mongo_log_t *resv__mongo_log_add(const resv__mongo_t *m, int32_t level) {
  resv__mongo_log_t *e = bson_malloc0(sizeof *e);
  pthread_once(&install_once, install);
  e->m = m;
  e->most = effective(level);
  snprintf(e->name, sizeof e->name, "mongodb %s/%s", m->hosts, m->database);
  pthread_mutex_lock(&registry_mutex);
  e->next = registry;
  registry = e;
  pthread_mutex_unlock(&registry_mutex);
  return e;
}

void resv__mongo_log_remove(resv__mongo_log_t *e) {
  if (!e)
    return;
  pthread_mutex_lock(&registry_mutex);
  for (resv__mongo_log_t **p = &registry; *p; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      break;
    }
  pthread_mutex_unlock(&registry_mutex);
  bson_free(e);
}
