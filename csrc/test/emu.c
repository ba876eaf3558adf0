/* emu.c: emulator processes, fail points and plain clients for the fault,
 * stress and security suites (emu.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu.h"

/* A port that was free a moment ago on loopback. */
static int free_port(void) {
  struct sockaddr_in a = {.sin_family = AF_INET};
  socklen_t len = sizeof a;
  int fd = socket(AF_INET, SOCK_STREAM, 0), port;
  ck_assert(fd >= 0);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
  ck_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
  port = ntohs(a.sin_port);
  close(fd);
  return port;
}

void emu_start(emu_t *e, int port, bool mongos) {
  emu_start_mode(e, port, mongos ? "--mongos" : NULL);
}

void emu_start_mode(emu_t *e, int port, const char *mode) {
  const char *args[] = {mode, NULL};
  emu_start_args(e, port, args);
}

void emu_start_args(emu_t *e, int port, const char *const *args) {
  int in[2], out[2];
  size_t used = 0;
  char port_arg[16];
  bool replset = false;
  const char *argv[16] = {"python3", "emulator/run.py", "--port", port_arg};
  size_t argc = 4;

  for (size_t i = 0; args && args[i] && argc + 1 < sizeof argv / sizeof argv[0]; i++) {
    replset = replset || strcmp(args[i], "--replset") == 0;
    argv[argc++] = args[i];
  }
  argv[argc] = NULL;

  /* A replica set picks its three ports itself. */
  if (!port && !replset) port = free_port();
  snprintf(port_arg, sizeof port_arg, "%d", port);
  ck_assert(pipe(in) == 0 && pipe(out) == 0);
  e->pid = fork();
  ck_assert(e->pid >= 0);
  if (e->pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]), close(in[1]), close(out[0]), close(out[1]);
    execv("/usr/bin/python3", (char *const *)argv);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  while (used + 1 < sizeof e->uri) {
    ssize_t n = read(out[0], e->uri + used, 1);
    if (n <= 0 || e->uri[used] == '\n') break;
    used++;
  }
  e->uri[used] = '\0';
  close(out[0]);
  e->stdin_fd = in[1];
  e->port = port;
  ck_assert_msg(strncmp(e->uri, "mongodb://", 10) == 0,
                "the emulator did not start on port %d: '%s'", port, e->uri);
}

void emu_kill(emu_t *e) {
  if (e->pid <= 0) return;
  kill(e->pid, SIGKILL);
  waitpid(e->pid, NULL, 0);
  close(e->stdin_fd);
  e->pid = 0;
}

void emu_stop(emu_t *e) {
  if (e->pid <= 0) return;
  close(e->stdin_fd);
  waitpid(e->pid, NULL, 0);
  e->pid = 0;
}

void emu_uri_with_app(const char *uri, const char *app, char *out, size_t size) {
  const char *scheme = strstr(uri, "://");
  const char *hosts = scheme ? scheme + 3 : uri;
  const char *sep;
  if (strchr(uri, '?'))
    sep = "&";
  else if (strchr(hosts, '/'))
    sep = "?";
  else
    sep = "/?";
  snprintf(out, size, "%s%sappname=%s", uri, sep, app);
}

void emu_failpoint(const char *uri, const char *mode_json, const char *data_json) {
  char json[1024];
  bson_error_t error;
  bson_t reply;
  snprintf(json, sizeof json,
           "{\"configureFailPoint\": \"failCommand\", \"mode\": %s, \"data\": %s}",
           mode_json, data_json ? data_json : "{}");
  bson_t *cmd = bson_new_from_json((const uint8_t *)json, -1, &error);
  ck_assert_msg(cmd != NULL, "%s: %s", json, error.message);
  mongoc_client_t *client = mongoc_client_new(uri);
  ck_assert_ptr_nonnull(client);
  mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
  bool ok = mongoc_client_command_simple(client, "admin", cmd, NULL, &reply, &error);
  ck_assert_msg(ok, "configureFailPoint %s: %s", json, error.message);
  bson_destroy(&reply);
  bson_destroy(cmd);
  mongoc_client_destroy(client);
}

void emu_block_app(const char *uri, const char *command, const char *app, int times, int ms) {
  char mode[64], data[512];
  snprintf(mode, sizeof mode, "{\"times\": %d}", times);
  snprintf(data, sizeof data,
           "{\"failCommands\": [\"%s\"], \"appName\": \"%s\","
           " \"blockConnection\": true, \"blockTimeMS\": %d}", command, app, ms);
  emu_failpoint(uri, mode, data);
}

void emu_raw_open(emu_raw_t *r, const char *uri, const char *collection) {
  const char *db;
  r->uri = mongoc_uri_new(uri);
  ck_assert_ptr_nonnull(r->uri);
  r->client = mongoc_client_new_from_uri(r->uri);
  ck_assert_ptr_nonnull(r->client);
  mongoc_client_set_error_api(r->client, MONGOC_ERROR_API_VERSION_2);
  db = mongoc_uri_get_database(r->uri);
  r->coll = mongoc_client_get_collection(r->client, db && *db ? db : "resv",
                                         collection);
}

void emu_raw_close(emu_raw_t *r) {
  mongoc_collection_destroy(r->coll);
  mongoc_client_destroy(r->client);
  mongoc_uri_destroy(r->uri);
}

int64_t emu_raw_count(emu_raw_t *r, const char *filter_json) {
  bson_error_t error;
  bson_t *filter = bson_new_from_json((const uint8_t *)filter_json, -1, &error);
  ck_assert_msg(filter != NULL, "%s: %s", filter_json, error.message);
  int64_t n = mongoc_collection_count_documents(r->coll, filter, NULL, NULL, NULL, &error);
  ck_assert_msg(n >= 0, "count: %s", error.message);
  bson_destroy(filter);
  return n;
}

void emu_raw_insert(emu_raw_t *r, const char *json) {
  bson_error_t error;
  bson_t *doc = bson_new_from_json((const uint8_t *)json, -1, &error);
  ck_assert_msg(doc != NULL, "%s: %s", json, error.message);
  ck_assert_msg(mongoc_collection_insert_one(r->coll, doc, NULL, NULL, &error),
                "insert: %s", error.message);
  bson_destroy(doc);
}

char *emu_raw_find_json(emu_raw_t *r, const bson_t *filter) {
  bson_error_t error;
  const bson_t *doc;
  char *json = NULL;
  mongoc_cursor_t *c = mongoc_collection_find_with_opts(r->coll, filter, NULL, NULL);
  if (mongoc_cursor_next(c, &doc)) json = bson_as_canonical_extended_json(doc, NULL);
  ck_assert_msg(!mongoc_cursor_error(c, &error), "find: %s", error.message);
  mongoc_cursor_destroy(c);
  return json;
}

resv_store_t *emu_open(const char *uri, resv_options_t o) {
  resv_error_t err;
  o.uri = uri;
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s != NULL, "open %s: %s: %s", uri ? uri : "memory",
                resv_code_name(err.code), err.message);
  return s;
}

bool emu_admin(mongoc_client_t *client, bson_t *cmd, bool primary, const char *field,
               char *out, size_t size) {
  mongoc_read_prefs_t *prefs =
      mongoc_read_prefs_new(primary ? MONGOC_READ_PRIMARY : MONGOC_READ_NEAREST);
  bson_t reply;
  bson_error_t error;
  bson_iter_t it;
  bool ok = mongoc_client_command_simple(client, "admin", cmd, prefs, &reply, &error);
  if (ok && field && bson_iter_init_find(&it, &reply, field) && BSON_ITER_HOLDS_UTF8(&it))
    snprintf(out, size, "%s", bson_iter_utf8(&it, NULL));
  if (!ok) fprintf(stderr, "emulator: admin command: %s\n", error.message);
  bson_destroy(&reply);
  bson_destroy(cmd);
  mongoc_read_prefs_destroy(prefs);
  return ok;
}
