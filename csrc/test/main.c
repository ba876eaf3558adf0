/* main.c: the one Check runner. Suites are named after the files they
 * test. RESV_SUITES=a,b,c runs only those suites (CK_RUN_SUITE takes just
 * one); CK_FORK=no runs them in-process (as valgrind wants). */
#include <stdlib.h>
#include <string.h>

#include "tests.h"

#define SUITE(name) {#name, name##_suite}

static const struct {
  const char *name;
  Suite *(*make)(void);
} suites[] = {
    SUITE(validate),     SUITE(rules_memory), SUITE(race),       SUITE(pool),
    SUITE(rules_mongo),  SUITE(faults),       SUITE(stress),     SUITE(security),
    SUITE(mongo_decode), SUITE(mongo_log),   SUITE(mongo_store),  SUITE(mongo_diff),
    SUITE(job),          SUITE(mongo_replset), SUITE(failover), SUITE(partition),
    SUITE(mongo_sweep),  SUITE(deploy),
    SUITE(store),        SUITE(memory),
    SUITE(rules_file),   SUITE(file_store),   SUITE(file_diff),   SUITE(file_records),
    SUITE(file_state),
    SUITE(sweep),        SUITE(stats),        SUITE(scan),      SUITE(nonblocking),
    SUITE(no_create),
    SUITE(mongo_options), SUITE(mongo_retry),
    SUITE(mongo_skew),   SUITE(mongo_inline),
    SUITE(file_integrity),
    SUITE(rules_all),    SUITE(rules_model),
    SUITE(mongo_all),    SUITE(mongo_all_faults),
    SUITE(mongo_build),  SUITE(mongo_inplace),
};

/* True when name is one of the comma-separated names in list. */
static bool listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && strncmp(p, name, n) == 0) return true;
    p += len + (p[len] == ',');
  }
  return false;
}

int main(void) {
  const char *only = getenv("RESV_SUITES");
  SRunner *runner = srunner_create(NULL);
  for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
    if (!only || listed(only, suites[i].name)) srunner_add_suite(runner, suites[i].make());
  srunner_run_all(runner, CK_NORMAL);
  int failed = srunner_ntests_failed(runner);
  srunner_free(runner);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
