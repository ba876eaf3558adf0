/* test_race.c: many threads reserving the same free key at the same
 * instant get exactly one `reserved` and the rest `conflict` naming the
 * winner, on the memory store and on MongoDB (where the losers go through
 * the duplicate-key path of docs/design.md section 5). */
#include <stdio.h>
#include <string.h>

#include "tests.h"

#define RACERS 16

typedef struct racer {
  resv_type_t *type;
  pthread_barrier_t *start;
  char owner[24];
  resv_answer_t answer;
  resv_error_t error;
  bool ok;
} racer_t;

static void *race(void *arg) {
  racer_t *r = arg;
  resv_request_t req = {.op = RESV_OP_RESERVE, .key = test_key("email", "same@x"),
                        .owner = test_owner("", r->owner), .attempt = resv_cstr("a"),
                        .ttl_ms = 60000};
  pthread_barrier_wait(r->start);
  r->ok = resv_call(r->type, &req, &r->answer, &r->error);
  return NULL;
}

static void run_race(const char *uri) {
  resv_store_t *store = test_open(uri);
  resv_type_t *type = test_fresh_type(store, "race");
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, RACERS);
  racer_t racers[RACERS];
  pthread_t threads[RACERS];
  memset(racers, 0, sizeof racers);
  for (int i = 0; i < RACERS; i++) {
    racers[i].type = type;
    racers[i].start = &start;
    snprintf(racers[i].owner, sizeof racers[i].owner, "owner-%d", i);
    pthread_create(&threads[i], NULL, race, &racers[i]);
  }
  for (int i = 0; i < RACERS; i++) pthread_join(threads[i], NULL);

  int winners = 0, winner = -1;
  for (int i = 0; i < RACERS; i++) {
    ck_assert_msg(racers[i].ok, "racer %d: %s", i, racers[i].error.message);
    if (racers[i].answer.status == RESV_RESERVED) {
      winners++;
      winner = i;
    }
  }
  ck_assert_int_eq(winners, 1);
  for (int i = 0; i < RACERS; i++) {
    if (i == winner) continue;
    ck_assert_int_eq(racers[i].answer.status, RESV_CONFLICT);
    ck_assert(test_str_is(racers[i].answer.owner_id, racers[winner].owner));
  }
  for (int i = 0; i < RACERS; i++) resv_answer_clear(&racers[i].answer);
  pthread_barrier_destroy(&start);
  resv_store_close(store);
}

START_TEST(one_winner_on_memory) { run_race(NULL); }
END_TEST

START_TEST(one_winner_on_mongo) { run_race(test_mongo_uri()); }
END_TEST

Suite *race_suite(void) {
  const test_entry_t tests[] = {
      {one_winner_on_memory, 0, 20},
      {one_winner_on_mongo, 0, 3},
      {NULL, 0, 0}};
  return test_suite_loops("race", "race", 60, NULL, NULL, tests);
}
