/* main.c: the one Check runner. Suites are named after the files they
 * test; CK_RUN_SUITE=<name> runs one, CK_FORK=no runs them in-process (as
 * valgrind wants). */
#include <stdlib.h>

#include "tests.h"

typedef Suite *(*suite_fn)(void);

static const suite_fn suites[] = {
    validate_suite,
    rules_memory_suite,
    race_suite,
    pool_suite,
    rules_mongo_suite,
    faults_suite,
    stress_suite,
    security_suite,
    mongo_decode_suite, mongo_store_suite, mongo_diff_suite,
};

int main(void) {
  SRunner *runner = srunner_create(NULL);
  for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
    srunner_add_suite(runner, suites[i]());
  srunner_run_all(runner, CK_NORMAL);
  int failed = srunner_ntests_failed(runner);
  srunner_free(runner);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
