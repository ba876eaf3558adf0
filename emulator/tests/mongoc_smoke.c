/* A smoke test of the emulator through the real mongo-c-driver (1.23).
 *
 * Usage: mongoc_smoke URI rs|mongos
 *
 * It does what the resv store does: a client pool with error API 2, many
 * threads each popping a client and running findAndModify with a pipeline
 * upsert, create on an existing collection, a duplicate-key upsert, and a
 * retryable write after a fail point closes the connection. Prints "ok" and
 * exits 0, or prints what failed and exits 1. Built and run by
 * test_mongoc.py when libmongoc's headers are installed. */
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define THREADS 8
#define OPS 25

static mongoc_client_pool_t *pool;
static int failures;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *what, const bson_error_t *error)
{
    pthread_mutex_lock(&lock);
    failures++;
    fprintf(stderr, "%s: %u/%u %s\n", what, error ? error->domain : 0,
            error ? error->code : 0, error ? error->message : "");
    pthread_mutex_unlock(&lock);
}

/* findAndModify {_id: {t, n, k}, tenant_id, key} with a pipeline upsert. */
static bool reserve(mongoc_client_t *client, const char *key, const char *owner,
                    bson_t *reply, bson_error_t *error)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(client, "smoke", "res");
    bson_t *query = BCON_NEW("_id", "{", "t", "", "n", "email", "k", BCON_UTF8(key), "}",
                             "tenant_id", "", "key", BCON_UTF8(key),
                             "$or", "[", "{", "owner", BCON_UTF8(owner), "}",
                             "{", "expires_at", "{", "$lte", BCON_INT64(10), "}", "}", "]");
    bson_t *update = BCON_NEW("0", "{", "$set", "{", "owner", BCON_UTF8(owner),
                              "expires_at", BCON_INT64(1000), "holds", "{", "$concatArrays", "[",
                              "{", "$ifNull", "[", "$holds", "[", "]", "]", "}",
                              "[", "a", "]", "]", "}", "}", "}");
    mongoc_find_and_modify_opts_t *opts = mongoc_find_and_modify_opts_new();
    bson_t *extra = BCON_NEW("update", BCON_ARRAY(update));
    mongoc_find_and_modify_opts_set_flags(
        opts, MONGOC_FIND_AND_MODIFY_UPSERT | MONGOC_FIND_AND_MODIFY_RETURN_NEW);
    mongoc_find_and_modify_opts_append(opts, extra);
    bool ok = mongoc_collection_find_and_modify_with_opts(coll, query, opts, reply, error);
    mongoc_find_and_modify_opts_destroy(opts);
    bson_destroy(extra);
    bson_destroy(update);
    bson_destroy(query);
    mongoc_collection_destroy(coll);
    return ok;
}

static void *worker(void *arg)
{
    long id = (long) arg;
    for (int i = 0; i < OPS; i++) {
        mongoc_client_t *client = mongoc_client_pool_pop(pool);
        char key[64];
        bson_t reply;
        bson_error_t error;
        snprintf(key, sizeof key, "k-%ld-%d", id, i);
        if (!reserve(client, key, "o1", &reply, &error))
            fail("reserve", &error);
        bson_destroy(&reply);
        mongoc_client_pool_push(pool, client);
    }
    return NULL;
}

static bool command(mongoc_client_t *client, const char *db, bson_t *cmd, bson_error_t *error)
{
    bson_t reply;
    bool ok = mongoc_client_command_simple(client, db, cmd, NULL, &reply, error);
    bson_destroy(&reply);
    bson_destroy(cmd);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s URI rs|mongos\n", argv[0]);
        return 2;
    }
    bool mongos = strcmp(argv[2], "mongos") == 0;
    bson_error_t error;
    mongoc_init();
    mongoc_uri_t *uri = mongoc_uri_new_with_error(argv[1], &error);
    if (!uri) {
        fail("uri", &error);
        return 1;
    }
    pool = mongoc_client_pool_new(uri);
    mongoc_client_pool_set_error_api(pool, 2);
    mongoc_client_pool_max_size(pool, 4);

    mongoc_client_t *client = mongoc_client_pool_pop(pool);
    if (!command(client, "admin", BCON_NEW("ping", BCON_INT32(1)), &error))
        fail("ping", &error);
    command(client, "smoke", BCON_NEW("dropDatabase", BCON_INT32(1)), &error);
    if (!command(client, "smoke", BCON_NEW("create", "res"), &error))
        fail("create", &error);
    bool again = command(client, "smoke", BCON_NEW("create", "res"), &error);
    if (mongos ? !again : (again || error.domain != MONGOC_ERROR_SERVER || error.code != 48))
        fail("create again", again ? NULL : &error);
    if (mongos && !command(client, "admin",
                           BCON_NEW("shardCollection", "smoke.res", "key", "{",
                                    "tenant_id", BCON_INT32(1), "key", "hashed", "}"),
                           &error))
        fail("shardCollection", &error);
    mongoc_client_pool_push(pool, client);

    pthread_t threads[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&threads[i], NULL, worker, (void *) i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);

    client = mongoc_client_pool_pop(pool);
    bson_t reply;
    /* Another owner, key live: the upsert hits the _id index. */
    if (reserve(client, "k-0-0", "o2", &reply, &error) || error.domain != MONGOC_ERROR_SERVER ||
        error.code != 11000)
        fail("duplicate key", &error);
    bson_destroy(&reply);

    /* A dropped connection: the retryable write is retried and succeeds. */
    if (!command(client, "admin",
                 BCON_NEW("configureFailPoint", "failCommand", "mode", "{", "times",
                          BCON_INT32(1), "}", "data", "{", "failCommands", "[",
                          "findAndModify", "]", "closeConnection", BCON_BOOL(true), "}"),
                 &error))
        fail("configureFailPoint", &error);
    if (!reserve(client, "k-retry", "o1", &reply, &error))
        fail("retryable write", &error);
    bson_destroy(&reply);

    mongoc_collection_t *coll = mongoc_client_get_collection(client, "smoke", "res");
    bson_t *all = bson_new();
    int64_t n = mongoc_collection_count_documents(coll, all, NULL, NULL, NULL, &error);
    bson_destroy(all);
    if (n != THREADS * OPS + 1) {
        fprintf(stderr, "count %lld\n", (long long) n);
        fail("count", &error);
    }
    mongoc_collection_destroy(coll);
    mongoc_client_pool_push(pool, client);
    mongoc_client_pool_destroy(pool);
    mongoc_uri_destroy(uri);
    mongoc_cleanup();
    if (failures)
        return 1;
    puts("ok");
    return 0;
}
