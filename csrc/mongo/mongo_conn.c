/* mongo_conn.c: a call on one connection (a client and the collection of
 * the type it ran last), whoever's it is: a dispatcher thread's
 * (mongo_store.c) or one lent to a blocking caller (mongo_caller.c). The
 * topology learnt once, a call refused that a server selection would
 * outlive, the type set up, the operation run, and whether the servers
 * were reached. It neither makes nor frees clients: their owners do. */
#include "mongo_internal.h"

#include <string.h>

/* Learns from client's writable server whether it is a mongos: the
 * selection's hello handshake, which the client's first command needs
 * anyway (no extra round trip once connected). Fails with
 * RESV_EUNAVAILABLE when nothing answers. */
bool resv__mongo_learn_topology(resv__mongo_t *m, mongoc_client_t *client, int64_t deadline,
                                resv_error_t *err) {
  bson_error_t error;
  bson_iter_t it;
  mongoc_server_description_t *sd;
  const bson_t *hello;
  bool mongos = false;

  sd = mongoc_client_select_server(client, true, NULL, &error);
  if (!sd)
    return resv__mongo_fail(m, err, &error, deadline, "connect");
  hello = mongoc_server_description_hello_response(sd);
  if (bson_iter_init_find(&it, hello, "msg") && BSON_ITER_HOLDS_UTF8(&it))
    mongos = strcmp(bson_iter_utf8(&it, NULL), "isdbgrid") == 0;
  mongoc_server_description_destroy(sd);
  atomic_store(&m->is_mongos, mongos);
  atomic_store(&m->topology_known, true);
  return true;
}

void resv__mongo_conn_forget(resv__mongo_conn_t *conn) {
  if (conn->coll)
    mongoc_collection_destroy(conn->coll);
  mongoc_find_and_modify_opts_destroy(conn->upsert);
  conn->coll = NULL;
  conn->upsert = NULL;
  conn->type = NULL;
}

/* Whether one of the servers the driver knows takes writes now. */
bool resv__mongo_writable_known(mongoc_client_t *client) {
  size_t n = 0;
  bool writable = false;
  mongoc_server_description_t **sds =
      mongoc_client_get_server_descriptions(client, &n);

  for (size_t i = 0; i < n && !writable; i++) {
    const char *type = mongoc_server_description_type(sds[i]);
    writable = strcmp(type, "Standalone") == 0 || strcmp(type, "RSPrimary") == 0 ||
               strcmp(type, "Mongos") == 0 || strcmp(type, "LoadBalancer") == 0;
  }
  mongoc_server_descriptions_destroy_all(sds, n);
  return writable;
}

/* A call whose waiter gives up (its deadline and the grace after it)
 * before a server selection may end (a shorter timeout_ms of its own, or a
 * long wait in the queue) does not start one that would outlive it: once
 * a call answered through the pool (check's client is not the pool's: the
 * pool knows nothing before its first call), and while the pool knows no
 * server that takes writes (the connection to it failed, or its monitor
 * found it gone), it fails with RESV_EUNAVAILABLE at once, leaving the
 * waiting to calls that have the time. A call with the whole timeout waits for a server as long
 * as its selection may (serverSelectionTimeoutMS: mongoc's pooled clients
 * take it from the URI, never per call). */
static bool out_of_time_for_selection(resv__mongo_t *m, mongoc_client_t *client,
                                      int64_t deadline, resv_error_t *err) {
  int64_t left = deadline - resv__monotonic_ms();

  if (!atomic_load_explicit(&m->pool_reached, memory_order_relaxed) ||
      left + RESV__DEADLINE_GRACE_MS >= m->selection_ms ||
      resv__mongo_writable_known(client))
    return false;
  resv__fail(err, RESV_EUNAVAILABLE,
             "no server of %s takes writes now, and the call's %lld ms left are "
             "less than a server selection may take (%d ms)",
             m->hosts, (long long)(left > 0 ? left : 0), (int)m->selection_ms);
  return true;
}

/* The call on conn: the topology learnt, the type set up, the operation. */
static bool run_on(resv__mongo_t *m, resv__mongo_conn_t *conn, resv_type_t *type,
                   const resv_request_t *req, int64_t now, int64_t deadline,
                   resv_answer_t *answer, resv_error_t *err) {
  if (!atomic_load(&m->topology_known) &&
      !resv__mongo_learn_topology(m, conn->client, deadline, err))
    return false;
  if (out_of_time_for_selection(m, conn->client, deadline, err))
    return false;
  if (!resv__mongo_schema_ready(m, type, conn->client, deadline, err))
    return false;
  if (conn->type != type) {
    resv__mongo_conn_forget(conn);
    conn->coll =
        mongoc_client_get_collection(conn->client, m->database, type->collection);
    conn->type = type;
  }
  if (req->op == RESV_OP_RESERVE || req->op == RESV_OP_RESERVE_ALL)
    resv__mongo_skew_ttl(m, req->ttl_ms);
  bool gone = false;
  bool ok = resv__mongo_run_on(m, conn, req, now, deadline, answer, &gone, err);
  if (gone)
    resv__mongo_schema_reset(type);
  return ok;
}

bool resv__mongo_execute_on(resv__mongo_t *m, resv__mongo_conn_t *conn,
                            resv_type_t *type, const resv_request_t *req,
                            int64_t now, int64_t deadline,
                            resv_answer_t *answer, resv_error_t *err) {
  bool ok = run_on(m, conn, type, req, now, deadline, answer, err);
  if (ok && !atomic_load_explicit(&m->pool_reached, memory_order_relaxed))
    atomic_store(&m->pool_reached, true);
  bool reached = ok || (err->code != RESV_EUNAVAILABLE && err->code != RESV_ETIMEOUT);
  if (atomic_load_explicit(&m->last_reached, memory_order_relaxed) != reached)
    atomic_store_explicit(&m->last_reached, reached, memory_order_relaxed);
  return ok;
}
