/* apm.c: see apm.h. The counter is guarded by a mutex: commands start on
 * the dispatcher's threads while the benchmark reads from its own. */
#include "apm.h"

#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#define MAX_NAMES 32

static bool enabled;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int count;
static char names[MAX_NAMES][32];

mongoc_client_pool_t *__real_mongoc_client_pool_new_with_error(
    const mongoc_uri_t *uri, bson_error_t *error);
mongoc_client_pool_t *__wrap_mongoc_client_pool_new_with_error(
    const mongoc_uri_t *uri, bson_error_t *error);
mongoc_client_t *__real_mongoc_client_new_from_uri_with_error(
    const mongoc_uri_t *uri, bson_error_t *error);
mongoc_client_t *__wrap_mongoc_client_new_from_uri_with_error(
    const mongoc_uri_t *uri, bson_error_t *error);

static void started(const mongoc_apm_command_started_t *event) {
  pthread_mutex_lock(&lock);
  if (count < MAX_NAMES) {
    strncpy(names[count], mongoc_apm_command_started_get_command_name(event),
            sizeof names[count] - 1);
  }
  count++;
  pthread_mutex_unlock(&lock);
}

static mongoc_apm_callbacks_t *callbacks(void) {
  mongoc_apm_callbacks_t *cbs = mongoc_apm_callbacks_new();
  mongoc_apm_set_command_started_cb(cbs, started);
  return cbs;
}

mongoc_client_pool_t *__wrap_mongoc_client_pool_new_with_error(
    const mongoc_uri_t *uri, bson_error_t *error) {
  mongoc_client_pool_t *pool =
      __real_mongoc_client_pool_new_with_error(uri, error);
  if (pool && enabled) {
    mongoc_apm_callbacks_t *cbs = callbacks();
    mongoc_client_pool_set_apm_callbacks(pool, cbs, NULL);
    mongoc_apm_callbacks_destroy(cbs);
  }
  return pool;
}

mongoc_client_t *__wrap_mongoc_client_new_from_uri_with_error(
    const mongoc_uri_t *uri, bson_error_t *error) {
  mongoc_client_t *client =
      __real_mongoc_client_new_from_uri_with_error(uri, error);
  if (client && enabled) {
    mongoc_apm_callbacks_t *cbs = callbacks();
    mongoc_client_set_apm_callbacks(client, cbs, NULL);
    mongoc_apm_callbacks_destroy(cbs);
  }
  return client;
}

void bench_apm_enable(void) { enabled = true; }

void bench_apm_reset(void) {
  pthread_mutex_lock(&lock);
  count = 0;
  memset(names, 0, sizeof names);
  pthread_mutex_unlock(&lock);
}

int bench_apm_count(void) {
  pthread_mutex_lock(&lock);
  int n = count;
  pthread_mutex_unlock(&lock);
  return n;
}

void bench_apm_names(char *buf, size_t size) {
  size_t used = 0;
  if (!size) return;
  buf[0] = '\0';
  pthread_mutex_lock(&lock);
  for (int i = 0; i < count && i < MAX_NAMES && used + 1 < size; i++) {
    int n = snprintf(buf + used, size - used, "%s%s", i ? "," : "", names[i]);
    if (n < 0) break;
    used += (size_t)n;
  }
  pthread_mutex_unlock(&lock);
}
