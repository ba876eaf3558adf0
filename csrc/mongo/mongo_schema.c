/* mongo_schema.c: a type's collection, set up on its first call.
 *
 * The store does not know its aggregate types in advance, so the first
 * call of a type (in this process) makes sure its collection is ready:
 *   1. on a mongos with sharding auto, read config.collections: a
 *      collection sharded on any key but {tenant_id: 1, key: "hashed"} is
 *      refused with RESV_EFORMAT, since the _id index then no longer keeps
 *      a key unique across the cluster. A user who may not read it
 *      (Unauthorized, 13: readWrite alone) uses a collection that exists
 *      as it is and is told what it lacks for a new one, before anything
 *      is created. sharding off reads nothing there;
 *   2. create it; NamespaceExists (48) means another worker or process
 *      was first, which is just as good (7.0+ and mongos answer ok).
 *      Either way its listCollections entry is checked (mongo_options.c):
 *      a collection made by someone else with a default collation, a
 *      validator, capped or as a time series is refused with
 *      RESV_EFORMAT;
 *   3. read the format record {_id: "format", format: 1}: another format,
 *      or a record that is not one, is refused with RESV_EFORMAT before
 *      anything is written (docs/design.md section 3);
 *   4. an unsharded collection found in step 1 is sharded on that key:
 *      enableSharding (servers before 6.0 need it, later ones accept it),
 *      the shard key's index (needed when the collection holds documents,
 *      the format record included: InvalidOptions 72), shardCollection.
 *      When that fails, config.collections is read again: a concurrent
 *      process may have sharded it the same way; Unauthorized is said in
 *      full;
 *   5. write the format record when step 3 found none; a duplicate key
 *      means a racing process wrote one, which is read and checked.
 * Each step is safe to run by many processes at once, so the process-wide
 * part is only a mutex and a ready flag per type: the first thread does
 * the work while the others of the same type wait for it; later calls pay
 * one atomic load. A failed set-up leaves the flag down and is tried again
 * with back-off (100 ms, doubling to 5 s): until then the type's calls
 * answer its error at once, so a permanent failure (a foreign format, a
 * missing privilege) costs the server nothing per call and a passing one
 * (the server was down) heals on its own. A call that finds the format
 * record gone (the collection was dropped while the store runs:
 * mongo_read.c) puts the flag down, and the next call sets the type up
 * again, format record included. A store opened with no_create uses
 * a type as it is: it only reads (steps 1, 2's check and 3), and a type
 * without a format record is an error naming it. */
#include "mongo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERVER_NAMESPACE_EXISTS 48
#define SERVER_UNAUTHORIZED 13

/* A failed set-up is tried again after this, doubling up to the most. */
#define SETUP_BACKOFF_FIRST_MS 100
#define SETUP_BACKOFF_MOST_MS 5000

typedef struct type_state {
  pthread_mutex_t mutex;
  atomic_bool ready;
  /* Under mutex: after a failed set-up, calls before retry_at answer its
   * error again without touching the server. */
  int64_t retry_at;   /* resv__monotonic_ms; 0: try now */
  int64_t backoff_ms; /* the last wait; 0 after a success */
  resv_error_t failure;
} type_state_t;

bool resv__mongo_type_init(void *backend, resv_type_t *type,
                           resv_error_t *err) {
  type_state_t *st = calloc(1, sizeof *st);
  if (!st)
    return resv__fail(err, RESV_ENOMEM, "out of memory");
  pthread_mutex_init(&st->mutex, NULL);
  atomic_init(&st->ready, false);
  type->backend_state = st;
  return true;
}

void resv__mongo_schema_reset(resv_type_t *type) {
  type_state_t *st = type->backend_state;
  pthread_mutex_lock(&st->mutex);
  atomic_store_explicit(&st->ready, false, memory_order_release);
  st->retry_at = 0;
  st->backoff_ms = 0;
  pthread_mutex_unlock(&st->mutex);
}

void resv__mongo_type_free(void *backend, resv_type_t *type) {
  type_state_t *st = type->backend_state;
  if (!st)
    return;
  pthread_mutex_destroy(&st->mutex);
  free(st);
  type->backend_state = NULL;
}

/* Checks a format record: {_id: "format", format: 1}, format a number. */
static bool check_format(const bson_t *record, const char *collection,
                         resv_error_t *err) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, record, "format") || !BSON_ITER_HOLDS_NUMBER(&it))
    return resv__fail_format_number(err, collection, false, 0);
  if (bson_iter_as_double(&it) == 1.0)
    return true;
  return resv__fail_format_number(err, collection, true, bson_iter_as_double(&it));
}

/* Reads the format record into *found and checks it when there is one. */
static bool read_format(const resv__mongo_t *m, mongoc_collection_t *coll,
                        const char *collection, int64_t deadline,
                        bool *found, resv_error_t *err) {
  bson_t filter = BSON_INITIALIZER, record;
  bson_error_t error;
  bool ok;

  BSON_APPEND_UTF8(&filter, "_id", "format");
  ok = resv__mongo_find_one(m, coll, &filter, false, deadline, &record, found,
                            &error);
  bson_destroy(&filter);
  if (!ok)
    ok = resv__mongo_fail(m, err, &error, deadline, "read format record");
  else if (*found)
    ok = check_format(&record, collection, err);
  bson_destroy(&record);
  return ok;
}

static bool is_our_shard_key(const bson_iter_t *key_it) {
  bson_iter_t it;
  if (!BSON_ITER_HOLDS_DOCUMENT(key_it) || !bson_iter_recurse(key_it, &it))
    return false;
  if (!bson_iter_next(&it) || strcmp(bson_iter_key(&it), "tenant_id") != 0 ||
      !BSON_ITER_HOLDS_NUMBER(&it) || bson_iter_as_double(&it) != 1.0)
    return false;
  if (!bson_iter_next(&it) || strcmp(bson_iter_key(&it), "key") != 0 ||
      !BSON_ITER_HOLDS_UTF8(&it) ||
      strcmp(bson_iter_utf8(&it, NULL), "hashed") != 0)
    return false;
  return !bson_iter_next(&it);
}

/* Reads ns's entry in config.collections: *sharded says whether the
 * collection is sharded, *ours whether on {tenant_id: 1, key: "hashed"}.
 * Entries of dropped collections (before 5.0) and of unsharded tracked
 * ones (8.0's unsplittable) do not count. */
static bool read_sharding(const resv__mongo_t *m, mongoc_client_t *client,
                          const char *ns, int64_t deadline, bool *sharded,
                          bool *ours, bson_error_t *error) {
  mongoc_collection_t *config =
      mongoc_client_get_collection(client, "config", "collections");
  bson_t filter = BSON_INITIALIZER, entry;
  bson_iter_t it;
  bool found, ok;

  BSON_APPEND_UTF8(&filter, "_id", ns);
  ok = resv__mongo_find_one(m, config, &filter, false, deadline, &entry, &found,
                            error);
  *sharded = *ours = false;
  if (ok && found) {
    bool dropped = bson_iter_init_find(&it, &entry, "dropped") &&
                   bson_iter_as_bool(&it);
    bool unsplittable = bson_iter_init_find(&it, &entry, "unsplittable") &&
                        bson_iter_as_bool(&it);
    if (!dropped && !unsplittable && bson_iter_init_find(&it, &entry, "key")) {
      *sharded = true;
      *ours = is_our_shard_key(&it);
    }
  }
  bson_destroy(&entry);
  bson_destroy(&filter);
  mongoc_collection_destroy(config);
  return ok;
}

static bool admin_command(mongoc_client_t *client, const bson_t *cmd,
                          bson_error_t *error) {
  bson_t reply;
  bool ok = mongoc_client_write_command_with_opts(client, "admin", cmd, NULL,
                                                  &reply, error);
  bson_destroy(&reply);
  return ok;
}

static bool is_unauthorized(const bson_error_t *error) {
  return error->domain == MONGOC_ERROR_SERVER &&
         error->code == SERVER_UNAUTHORIZED;
}

/* A readWrite user on a mongos: what it lacks, said in full (docs/design.md section
 * 12), with the server's code kept. */
static bool cannot_shard(const resv__mongo_t *m, const char *ns,
                         const char *missing, resv_error_t *err) {
  return resv__fail_server(
      err, RESV_ESERVER, SERVER_UNAUTHORIZED,
      "collection %s cannot be sharded: the user lacks %s (Unauthorized, 13). "
      "Sharding a new collection needs the enableSharding action on database "
      "%s and read on config.collections (e.g. the clusterManager role); a "
      "user with readWrite alone can use the collection once an admin has "
      "run sh.shardCollection(\"%s\", {tenant_id: 1, key: \"hashed\"}), or "
      "open the store with sharding = \"off\"; nothing was written",
      ns, missing, m->database, ns);
}

/* What step 1 found in config.collections. */
typedef enum sharding_state {
  SHARDING_OURS,       /* sharded on {tenant_id: 1, key: "hashed"} */
  SHARDING_NONE,       /* not sharded: shard it after the create */
  SHARDING_UNREADABLE  /* the user may not read config.collections, and
                          the collection exists: use it as it is */
} sharding_state_t;

/* Step 1, before anything is created: reads ns's sharding. A collection
 * sharded on another key is refused with RESV_EFORMAT; a user who may
 * not read config.collections may use a collection that exists (an admin
 * set it up; on a mongos an unsharded one is still correct, only on one
 * shard), and is told what is missing for a new one. */
static bool check_sharding(const resv__mongo_t *m, mongoc_client_t *client,
                           const char *collection, const char *ns,
                           int64_t deadline, sharding_state_t *state,
                           resv_error_t *err) {
  bson_error_t error;
  bool sharded, ours;

  if (!read_sharding(m, client, ns, deadline, &sharded, &ours, &error)) {
    mongoc_database_t *db;
    bool exists;

    if (!is_unauthorized(&error))
      return resv__mongo_fail(m, err, &error, deadline,
                              "read config.collections");
    db = mongoc_client_get_database(client, m->database);
    memset(&error, 0, sizeof error); /* has_collection sets it on failure only */
    exists = mongoc_database_has_collection(db, collection, &error);
    mongoc_database_destroy(db);
    if (!exists && error.domain != 0)
      return resv__mongo_fail(m, err, &error, deadline, "list collections");
    if (!exists)
      return cannot_shard(m, ns, "read on config.collections", err);
    *state = SHARDING_UNREADABLE;
    return true;
  }
  if (sharded && !ours)
    return resv__fail(err, RESV_EFORMAT,
                      "collection %s is sharded on another key than "
                      "{tenant_id: 1, key: \"hashed\"}; nothing was written",
                      ns);
  *state = sharded ? SHARDING_OURS : SHARDING_NONE;
  return true;
}

/* Step 4, after the create: shards the collection on {tenant_id: 1, key:
 * "hashed"}. enableSharding first (servers before 6.0 need it, later ones
 * accept it), then the shard key's index, which shardCollection of a
 * collection that already holds documents requires (InvalidOptions, 72;
 * the format record alone makes it non-empty) and which is a no-op when
 * it exists. When shardCollection fails, config.collections is read
 * again: a concurrent process may have sharded it first. */
static bool shard(const resv__mongo_t *m, mongoc_client_t *client,
                  const char *collection, const char *ns, int64_t deadline,
                  resv_error_t *err) {
  mongoc_database_t *db = mongoc_client_get_database(client, m->database);
  bson_error_t error, ignored;
  bool sharded, ours, ok;
  bson_t cmd, key, indexes, index, reply;

  bson_init(&cmd);
  BSON_APPEND_UTF8(&cmd, "enableSharding", m->database);
  ok = admin_command(client, &cmd, &ignored) ||
       ignored.domain == MONGOC_ERROR_SERVER;
  bson_destroy(&cmd);
  if (!ok) {
    mongoc_database_destroy(db);
    return resv__mongo_fail(m, err, &ignored, deadline, "enableSharding");
  }

  bson_init(&cmd);
  BSON_APPEND_UTF8(&cmd, "createIndexes", collection);
  bson_append_array_begin(&cmd, "indexes", -1, &indexes);
  bson_append_document_begin(&indexes, "0", -1, &index);
  bson_append_document_begin(&index, "key", -1, &key);
  BSON_APPEND_INT32(&key, "tenant_id", 1);
  BSON_APPEND_UTF8(&key, "key", "hashed");
  bson_append_document_end(&index, &key);
  BSON_APPEND_UTF8(&index, "name", "tenant_id_1_key_hashed");
  bson_append_document_end(&indexes, &index);
  bson_append_array_end(&cmd, &indexes);
  ok = mongoc_database_write_command_with_opts(db, &cmd, NULL, &reply, &error);
  bson_destroy(&reply);
  bson_destroy(&cmd);
  mongoc_database_destroy(db);
  if (!ok)
    return resv__mongo_fail(m, err, &error, deadline,
                            "create the shard key's index");

  bson_init(&cmd);
  BSON_APPEND_UTF8(&cmd, "shardCollection", ns);
  bson_append_document_begin(&cmd, "key", -1, &key);
  BSON_APPEND_INT32(&key, "tenant_id", 1);
  BSON_APPEND_UTF8(&key, "key", "hashed");
  bson_append_document_end(&cmd, &key);
  ok = admin_command(client, &cmd, &error);
  bson_destroy(&cmd);
  if (ok)
    return true;
  /* Another process may have sharded it first, maybe on another key. */
  if (!read_sharding(m, client, ns, deadline, &sharded, &ours, &ignored) ||
      !sharded) {
    if (is_unauthorized(&error))
      return cannot_shard(m, ns, "the shardCollection action", err);
    return resv__mongo_fail(m, err, &error, deadline, "shardCollection");
  }
  if (ours)
    return true;
  return resv__fail(err, RESV_EFORMAT,
                    "collection %s is sharded on another key than "
                    "{tenant_id: 1, key: \"hashed\"}; nothing was written",
                    ns);
}

/* Step 5: writes the format record, or checks the one a racing process
 * wrote first. */
static bool write_format(const resv__mongo_t *m, mongoc_collection_t *coll,
                         const char *collection, int64_t deadline,
                         resv_error_t *err) {
  bson_t record = BSON_INITIALIZER;
  bson_error_t error;
  bool ok, found;

  BSON_APPEND_UTF8(&record, "_id", "format");
  BSON_APPEND_INT32(&record, "format", 1);
  ok = mongoc_collection_insert_one(coll, &record, NULL, NULL, &error);
  bson_destroy(&record);
  if (ok)
    return true;
  if (!resv__mongo_is_duplicate(&error))
    return resv__mongo_fail(m, err, &error, deadline, "write format record");
  if (!read_format(m, coll, collection, deadline, &found, err))
    return false;
  return found ? true
               : resv__fail(err, RESV_ESERVER,
                            "the format record of %s vanished while it was "
                            "being written",
                            collection);
}

static bool set_up(const resv__mongo_t *m, const char *collection,
                   mongoc_client_t *client, int64_t deadline,
                   resv_error_t *err) {
  char ns[RESV__MAX_NAMESPACE + 2];
  sharding_state_t sharding = SHARDING_OURS; /* nothing to do */
  bson_t cmd = BSON_INITIALIZER, reply;
  bson_error_t error;
  bool ok, found = false;

  /* sharding off never reads config.collections (a readWrite user may
   * not) and never shards. */
  snprintf(ns, sizeof ns, "%s.%s", m->database, collection);
  if (m->is_mongos && m->shard_auto &&
      !check_sharding(m, client, collection, ns, deadline, &sharding, err)) {
    bson_destroy(&cmd);
    return false;
  }

  mongoc_database_t *db = mongoc_client_get_database(client, m->database);
  mongoc_collection_t *coll =
      mongoc_client_get_collection(client, m->database, collection);
  BSON_APPEND_UTF8(&cmd, "create", collection);
  ok = mongoc_database_write_command_with_opts(db, &cmd, NULL, &reply, &error);
  bson_destroy(&reply);
  bson_destroy(&cmd);
  if (!ok && !(error.domain == MONGOC_ERROR_SERVER &&
               error.code == SERVER_NAMESPACE_EXISTS))
    ok = resv__mongo_fail(m, err, &error, deadline, "create collection");
  else
    ok = resv__mongo_check_options(m, db, collection, deadline, err) &&
         read_format(m, coll, collection, deadline, &found, err);
  if (ok && sharding == SHARDING_NONE)
    ok = shard(m, client, collection, ns, deadline, err);
  if (ok && !found)
    ok = write_format(m, coll, collection, deadline, err);
  mongoc_collection_destroy(coll);
  mongoc_database_destroy(db);
  return ok;
}

/* With no_create, instead of set_up: a collection sharded on another key
 * is refused as by step 1, then the format record must be there (step
 * 3); nothing is created, sharded or written. */
static bool use_existing(const resv__mongo_t *m, const resv_type_t *type,
                         mongoc_client_t *client, int64_t deadline,
                         resv_error_t *err) {
  char ns[RESV__MAX_NAMESPACE + 2];
  sharding_state_t sharding;
  bool ok = true, found = false;

  snprintf(ns, sizeof ns, "%s.%s", m->database, type->collection);
  if (m->is_mongos && m->shard_auto)
    ok = check_sharding(m, client, type->collection, ns, deadline, &sharding,
                        err);
  mongoc_database_t *db = mongoc_client_get_database(client, m->database);
  mongoc_collection_t *coll =
      mongoc_client_get_collection(client, m->database, type->collection);
  if (ok)
    ok = resv__mongo_check_options(m, db, type->collection, deadline, err) &&
         read_format(m, coll, type->collection, deadline, &found, err);
  mongoc_collection_destroy(coll);
  mongoc_database_destroy(db);
  if (ok && !found)
    ok = resv__fail(err, RESV_EINVALID,
                    "no type %s/%s in database %s (no collection %s with a "
                    "format record); nothing was created",
                    type->context, type->aggregate, m->database,
                    type->collection);
  return ok;
}

bool resv__mongo_schema_ready(resv__mongo_t *m, resv_type_t *type,
                              mongoc_client_t *client, int64_t deadline,
                              resv_error_t *err) {
  type_state_t *st = type->backend_state;
  bool ok = true;

  if (atomic_load_explicit(&st->ready, memory_order_acquire))
    return true;
  pthread_mutex_lock(&st->mutex);
  if (!atomic_load_explicit(&st->ready, memory_order_relaxed)) {
    int64_t now = resv__monotonic_ms();
    /* A thread that waited here past its deadline gives up rather than
     * start a set-up that has already failed for the one before it. */
    if (now >= deadline) {
      ok = resv__fail(err, RESV_ETIMEOUT,
                      "the deadline passed while %s was being set up",
                      type->collection);
    } else if (now < st->retry_at) {
      /* docs/design.md section 12: a failed set-up is retried with back-off, not on
       * every call. */
      ok = false;
      if (err) {
        *err = st->failure;
        snprintf(err->message, sizeof err->message,
                 "%.*s (set-up tried again in %lld ms)",
                 (int)sizeof err->message - 48, st->failure.message,
                 (long long)(st->retry_at - now));
      }
    } else {
      resv_error_t mine;
      resv_error_t *e = err ? err : &mine;
      ok = m->no_create ? use_existing(m, type, client, deadline, e)
                        : set_up(m, type->collection, client, deadline, e);
      if (ok) {
        st->backoff_ms = 0;
        st->retry_at = 0;
        atomic_store_explicit(&st->ready, true, memory_order_release);
      } else {
        resv__stats_count(m->stats, RESV__STAT_SETUP_FAILURE);
        st->backoff_ms = st->backoff_ms ? st->backoff_ms * 2
                                        : SETUP_BACKOFF_FIRST_MS;
        if (st->backoff_ms > SETUP_BACKOFF_MOST_MS)
          st->backoff_ms = SETUP_BACKOFF_MOST_MS;
        st->retry_at = resv__monotonic_ms() + st->backoff_ms;
        st->failure = *e;
      }
    }
  }
  pthread_mutex_unlock(&st->mutex);
  return ok;
}
