/* replay.c: the model's traces, replayed against the memory store.
 *
 * The memory store is the reference model of the MongoDB one (docs/design.md
 * section 6), and model/resv.pml is docs/design.md section 5 as MongoDB executes it.
 * This program ties the two together: it reads traces of the model (SPIN's
 * random simulations, model/replay.sh), and for every answer the model
 * gave it makes the same call on a memory store, at the same clock, and
 * checks the memory store answers the same; after each call it reads the
 * key with get and checks the store holds the model's document. A drift
 * between the model and the code (a rule changed on one side only) fails.
 *
 * A trace is the lines a model run printed, in order:
 *   TRACE <name>                                       a new trace
 *   EV op attempt owner key now arg  status owner confirmed exp version holds
 *   SW now count                                       a sweep, and its count
 *   DB key now  present owner confirmed exp version holds
 * EV is one call's answer, at the step that decided it: op 1 reserve (arg
 * the ttl), 2 confirm (arg the version), 3 abandon, 4 release; status is a
 * resv_status_t. holds is a set of attempts, one bit each. DB is a key's
 * document just after (one after each EV, one per key after a SW). Times
 * are the model's clock; the store's clock is BASE_MS plus it, and its
 * sweep_grace_ms the model's grace (the argument). The model's abandon is
 * one step in these traces (-DREPLAY), as the memory store does it:
 * model/README.md says why.
 *
 * The memory store also reclaims, on its own, a pending reservation expired
 * for at least the grace (docs/design.md section 6), which the model leaves to its
 * sweeper. docs/design.md section 5 makes the two alike ("expired and absent both
 * mean free to take"): where the model's document is pending and expired
 * for the grace at the latest clock the store has seen, the store may have
 * none, and then abandon and release may answer absent, get absent, and a
 * sweep count it no more. Everything else must be equal.
 *
 * Exit status 0 when every trace matched, 1 at the first difference (the
 * trace and its line are printed), 2 on bad input. */
#include <resv.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BASE_MS 1000000
#define MAX_ATTEMPTS 8

static resv_store_t *store;
static resv_type_t *type;
static char trace_name[64];
static long line_no;
static long answers, documents, traces;

static char keys[4][8], owners[4][8], attempts[MAX_ATTEMPTS][8];

/* The model's documents as the last DB lines gave them, and the latest
 * clock of the trace: what the store may have reclaimed. */
typedef struct model_doc {
  int present, owner, confirmed, exp;
} model_doc_t;
static model_doc_t model[4];
static int max_now, grace = 1;

static bool reclaimable(const model_doc_t *d) {
  return d->present && !d->confirmed && d->exp + grace <= max_now;
}

static void saw_now(int now) {
  if (now > max_now) max_now = now;
}

static void open_store(void) {
  resv_error_t err;
  resv_options_t opts = {.sweep_grace_ms = grace};
  if (store) resv_store_close(store);
  memset(model, 0, sizeof model);
  max_now = 0;
  store = resv_store_open(&opts, &err);
  if (!store || !(type = resv_store_type(store, "model", 5, "replay", 6, &err))) {
    fprintf(stderr, "replay: cannot open a memory store: %s\n", err.message);
    exit(2);
  }
}

static int differ(const char *what, const char *line) {
  fprintf(stderr, "replay: trace %s, line %ld: %s\n  %s", trace_name, line_no,
          what, line);
  return 1;
}

static resv_key_t key_of(int k) {
  return (resv_key_t){resv_cstr(""), resv_cstr("model"), resv_cstr(keys[k])};
}

static bool same_owner(const resv_answer_t *a, int o) {
  return a->owner_tenant.len == 0 && a->owner_id.len == strlen(owners[o]) &&
         memcmp(a->owner_id.ptr, owners[o], a->owner_id.len) == 0;
}

/* The answer's holds as a set of attempts (-1 when one is unknown). */
static int holds_of(const resv_answer_t *a) {
  int set = 0;
  for (size_t i = 0; i < a->nholds; i++) {
    int n;
    char tail;
    if (sscanf(a->holds[i].ptr, "a%d%c", &n, &tail) < 1 || n < 0 ||
        n >= MAX_ATTEMPTS || a->holds[i].len != strlen(attempts[n]))
      return -1;
    set |= 1 << n;
  }
  return set;
}

/* The described reservation equals the model's document. */
static bool same_doc(const resv_answer_t *a, int owner, int confirmed, int exp,
                     int version, int holds, bool with_holds) {
  if (!same_owner(a, owner)) return false;
  if (confirmed)
    return a->state == RESV_STATE_CONFIRMED && a->version == version;
  return a->state == RESV_STATE_PENDING && a->expires_at == BASE_MS + exp &&
         (!with_holds || holds_of(a) == holds);
}

static int event(const char *line) {
  int op, at, o, k, now, arg, st, ow, cf, exp, ver, holds;
  if (sscanf(line, "EV %d %d %d %d %d %d %d %d %d %d %d %d", &op, &at, &o, &k,
             &now, &arg, &st, &ow, &cf, &exp, &ver, &holds) != 12 ||
      at < 0 || at >= MAX_ATTEMPTS || o < 0 || o > 3 || k < 0 || k > 3 ||
      ow < 0 || ow > 3) {
    fprintf(stderr, "replay: line %ld: not an event: %s", line_no, line);
    exit(2);
  }
  resv_key_t key = key_of(k);
  resv_owner_t owner = {resv_cstr(""), resv_cstr(owners[o])};
  resv_str_t attempt = resv_cstr(attempts[at]);
  resv_answer_t a = {0};
  resv_error_t err;
  bool ok = false;
  saw_now(now);
  bool gone = reclaimable(&model[k]); /* the store may have none */
  resv_store_set_time(store, BASE_MS + now);
  switch (op) {
  case 1: ok = resv_reserve(type, &key, &owner, attempt, arg, &a, &err); break;
  case 2: ok = resv_confirm(type, &key, &owner, arg, &a, &err); break;
  case 3: ok = resv_abandon(type, &key, &owner, attempt, &a, &err); break;
  case 4: ok = resv_release(type, &key, &owner, &a, &err); break;
  default: fprintf(stderr, "replay: line %ld: unknown op %d\n", line_no, op); exit(2);
  }
  int rc = 0;
  if (!ok) {
    fprintf(stderr, "replay: the call failed: %s\n", err.message);
    rc = differ("the memory store answered an error", line);
  } else if (a.status != st &&
             !(gone && (op == 3 || op == 4) && a.status == RESV_ABSENT)) {
    char what[96];
    snprintf(what, sizeof what, "the memory store answered %s, the model %s",
             resv_status_name(a.status), resv_status_name(st));
    rc = differ(what, line);
  } else if ((st == RESV_RESERVED || st == RESV_CONFIRMED || st == RESV_CONFLICT) &&
             !same_doc(&a, ow, cf, exp, ver, holds, st == RESV_RESERVED)) {
    rc = differ("the answer's reservation differs from the model's", line);
  }
  answers++;
  resv_answer_clear(&a);
  return rc;
}

static int document(const char *line) {
  int k, now, present, ow, cf, exp, ver, holds;
  if (sscanf(line, "DB %d %d %d %d %d %d %d %d", &k, &now, &present, &ow, &cf,
             &exp, &ver, &holds) != 8 || k < 0 || k > 3 || ow < 0 || ow > 3) {
    fprintf(stderr, "replay: line %ld: not a document: %s", line_no, line);
    exit(2);
  }
  resv_key_t key = key_of(k);
  resv_answer_t a = {0};
  resv_error_t err;
  int rc = 0;
  model[k] = (model_doc_t){present, ow, cf, exp};
  resv_store_set_time(store, BASE_MS + now);
  if (!resv_get(type, &key, &a, &err)) {
    rc = differ("get failed", line);
  } else if (a.status == RESV_ABSENT && reclaimable(&model[k])) {
    /* reclaimed by the store: alike */
  } else if (!present) {
    if (a.status != RESV_ABSENT) rc = differ("get: the model has no document", line);
  } else {
    int status = cf ? RESV_CONFIRMED : exp > now ? RESV_PENDING : RESV_EXPIRED;
    if (a.status != status || !same_doc(&a, ow, cf, exp, ver, holds, true))
      rc = differ("get: the store's reservation differs from the model's document", line);
  }
  documents++;
  resv_answer_clear(&a);
  return rc;
}

/* A sweep at now: the store deletes what the model's sweeper deleted,
 * less what it had reclaimed already. */
static int sweep(const char *line) {
  int now, count;
  if (sscanf(line, "SW %d %d", &now, &count) != 2) {
    fprintf(stderr, "replay: line %ld: not a sweep: %s", line_no, line);
    exit(2);
  }
  saw_now(now);
  int gone = 0;
  for (int k = 0; k < 4; k++) gone += reclaimable(&model[k]);
  resv_answer_t a = {0};
  resv_error_t err;
  int rc = 0;
  resv_store_set_time(store, BASE_MS + now);
  if (!resv_sweep(type, &a, &err))
    rc = differ("sweep failed", line);
  else if (a.status != RESV_SWEPT || a.count > count || a.count < count - gone)
    rc = differ("the sweep's count differs from the model's", line);
  answers++;
  resv_answer_clear(&a);
  return rc;
}

int main(int argc, char **argv) {
  char line[512];
  int rc = 0;
  if (argc > 1 && (grace = atoi(argv[1])) < 1) {
    fprintf(stderr, "usage: replay [GRACE_MS >= 1] < traces\n");
    return 2;
  }
  for (int i = 0; i < 4; i++) {
    snprintf(keys[i], sizeof keys[i], "k%d", i);
    snprintf(owners[i], sizeof owners[i], "o%d", i);
  }
  for (int i = 0; i < MAX_ATTEMPTS; i++) snprintf(attempts[i], sizeof attempts[i], "a%d", i);
  strcpy(trace_name, "-");
  open_store();
  while (!rc && fgets(line, sizeof line, stdin)) {
    line_no++;
    if (strncmp(line, "TRACE ", 6) == 0) {
      snprintf(trace_name, sizeof trace_name, "%.*s", (int)strcspn(line + 6, "\n"), line + 6);
      open_store();
      traces++;
    } else if (strncmp(line, "EV ", 3) == 0) {
      rc = event(line);
    } else if (strncmp(line, "DB ", 3) == 0) {
      rc = document(line);
    } else if (strncmp(line, "SW ", 3) == 0) {
      rc = sweep(line);
    }
  }
  resv_store_close(store);
  if (!rc && answers == 0) {
    fprintf(stderr, "replay: no answer to replay\n");
    return 2;
  }
  if (!rc)
    printf("replay: %ld traces, %ld answers and %ld documents equal the model's\n",
           traces, answers, documents);
  return rc;
}
