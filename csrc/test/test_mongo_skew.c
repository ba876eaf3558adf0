/* test_mongo_skew.c: the servers' clocks against this host's
 * (mongo_skew.c), on an emulator of this test whose hello's localTime a
 * control command puts off:
 *   - a server 10 minutes ahead shows in stats (clock_skew_ms within its
 *     error) and, with a 60 s ttl in use, the store warns once on stderr;
 *   - a server with the host's clock shows a skew within a second and no
 *     warning;
 *   - the same on a replica set, whose monitor's hellos are awaited;
 *   - an embedded store reports no measure (error -1). */
#include "emu.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define HEARTBEAT "heartbeatFrequencyMS=500"

static void set_clock(const char *uri, int64_t ms) {
  mongoc_client_t *client = mongoc_client_new(uri);
  bson_t *command = BCON_NEW("emulatorControl", "clock", "ms", BCON_INT64(ms));
  bson_error_t error;
  ck_assert(client);
  ck_assert_msg(mongoc_client_command_simple(client, "admin", command, NULL, NULL, &error),
                "%s", error.message);
  bson_destroy(command);
  mongoc_client_destroy(client);
}

/* Opens a store on uri, reserves with a 60 s ttl and waits until the
 * monitor has measured the clock twice since; returns the store's stats
 * and what it wrote to stderr meanwhile. */
static const char *measure(const char *uri, resv_stats_t *st) {
  char with[512];
  resv_answer_t a = {0};
  resv_error_t err;
  size_t n = strlen(uri);
  snprintf(with, sizeof with, "%s%s" HEARTBEAT, uri,
           strchr(uri, '?') ? "&" : n && uri[n - 1] == '/' ? "?" : "/?");
  test_stderr_begin();
  resv_store_t *s = test_open(with);
  resv_type_t *t = test_fresh_type(s, "skew");
  test_reserve(t, "k", "ann", "a", 60000, &a);
  for (int i = 0; i < 100; i++) {
    ck_assert(resv_store_stats(s, st, &err));
    if (st->clock_skew_error_ms >= 0) break;
    usleep(50000);
  }
  usleep(1300000); /* two more heartbeats, with the ttl known */
  ck_assert(resv_store_stats(s, st, &err));
  resv_answer_clear(&a);
  resv_store_close(s);
  return test_stderr_end();
}

static void skewed_and_not(const char *mode) {
  emu_t e;
  resv_stats_t st;
  emu_start_mode(&e, 0, mode);

  set_clock(e.uri, 600000);
  const char *out = measure(e.uri, &st);
  ck_assert_int_ge(st.clock_skew_error_ms, 0);
  ck_assert_msg(llabs(st.clock_skew_ms - 600000) <= st.clock_skew_error_ms + 1000,
                "skew %lld within %lld", (long long)st.clock_skew_ms,
                (long long)st.clock_skew_error_ms);
  ck_assert_msg(strstr(out, "WARNING: clock: the clock of 127.0.0.1:"), "%s", out);
  ck_assert_msg(strstr(out, "ahead of this host's"), "%s", out);
  ck_assert_msg(strstr(out, "shortest ttl in use (60000 ms)"), "%s", out);

  set_clock(e.uri, 0);
  out = measure(e.uri, &st);
  ck_assert_int_ge(st.clock_skew_error_ms, 0);
  ck_assert_msg(llabs(st.clock_skew_ms) <= st.clock_skew_error_ms + 1000, "skew %lld",
                (long long)st.clock_skew_ms);
  ck_assert_msg(!strstr(out, "clock"), "%s", out);
  emu_stop(&e);
}

START_TEST(a_skewed_server_shows_in_stats_and_warns) { skewed_and_not(NULL); }
END_TEST

START_TEST(a_skewed_replica_set_shows_in_stats_and_warns) { skewed_and_not("--replset"); }
END_TEST

START_TEST(an_embedded_store_measures_no_skew) {
  resv_store_t *s = test_open(NULL);
  resv_stats_t st;
  resv_error_t err;
  ck_assert(resv_store_stats(s, &st, &err));
  ck_assert_int_eq(st.clock_skew_ms, 0);
  ck_assert_int_eq(st.clock_skew_error_ms, -1);
  resv_store_close(s);
}
END_TEST

Suite *mongo_skew_suite(void) {
  const TTest *tests[] = {
      a_skewed_server_shows_in_stats_and_warns, a_skewed_replica_set_shows_in_stats_and_warns,
      an_embedded_store_measures_no_skew, NULL};
  return test_suite("mongo_skew", "clock", 60, NULL, NULL, tests);
}
