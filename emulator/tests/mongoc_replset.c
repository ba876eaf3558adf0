/* The replica set through the real mongo-c-driver (1.23).
 *
 * Usage: mongoc_replset SEED_LIST_URI
 *
 * A client pool discovers the set from its seed list; worker threads run
 * retryable findAndModify upserts (each on its own key) while the main
 * thread steps the primary down, kills the new primary and restarts it.
 * Every write must succeed (the driver's discovery, server selection and
 * one retry carry it over each failover) and each must be applied exactly
 * once. Prints "ok" and exits 0, or prints what failed and exits 1. Built
 * and run by test_mongoc.py when libmongoc's headers are installed. */
#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define THREADS 4

static mongoc_client_pool_t *pool;
static atomic_int failures, done_ops, stop;

static void fail(const char *what, const bson_error_t *error)
{
    atomic_fetch_add(&failures, 1);
    fprintf(stderr, "%s: %u/%u %s\n", what, error ? error->domain : 0, error ? error->code : 0,
            error ? error->message : "");
}

/* {$inc: {n: 1}} upsert on _id key: retried once by the driver, so n stays 1. */
static bool upsert(mongoc_client_t *client, const char *key, bson_error_t *error)
{
    mongoc_collection_t *coll = mongoc_client_get_collection(client, "smoke", "rs");
    bson_t *query = BCON_NEW("_id", BCON_UTF8(key));
    bson_t *update = BCON_NEW("$inc", "{", "n", BCON_INT32(1), "}");
    bson_t reply;
    bool ok = mongoc_collection_find_and_modify(coll, query, NULL, update, NULL, false, true,
                                                true, &reply, error);
    bson_destroy(&reply);
    bson_destroy(update);
    bson_destroy(query);
    mongoc_collection_destroy(coll);
    return ok;
}

static void *worker(void *arg)
{
    long id = (long) arg;
    for (int i = 0; !atomic_load(&stop); i++) {
        mongoc_client_t *client = mongoc_client_pool_pop(pool);
        char key[64];
        bson_error_t error;
        snprintf(key, sizeof key, "k-%ld-%d", id, i);
        if (!upsert(client, key, &error))
            fail(key, &error);
        else
            atomic_fetch_add(&done_ops, 1);
        mongoc_client_pool_push(pool, client);
        usleep(2000);
    }
    return NULL;
}

static bool admin(mongoc_client_t *client, bson_t *cmd, bool any_member, bson_t *reply)
{
    bson_error_t error;
    mongoc_read_prefs_t *prefs = mongoc_read_prefs_new(any_member ? MONGOC_READ_NEAREST
                                                                  : MONGOC_READ_PRIMARY);
    bool ok = mongoc_client_command_simple(client, "admin", cmd, prefs, reply, &error);
    if (!ok)
        fail("admin command", &error);
    mongoc_read_prefs_destroy(prefs);
    bson_destroy(cmd);
    return ok;
}

/* The host the set's primary has now, from emulatorControl status. */
static bool primary_host(mongoc_client_t *client, char *host, size_t size)
{
    bson_t reply;
    bson_iter_t iter, members, member;
    bool found = false;
    if (!admin(client, BCON_NEW("emulatorControl", "status"), true, &reply))
        return false;
    if (bson_iter_init_find(&iter, &reply, "members") && bson_iter_recurse(&iter, &members))
        while (bson_iter_next(&members)) {
            const char *name = NULL, *state = NULL;
            bson_iter_recurse(&members, &member);
            while (bson_iter_next(&member)) {
                if (strcmp(bson_iter_key(&member), "name") == 0)
                    name = bson_iter_utf8(&member, NULL);
                if (strcmp(bson_iter_key(&member), "stateStr") == 0)
                    state = bson_iter_utf8(&member, NULL);
            }
            if (name && state && strcmp(state, "PRIMARY") == 0) {
                snprintf(host, size, "%s", name);
                found = true;
            }
        }
    bson_destroy(&reply);
    return found;
}

/* mongoc logs the monitors' failed connections (a killed member) on stdout
 * at debug level; warnings and worse go to stderr. */
static void log_handler(mongoc_log_level_t level, const char *domain, const char *message,
                        void *data)
{
    (void) data;
    if (level <= MONGOC_LOG_LEVEL_WARNING)
        fprintf(stderr, "%s: %s\n", domain, message);
}

static void wait_ops(int more)
{
    int target = atomic_load(&done_ops) + more;
    for (int i = 0; i < 3000 && atomic_load(&done_ops) < target; i++)
        usleep(10000);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s URI\n", argv[0]);
        return 2;
    }
    bson_error_t error;
    bson_t reply;
    mongoc_init();
    mongoc_log_set_handler(log_handler, NULL);
    mongoc_uri_t *uri = mongoc_uri_new_with_error(argv[1], &error);
    if (!uri) {
        fail("uri", &error);
        return 1;
    }
    pool = mongoc_client_pool_new(uri);
    mongoc_client_pool_set_error_api(pool, 2);
    mongoc_client_pool_max_size(pool, 8);
    mongoc_client_t *client = mongoc_client_pool_pop(pool);
    bson_t *drop = BCON_NEW("dropDatabase", BCON_INT32(1));
    mongoc_client_command_simple(client, "smoke", drop, NULL, NULL, NULL);
    bson_destroy(drop);

    pthread_t threads[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&threads[i], NULL, worker, (void *) i);
    wait_ops(20);
    char first[64] = "", second[64] = "";
    primary_host(client, first, sizeof first);
    if (admin(client, BCON_NEW("replSetStepDown", BCON_INT32(30)), false, &reply))
        bson_destroy(&reply);
    wait_ops(20);
    primary_host(client, second, sizeof second);
    if (!second[0] || strcmp(first, second) == 0) {
        fprintf(stderr, "primary %s after step-down from %s\n", second, first);
        fail("step down", NULL);
    }
    if (admin(client, BCON_NEW("emulatorControl", "kill", "member", "primary"), false, &reply))
        bson_destroy(&reply);
    wait_ops(20);
    if (admin(client, BCON_NEW("emulatorControl", "restart", "member", BCON_UTF8(second)), true,
              &reply))
        bson_destroy(&reply);
    wait_ops(20);
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);

    /* Each acknowledged upsert applied once: as many documents, all n = 1. */
    mongoc_collection_t *coll = mongoc_client_get_collection(client, "smoke", "rs");
    bson_t *all = bson_new(), *twice = BCON_NEW("n", "{", "$ne", BCON_INT32(1), "}");
    int64_t n = mongoc_collection_count_documents(coll, all, NULL, NULL, NULL, &error);
    int64_t bad = mongoc_collection_count_documents(coll, twice, NULL, NULL, NULL, &error);
    if (n != atomic_load(&done_ops) || bad != 0) {
        fprintf(stderr, "%lld documents for %d writes, %lld not applied once\n", (long long) n,
                atomic_load(&done_ops), (long long) bad);
        fail("count", &error);
    }
    bson_destroy(all);
    bson_destroy(twice);
    mongoc_collection_destroy(coll);
    mongoc_client_pool_push(pool, client);
    mongoc_client_pool_destroy(pool);
    mongoc_uri_destroy(uri);
    mongoc_cleanup();
    if (atomic_load(&failures))
        return 1;
    puts("ok");
    return 0;
}
