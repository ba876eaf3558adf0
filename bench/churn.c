/* churn.c: the memory store under a churn of distinct keys (issue 14):
 * millions of sign-up attempts that nobody confirms, each a new key with
 * a short ttl, the store's clock moving on 1 ms per attempt. Prints,
 * every `every` keys, the live entries and bytes the store counts
 * (resv_store_stats) and the process's RSS: all flat once the first
 * ttl + grace has passed, where the store used to keep every key.
 *
 *   build/bench/churn [keys, default 2000000] [ttl_ms 1000] [grace_ms 1000] */
#include "bench.h"

#include <stdio.h>
#include <unistd.h>

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    fclose(f);
  }
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

int main(int argc, char **argv) {
  long keys = argc > 1 ? atol(argv[1]) : 2000000;
  int64_t ttl = argc > 2 ? atol(argv[2]) : 1000;
  int64_t grace = argc > 3 ? atol(argv[3]) : 1000;
  long every = keys / 20 > 0 ? keys / 20 : 1;
  resv_options_t o = {.sweep_grace_ms = grace};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) bench_die("open", &err);
  resv_type_t *t = resv_store_type(s, "shop", 4, "user", 4, &err);
  if (!t) bench_die("type", &err);
  resv_answer_t a = {0};
  resv_stats_t st;
  char key[64];
  int64_t now = INT64_C(1700000000000);
  printf("memory store churn: %ld distinct keys, ttl %lld ms, grace %lld ms, clock +1 ms a key\n",
         keys, (long long)ttl, (long long)grace);
  printf("  %10s %10s %12s %10s\n", "keys", "entries", "bytes", "RSS kB");
  for (long i = 1; i <= keys; i++) {
    resv_store_set_time(s, now++);
    int n = snprintf(key, sizeof key, "user%ld@example.com", i);
    resv_key_t k = {{"", 0}, {"email", 5}, {key, (size_t)n}};
    resv_owner_t ow = {{"", 0}, {"owner-0001", 10}};
    if (!resv_reserve(t, &k, &ow, resv_cstr("attempt1"), ttl, &a, &err)) bench_die("reserve", &err);
    bench_expect("reserve", &a, RESV_RESERVED);
    if (i % every == 0) {
      if (!resv_store_stats(s, &st, &err)) bench_die("stats", &err);
      printf("  %10ld %10lld %12lld %10ld\n", i, (long long)st.entries,
             (long long)st.bytes, rss_kb());
    }
  }
  resv_answer_clear(&a);
  resv_store_close(s);
  return 0;
}
