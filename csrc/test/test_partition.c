/* test_partition.c: a Jepsen-style partition test of the MongoDB store.
 *
 * The emulator's replica set cuts its primary off from the other two
 * members while clients still reach it (emulatorControl "partition"). The
 * cut-off member keeps acting as primary for a few seconds before it
 * notices, as MongoDB's does for up to its election timeout, while the
 * other two elect a new primary. Two stores race reserves of the same keys
 * from both sides: one bound to the cut-off primary (directConnection=true),
 * one following the set. Every "reserved" answer is recorded with its time
 * and ttl; the checker looks for a key that two owners were both answered
 * live for at once. With write_concern = 1 the cut-off primary acknowledges
 * writes the new primary never sees, so the checker must find such double
 * grants (the proof that it can fail); with the store's default,
 * w: "majority", the cut-off primary cannot acknowledge anything and it
 * must find none. The set's own default write concern is made w: 1, so
 * only the w the store sends protects it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "emu.h"

#define SIDE_CLIENTS 4 /* per side */
#define KEYS 40
#define MAX_GRANTS 1024
#define TTL_MS 60000
#define NOTICE_MS 4000   /* the cut-off primary steps down after this */
#define SETTLE_MS 300    /* the set's store learns of the new primary */
#define RACE_MS 2000     /* the clients race while the cut-off one still acts */

typedef struct grant {
  int key, owner;
  int64_t at; /* monotonic ms of the answer */
} grant_t;

typedef struct race {
  pthread_mutex_t mutex;
  grant_t grants[MAX_GRANTS];
  int n, errors;
  atomic_int stop;
} race_t;

typedef struct racer {
  race_t *race;
  resv_type_t *type;
  int owner; /* < SIDE_CLIENTS: the cut-off side */
  unsigned seed;
} racer_t;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reserves every key once, in an order of its own, until told to stop. */
static void *racer_main(void *arg) {
  racer_t *c = arg;
  char owner_id[32], key_name[32];
  resv_answer_t a = {0};
  resv_error_t err;
  int order[KEYS];

  snprintf(owner_id, sizeof owner_id, "owner-%d", c->owner);
  for (int i = 0; i < KEYS; i++) order[i] = i;
  for (int i = KEYS - 1; i > 0; i--) {
    int j = rand_r(&c->seed) % (i + 1), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  for (int i = 0; i < KEYS && !atomic_load(&c->race->stop); i++) {
    snprintf(key_name, sizeof key_name, "k-%d", order[i]);
    resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", key_name),
                        .owner = test_owner("", owner_id), .attempt = resv_cstr("a"),
                        .ttl_ms = TTL_MS};
    bool ok = resv_call(c->type, &r, &a, &err);
    pthread_mutex_lock(&c->race->mutex);
    if (!ok)
      c->race->errors++;
    else if (a.status == RESV_RESERVED && c->race->n < MAX_GRANTS)
      c->race->grants[c->race->n++] = (grant_t){order[i], c->owner, now_ms()};
    pthread_mutex_unlock(&c->race->mutex);
  }
  resv_answer_clear(&a);
  return NULL;
}

/* Keys two owners were answered "reserved" for, each answer given while
 * the other's was live (the first few shown). */
static int double_grants(const race_t *race) {
  int found = 0;
  for (int i = 0; i < race->n; i++)
    for (int j = i + 1; j < race->n; j++) {
      const grant_t *x = &race->grants[i], *y = &race->grants[j];
      if (x->key != y->key || x->owner == y->owner) continue;
      if (x->at < y->at + TTL_MS && y->at < x->at + TTL_MS) {
        if (found < 3)
          fprintf(stderr, "partition: key k-%d granted to owner-%d and owner-%d\n", x->key,
                  x->owner, y->owner);
        found++;
      }
    }
  return found;
}

static resv_type_t *type_of(resv_store_t *s, const char *name) {
  resv_error_t err;
  resv_answer_t a = {0};
  resv_type_t *t = resv_store_type(s, "test", 4, name, strlen(name), &err);
  ck_assert_msg(t != NULL, "type: %s", err.message);
  /* Sets the type up (collection, indexes) before the partition. */
  resv_request_t r = {.op = RESV_OP_GET, .key = test_key("email", "warm-up")};
  ck_assert_msg(resv_call(t, &r, &a, &err), "warm-up: %s", err.message);
  resv_answer_clear(&a);
  return t;
}

/* The clients of both sides race while the primary is cut off. */
static void race_both_sides(race_t *race, resv_type_t *cut_off, resv_type_t *majority) {
  racer_t racers[2 * SIDE_CLIENTS];
  pthread_t threads[2 * SIDE_CLIENTS];
  for (int i = 0; i < 2 * SIDE_CLIENTS; i++) {
    racers[i] = (racer_t){.race = race, .type = i < SIDE_CLIENTS ? cut_off : majority,
                          .owner = i, .seed = (unsigned)(i * 7919 + 3)};
    pthread_create(&threads[i], NULL, racer_main, &racers[i]);
  }
  usleep(RACE_MS * 1000);
  atomic_store(&race->stop, 1);
  for (int i = 0; i < 2 * SIDE_CLIENTS; i++) pthread_join(threads[i], NULL);
}

/* True when the set (emulatorControl status) has a primary other than old. */
static bool elected_other(mongoc_client_t *admin, const char *old) {
  bson_t *cmd = BCON_NEW("emulatorControl", "status"), reply;
  bson_error_t error;
  bson_iter_t it, members, member;
  bool found = false;
  if (mongoc_client_command_simple(admin, "admin", cmd, NULL, &reply, &error) &&
      bson_iter_init_find(&it, &reply, "members") && bson_iter_recurse(&it, &members))
    while (!found && bson_iter_next(&members) && bson_iter_recurse(&members, &member)) {
      const char *name = NULL, *state = NULL;
      while (bson_iter_next(&member)) {
        if (BSON_ITER_HOLDS_UTF8(&member) && strcmp(bson_iter_key(&member), "name") == 0)
          name = bson_iter_utf8(&member, NULL);
        if (BSON_ITER_HOLDS_UTF8(&member) && strcmp(bson_iter_key(&member), "stateStr") == 0)
          state = bson_iter_utf8(&member, NULL);
      }
      found = name && state && strcmp(state, "PRIMARY") == 0 && strcmp(name, old) != 0;
    }
  bson_destroy(&reply);
  bson_destroy(cmd);
  return found;
}

/* Waits until the other two have elected a primary, then lets the set's
 * store (whose monitor hears of it at once) move to it. */
static void await_new_primary(mongoc_client_t *admin, const char *old) {
  bool elected = false;
  for (int i = 0; i < 200 && !(elected = elected_other(admin, old)); i++)
    usleep(50 * 1000);
  ck_assert_msg(elected, "no new primary elected");
  usleep(SETTLE_MS * 1000);
}

/* One run: returns the double grants found. */
static int partition_run(int32_t write_concern) {
  emu_t e;
  char primary[128] = "", direct[256], type[64];
  race_t *race = calloc(1, sizeof *race);
  resv_options_t o = {.threads = SIDE_CLIENTS, .timeout_ms = 1000,
                      .write_concern = write_concern};

  ck_assert_ptr_nonnull(race);
  pthread_mutex_init(&race->mutex, NULL);
  emu_start_mode(&e, 0, "--replset");
  mongoc_client_t *admin = mongoc_client_new(e.uri);
  ck_assert_ptr_nonnull(admin);
  mongoc_client_set_error_api(admin, MONGOC_ERROR_API_VERSION_2);
  ck_assert(emu_admin(admin, BCON_NEW("setDefaultRWConcern", BCON_INT32(1),
                                    "defaultWriteConcern", "{", "w", BCON_INT32(1), "}"), true,
                    NULL, NULL, 0));
  ck_assert(emu_admin(admin, BCON_NEW("hello", BCON_INT32(1)), true, "primary", primary,
                    sizeof primary));
  ck_assert(primary[0]);
  snprintf(direct, sizeof direct, "mongodb://%s/?directConnection=true", primary);
  snprintf(type, sizeof type, "partition%dw%d", (int)getpid(), (int)write_concern);
  resv_store_t *cut = emu_open(direct, o), *set = emu_open(e.uri, o);
  resv_type_t *cut_type = type_of(cut, type), *set_type = type_of(set, type);

  ck_assert(emu_admin(admin, BCON_NEW("emulatorControl", "partition", "member",
                                    BCON_UTF8(primary), "noticeMS", BCON_INT32(NOTICE_MS)), true,
                    NULL, NULL, 0));
  await_new_primary(admin, primary);
  race_both_sides(race, cut_type, set_type);
  emu_admin(admin, BCON_NEW("emulatorControl", "heal"), true, NULL, NULL, 0);

  int found = double_grants(race), majority_side = 0;
  for (int i = 0; i < race->n; i++) majority_side += race->grants[i].owner >= SIDE_CLIENTS;
  fprintf(stderr, "partition: w %s: %d grants (%d on the majority side), %d call errors, "
                  "%d double grants\n",
          write_concern == 1 ? "1" : "majority", race->n, majority_side, race->errors, found);
  ck_assert_msg(majority_side >= KEYS / 2, "only %d grants on the majority side",
                majority_side);
  resv_store_close(cut);
  resv_store_close(set);
  mongoc_client_destroy(admin);
  emu_stop(&e);
  pthread_mutex_destroy(&race->mutex);
  free(race);
  return found;
}

START_TEST(majority_writes_never_grant_a_key_twice_across_a_partition) {
  ck_assert_int_eq(partition_run(0), 0);
}
END_TEST

/* The proof that the checker can fail: the cut-off primary acknowledges
 * w: 1 reserves that the new primary grants again. */
START_TEST(w1_writes_are_granted_twice_across_a_partition) {
  ck_assert_msg(partition_run(1) > 0, "no double grant found with write_concern = 1");
}
END_TEST

Suite *partition_suite(void) {
  const TTest *tests[] = {
      majority_writes_never_grant_a_key_twice_across_a_partition,
      w1_writes_are_granted_twice_across_a_partition, NULL};
  return test_suite("partition", "partition", 60, NULL, NULL, tests);
}
