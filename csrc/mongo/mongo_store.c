/* mongo_store.c: the MongoDB backend, opened and closed.
 *
 * resv__mongo_open parses the URI, gives it the defaults a gateway wants,
 * checks that the server answers and learns its topology, then makes the
 * mongoc_client_pool_t the dispatcher's threads take clients from.
 *
 * Defaults, each kept when the URI sets it: directConnection=false (so a
 * single host finds its replica set), serverSelectionTimeoutMS and
 * connectTimeoutMS are the call's timeout, so a dead server costs a call
 * no more than its deadline; socketTimeoutMS is the timeout plus a second,
 * a backstop behind the maxTimeMS each command carries; appname is
 * "resv" so the server's logs name us. maxPoolSize is always twice the
 * number of dispatcher threads: each thread holds at most one client, and
 * blocking calls on their callers' threads borrow at most as many again
 * (mongo_caller.c), so a pop never waits for another thread.
 *
 * Open never waits on the network (docs/design.md section 7) unless check is set:
 * the topology (a mongos or not: the hello reply's msg "isdbgrid") is
 * learnt by the first call from its own client's handshake. With check,
 * open pings the server on a single-threaded client, which authenticates
 * and learns the topology there (check_server).
 * Nothing is created on the server here: collections are made on a
 * type's first call (mongo_schema.c).
 *
 * execute makes sure the type's collection is set up and runs the
 * operation (mongo_ops.c) with the dispatcher thread's own client. Each
 * thread pops a client on its first job and keeps it, with a handle on the
 * last collection it used, until the thread ends (a thread-specific key
 * whose destructor pushes the client back), so a call pays for no pop,
 * push or mongoc_client_get_collection of its own. Each thread holds at
 * most one client, so no pop waits; the threads end (pool shutdown joins
 * them) before mongo_destroy frees the pool. */
#include "mongo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How much longer than a call's timeout the socket waits for an answer. */
#define SOCKET_BACKSTOP_MS 1000

/* The password exactly as written in the URI string: after the scheme's
 * "://" and the user's ":", up to the last "@" before the options ("?").
 * NULL when there is none. The caller frees it. */
static char *raw_password(const char *uri) {
  const char *start = strstr(uri, "://"), *colon, *at = NULL, *end;

  if (!start)
    return NULL;
  start += 3;
  end = strchr(start, '?');
  if (!end)
    end = start + strlen(start);
  for (const char *p = start; p < end; p++)
    if (*p == '@')
      at = p;
  if (!at)
    return NULL;
  colon = memchr(start, ':', (size_t)(at - start));
  if (!colon || colon + 1 == at)
    return NULL;
  return bson_strndup(colon + 1, (size_t)(at - colon - 1));
}

static void set_default_ms(mongoc_uri_t *uri, const char *option,
                           int32_t ms) {
  if (!mongoc_uri_has_option(uri, option))
    mongoc_uri_set_option_as_int32(uri, option, ms);
}

/* The write concern every command carries (docs/design.md section 12): "majority"
 * unless the write_concern option, or else the URI, names another w (the
 * URI's wtimeoutMS and journal are kept). A w of 0 (unacknowledged) is
 * refused wherever it comes from. Fails with RESV_EINVALID. */
static bool set_write_concern(resv__mongo_t *m, int32_t option,
                              resv_error_t *err) {
  const mongoc_write_concern_t *given = mongoc_uri_get_write_concern(m->uri);
  int32_t w = given ? mongoc_write_concern_get_w(given)
                    : MONGOC_WRITE_CONCERN_W_DEFAULT;
  mongoc_write_concern_t *wc;

  if (w == MONGOC_WRITE_CONCERN_W_UNACKNOWLEDGED ||
      w == MONGOC_WRITE_CONCERN_W_ERRORS_IGNORED)
    return resv__fail(err, RESV_EINVALID,
                      "uri: w=0 (unacknowledged writes) cannot tell a "
                      "reservation from a conflict; use w=majority or "
                      "w>=1");
  if (option < RESV_WRITE_MAJORITY)
    return resv__fail(err, RESV_EINVALID,
                      "write_concern: \"majority\" or an integer >= 1, "
                      "got %d",
                      (int)option);
  wc = given ? mongoc_write_concern_copy(given) : mongoc_write_concern_new();
  if (option >= 1)
    mongoc_write_concern_set_w(wc, option);
  else if (option == RESV_WRITE_MAJORITY || w == MONGOC_WRITE_CONCERN_W_DEFAULT)
    mongoc_write_concern_set_wmajority(
        wc, (int32_t)mongoc_write_concern_get_wtimeout_int64(wc));
  mongoc_uri_set_write_concern(m->uri, wc);
  mongoc_write_concern_destroy(wc);
  return true;
}

/* A URI naming one host and neither replicaSet nor directConnection makes
 * libmongoc 1.23 a Single topology, bound to that member: after a failover
 * every write fails with NotWritablePrimary until the process restarts,
 * and pointed at a secondary every write fails. directConnection=false
 * makes the driver discover the set from the member (as current drivers
 * do by default) and follow its primary; a mongos or a standalone is found
 * as such. SRV and load-balanced URIs decide for themselves. */
static void follow_the_set(mongoc_uri_t *uri) {
  if (mongoc_uri_has_option(uri, MONGOC_URI_DIRECTCONNECTION) ||
      mongoc_uri_get_replica_set(uri) || mongoc_uri_get_srv_hostname(uri) ||
      mongoc_uri_has_option(uri, MONGOC_URI_LOADBALANCED))
    return;
  mongoc_uri_set_option_as_bool(uri, MONGOC_URI_DIRECTCONNECTION, false);
}

static void describe_hosts(resv__mongo_t *m) {
  const mongoc_host_list_t *host = mongoc_uri_get_hosts(m->uri);
  size_t used = 0;

  m->hosts[0] = '\0';
  if (!host && mongoc_uri_get_srv_hostname(m->uri)) {
    snprintf(m->hosts, sizeof m->hosts, "srv:%s",
             mongoc_uri_get_srv_hostname(m->uri));
    return;
  }
  for (; host && used + 1 < sizeof m->hosts; host = host->next) {
    int n = snprintf(m->hosts + used, sizeof m->hosts - used, "%s%s",
                     used ? "," : "", host->host_and_port);
    if (n < 0)
      break;
    used += (size_t)n;
  }
}

/* check = true (docs/design.md section 7): waits until the server answers and
 * authenticates, on a single-threaded client, which tries each server
 * once (serverSelectionTryOnce) and fails at once when nothing answers,
 * where a pooled client would wait out the whole selection timeout. A
 * ping is the command that authenticates (selection alone does not), so a
 * wrong password fails here. */
static bool check_server(resv__mongo_t *m, resv_error_t *err) {
  bson_error_t error;
  bson_t ping = BSON_INITIALIZER;
  bool ok;
  mongoc_client_t *client =
      mongoc_client_new_from_uri_with_error(m->uri, &error);

  if (!client)
    return resv__mongo_fail(m, err, &error, 0, "connect");
  mongoc_client_set_error_api(client, MONGOC_ERROR_API_VERSION_2);
  BSON_APPEND_INT32(&ping, "ping", 1);
  ok = mongoc_client_command_simple(client, "admin", &ping, NULL, NULL, &error);
  bson_destroy(&ping);
  if (!ok)
    ok = resv__mongo_fail(m, err, &error, 0, "connect");
  else
    ok = resv__mongo_learn_topology(m, client, 0, err);
  mongoc_client_destroy(client);
  return ok;
}

/* A dispatcher thread's client, and the collection of the type it ran
 * last. */
typedef struct worker {
  resv__mongo_t *m;
  resv__mongo_conn_t conn;
} worker_t;

/* The key's destructor, at the end of a dispatcher thread. */
static void worker_end(void *arg) {
  worker_t *w = arg;
  resv__mongo_conn_forget(&w->conn);
  mongoc_client_pool_push(w->m->pool, w->conn.client);
  bson_free(w);
}

/* This thread's worker, made (and its client popped) on its first job.
 * NULL when there is no client. */
static worker_t *this_worker(resv__mongo_t *m) {
  worker_t *w = pthread_getspecific(m->worker_key);
  if (w)
    return w;
  mongoc_client_t *client = mongoc_client_pool_pop(m->pool);
  if (!client)
    return NULL;
  w = bson_malloc0(sizeof *w);
  w->m = m;
  w->conn.client = client;
  if (pthread_setspecific(m->worker_key, w) != 0) {
    mongoc_client_pool_push(m->pool, client);
    bson_free(w);
    return NULL;
  }
  return w;
}

/* A call on a dispatcher thread, with the thread's own client. */
static bool mongo_execute(void *backend, resv_type_t *type,
                          const resv_request_t *req, int64_t now,
                          int64_t deadline, resv_answer_t *answer,
                          resv_error_t *err) {
  resv__mongo_t *m = backend;
  worker_t *w = this_worker(m);
  if (!w)
    return resv__fail(err, RESV_EUNAVAILABLE, "no client in the pool");
  return resv__mongo_execute_on(m, &w->conn, type, req, now, deadline, answer, err);
}

/* A page of resv_type_scan on a dispatcher thread, with its client; no
 * set-up (a scan creates nothing). */
static bool mongo_scan(void *backend, resv_type_t *type, const resv_str_t *after,
                       size_t limit, int64_t now, int64_t deadline, resv_scan_t *scan,
                       resv_error_t *err) {
  resv__mongo_t *m = backend;
  worker_t *w = this_worker(m);
  if (!w) return resv__fail(err, RESV_EUNAVAILABLE, "no client in the pool");
  mongoc_collection_t *coll =
      mongoc_client_get_collection(w->conn.client, m->database, type->collection);
  bool ok = resv__mongo_scan(m, coll, after, limit, now, deadline, scan, err);
  mongoc_collection_destroy(coll);
  return ok;
}

/* resv_type_put on a dispatcher thread: the type is set up first, as for
 * a call (collection, shard key, format record). */
static bool mongo_put(void *backend, resv_type_t *type, const resv_scan_entry_t *e,
                      int64_t deadline, int32_t *outcome, resv_error_t *err) {
  resv__mongo_t *m = backend;
  worker_t *w = this_worker(m);
  if (!w) return resv__fail(err, RESV_EUNAVAILABLE, "no client in the pool");
  if (!resv__mongo_schema_ready(m, type, w->conn.client, deadline, err)) return false;
  mongoc_collection_t *coll =
      mongoc_client_get_collection(w->conn.client, m->database, type->collection);
  bool ok = resv__mongo_put(m, coll, e, deadline, outcome, err);
  mongoc_collection_destroy(coll);
  return ok;
}

/* resv_store_types: listCollections of the store's database (names only),
 * with this dispatcher thread's client. */
static bool mongo_list_types(void *backend, int64_t deadline, resv_type_names_t *names,
                             resv_error_t *err) {
  resv__mongo_t *m = backend;
  worker_t *w = this_worker(m);
  if (!w) return resv__fail(err, RESV_EUNAVAILABLE, "no client in the pool");
  bson_error_t error;
  mongoc_database_t *db = mongoc_client_get_database(w->conn.client, m->database);
  char **list = mongoc_database_get_collection_names_with_opts(db, NULL, &error);
  bool ok = list != NULL;
  if (!ok) resv__mongo_fail(m, err, &error, deadline, "list the collections");
  for (size_t i = 0; ok && list[i]; i++)
    if (!resv__type_names_add(names, list[i], strlen(list[i])))
      ok = resv__fail(err, RESV_ENOMEM, "out of memory");
  bson_strfreev(list);
  mongoc_database_destroy(db);
  return ok;
}

static void mongo_describe(void *backend, char *buf, size_t size) {
  const resv__mongo_t *m = backend;
  snprintf(buf, size, "mongodb %s/%s (%s)", m->hosts, m->database,
           !atomic_load(&m->topology_known) ? "not yet connected"
           : atomic_load(&m->is_mongos)     ? "mongos"
                                            : "mongod");
}

static bool mongo_is_sharded(void *backend) {
  return atomic_load(&((resv__mongo_t *)backend)->is_mongos);
}

/* After the dispatcher's threads are joined (each gave its client back):
 * the pool's connections and its monitoring thread go now, not when the
 * store is freed (100 closed stores held 101 threads and 206 fds). */
static void mongo_shutdown(void *backend) {
  resv__mongo_t *m = backend;
  if (m->pool) {
    resv__mongo_callers_release(m);
    mongoc_client_pool_destroy(m->pool);
  }
  m->pool = NULL;
}

static void mongo_destroy(void *backend) {
  resv__mongo_t *m = backend;
  if (!m)
    return;
  resv__mongo_log_remove(m->log);
  if (m->has_worker_key)
    pthread_key_delete(m->worker_key);
  mongo_shutdown(m);
  resv__mongo_callers_free(m->callers);
  mongoc_uri_destroy(m->uri);
  mongoc_read_prefs_destroy(m->primary);
  if (m->conforms)
    bson_destroy(m->conforms);
  resv__mongo_templates_free(m->templates);
  bson_free(m->database);
  bson_free(m->secret);
  bson_free(m->secret_raw);
  bson_free(m);
}

/* What mongoc logs while parsing a URI but does not refuse it for. */
static bool harmless(const char *said) {
  return strncmp(said, "Deprecated", 10) == 0 ||
         strncmp(said, "Overwriting", 11) == 0;
}

/* m->uri from uri, with m's secrets. A URI mongoc refuses, or takes but
 * ignores part of (an unknown option, a value it cannot use: it only logs
 * those), is RESV_EINVALID, with what mongoc said. A harmless line is
 * left in said for the caller to log once the store is named. */
static bool parse_uri(resv__mongo_t *m, const char *uri,
                      resv__mongo_log_capture_t *said, resv_error_t *err) {
  bson_error_t error;
  char text[sizeof error.message];

  m->secret_raw = raw_password(uri);
  resv__mongo_log_capture(said);
  m->uri = mongoc_uri_new_with_error(uri, &error);
  resv__mongo_log_release();
  if (m->uri && mongoc_uri_get_password(m->uri))
    m->secret = bson_strdup(mongoc_uri_get_password(m->uri));
  resv__mongo_scrub(m, said->text);
  if (m->uri && (!said->text[0] || harmless(said->text)))
    return true;
  if (m->uri)
    return resv__fail(err, RESV_EINVALID, "bad MongoDB URI: %s", said->text);
  memcpy(text, error.message, sizeof text);
  text[sizeof text - 1] = '\0';
  resv__mongo_scrub(m, text);
  if (said->text[0] && !strstr(text, said->text))
    return resv__fail(err, RESV_EINVALID, "bad MongoDB URI: %s (%s)", said->text, text);
  return resv__fail(err, RESV_EINVALID, "bad MongoDB URI: %s", text);
}

static const resv__backend_ops_t mongo_ops = {
    .name = "mongodb",
    .runs_inline = false,
    .several_keys = true,
    .type_init = resv__mongo_type_init,
    .type_free = resv__mongo_type_free,
    .execute = mongo_execute,
    .execute_blocking = resv__mongo_execute_blocking,
    .refuse_blocking = resv__mongo_refuse_blocking,
    .clock_skew = resv__mongo_skew,
    .scan = mongo_scan,
    .list_types = mongo_list_types,
    .put = mongo_put,
    .describe = mongo_describe,
    .is_sharded = mongo_is_sharded,
    .shutdown = mongo_shutdown,
    .destroy = mongo_destroy,
};

/* The database name into database (database_size bytes) unless the
 * caller named one: the URI's, else "resv". */
static bool choose_database(const resv__mongo_t *m, char *database,
                            size_t database_size, resv_error_t *err) {
  const char *db;

  if (database[0])
    return true;
  db = mongoc_uri_get_database(m->uri);
  if (!db || !*db)
    db = "resv";
  if (strlen(db) >= database_size)
    return resv__fail(err, RESV_EINVALID,
                      "database: the URI's is longer than %zu bytes",
                      database_size - 1);
  strcpy(database, db);
  return true;
}

/* The URI options resv sets, each default kept when the URI sets it (see
 * the top of this file), and the pool size, always set. */
static void set_uri_options(resv__mongo_t *m, const resv_options_t *options) {
  int32_t timeout = options->timeout_ms;

  /* The driver's default, written out before the options resv adds:
   * mongoc looks retryWrites up in the URI's options on every write,
   * comparing case-insensitively with every option before it. */
  if (!mongoc_uri_has_option(m->uri, MONGOC_URI_RETRYWRITES))
    mongoc_uri_set_option_as_bool(m->uri, MONGOC_URI_RETRYWRITES, true);
  set_default_ms(m->uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, timeout);
  set_default_ms(m->uri, MONGOC_URI_CONNECTTIMEOUTMS, timeout);
  /* The deadline is the server's business (maxTimeMS, mongo_ops.c): the
   * socket timeout is only the backstop for a server that stopped
   * answering altogether, so it must not fire first. */
  set_default_ms(m->uri, MONGOC_URI_SOCKETTIMEOUTMS,
                 timeout > INT32_MAX - SOCKET_BACKSTOP_MS
                     ? INT32_MAX
                     : timeout + SOCKET_BACKSTOP_MS);
  m->selection_ms = mongoc_uri_get_option_as_int32(
      m->uri, MONGOC_URI_SERVERSELECTIONTIMEOUTMS, timeout);
  if (!mongoc_uri_get_appname(m->uri))
    mongoc_uri_set_appname(m->uri, "resv");
  follow_the_set(m->uri);
  /* The dispatcher's threads hold one client each, and blocking calls on
   * their callers' threads borrow at most as many again. */
  mongoc_uri_set_option_as_int32(m->uri, MONGOC_URI_MAXPOOLSIZE, 2 * options->threads);
}

/* Every failure after the allocation of m goes to fail: mongo_destroy
 * takes a half-built backend. */
void *resv__mongo_open(const resv_options_t *options, resv__stats_t *stats,
                       char *database, size_t database_size,
                       const resv__backend_ops_t **ops, resv_error_t *err) {
  bson_error_t error;
  resv__mongo_log_capture_t said;
  resv__mongo_t *m;

  mongoc_init();
  resv__mongo_counters_forget();
  m = bson_malloc0(sizeof *m);
  m->stats = stats;
  if (!parse_uri(m, options->uri, &said, err) ||
      !choose_database(m, database, database_size, err))
    goto fail;
  m->database = bson_strdup(database);
  m->shard_auto = options->sharding != RESV_SHARDING_OFF;
  m->no_create = options->no_create != 0;
  m->primary = mongoc_read_prefs_new(MONGOC_READ_PRIMARY);
  m->conforms = resv__doc_conforms_new();
  m->max_holds = options->max_holds;
  m->templates = resv__mongo_templates_new(m);
  m->grace_ms = options->sweep_grace_ms;
  set_uri_options(m, options);
  m->callers = resv__mongo_callers_new(options->threads);
  if (!m->callers) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a store");
    goto fail;
  }
  if (!set_write_concern(m, options->write_concern, err))
    goto fail;
  describe_hosts(m);
  m->log = resv__mongo_log_add(m, options->log_level);
  if (said.text[0])
    resv__mongo_log_say(m->log, "uri", said.text);

  /* Without check, nothing here waits on the network: the pool connects
   * on the first call (mongoc starts its monitoring then). */
  if (options->check && !check_server(m, err))
    goto fail;
  m->pool = mongoc_client_pool_new_with_error(m->uri, &error);
  if (!m->pool) {
    resv__mongo_fail(m, err, &error, 0, "client pool");
    goto fail;
  }
  mongoc_client_pool_set_error_api(m->pool, MONGOC_ERROR_API_VERSION_2);
  resv__mongo_skew_watch(m);
  if (pthread_key_create(&m->worker_key, worker_end) != 0) {
    resv__fail(err, RESV_ENOMEM, "no thread-specific key for the dispatcher");
    goto fail;
  }
  m->has_worker_key = true;
  *ops = &mongo_ops;
  return m;

fail:
  mongo_destroy(m);
  return NULL;
}
