/* Authentication and roles through the real mongo-c-driver (1.23).
 *
 * Usage: mongoc_auth READWRITE_URI WRONG_PASSWORD_URI rs|mongos
 *
 * The readWrite user (SCRAM, mechanism negotiated or named in the URI)
 * writes and reads its database; reading config.collections, and on a
 * mongos shardCollection, fail with Unauthorized (13); the wrong password
 * fails to authenticate (MONGOC_ERROR_CLIENT_AUTHENTICATE, "Authentication
 * failed"). Prints "ok" and exits 0, or what failed and exits 1. Built and
 * run by test_auth.py when libmongoc's headers are installed. */
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <string.h>

static int failures;

static void fail(const char *what, const bson_error_t *error)
{
    failures++;
    fprintf(stderr, "%s: %u/%u %s\n", what, error ? error->domain : 0, error ? error->code : 0,
            error ? error->message : "");
}

static void quiet(mongoc_log_level_t level, const char *domain, const char *message, void *data)
{
    (void) data;
    if (level <= MONGOC_LOG_LEVEL_ERROR)
        fprintf(stderr, "%s: %s\n", domain, message);
}

static bool run(mongoc_client_t *client, const char *db, bson_t *cmd, bson_error_t *error)
{
    bson_t reply;
    bool ok = mongoc_client_command_simple(client, db, cmd, NULL, &reply, error);
    bson_destroy(&reply);
    bson_destroy(cmd);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s READWRITE_URI WRONG_URI rs|mongos\n", argv[0]);
        return 2;
    }
    bool mongos = strcmp(argv[3], "mongos") == 0;
    bson_error_t error;
    mongoc_init();
    mongoc_log_set_handler(quiet, NULL);

    mongoc_client_t *client = mongoc_client_new(argv[1]);
    mongoc_client_set_error_api(client, 2);
    mongoc_collection_t *coll = mongoc_client_get_collection(client, "resv", "mongoc_auth");
    bson_t *doc = BCON_NEW("_id", "a"), *none = bson_new();
    if (!mongoc_collection_delete_many(coll, none, NULL, NULL, &error))
        fail("delete as readWrite", &error);
    if (!mongoc_collection_insert_one(coll, doc, NULL, NULL, &error))
        fail("insert as readWrite", &error);
    if (mongoc_collection_count_documents(coll, none, NULL, NULL, NULL, &error) != 1)
        fail("count as readWrite", &error);
    if (run(client, "config", BCON_NEW("find", "collections"), &error) ||
        error.domain != MONGOC_ERROR_SERVER || error.code != 13)
        fail("config.collections is not Unauthorized", &error);
    if (mongos &&
        (run(client, "admin",
             BCON_NEW("shardCollection", "resv.mongoc_auth", "key", "{", "_id", BCON_INT32(1), "}"),
             &error) ||
         error.domain != MONGOC_ERROR_SERVER || error.code != 13))
        fail("shardCollection is not Unauthorized", &error);
    mongoc_collection_destroy(coll);
    mongoc_client_destroy(client);

    client = mongoc_client_new(argv[2]);
    mongoc_client_set_error_api(client, 2);
    if (run(client, "admin", BCON_NEW("ping", BCON_INT32(1)), &error) ||
        error.domain != MONGOC_ERROR_CLIENT || error.code != MONGOC_ERROR_CLIENT_AUTHENTICATE ||
        !strstr(error.message, "Authentication failed"))
        fail("wrong password", &error);
    mongoc_client_destroy(client);
    bson_destroy(doc);
    bson_destroy(none);
    mongoc_cleanup();
    if (failures)
        return 1;
    puts("ok");
    return 0;
}
