/* types.c: a store's aggregate types: handed out by resv_store_type once
 * per collection name, kept in a chained hash table, freed at teardown.
 * A type's backend state is made by the backend's type_init under the
 * types lock, the outermost lock (dispatch.h gives the order). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a of a collection name. */
static size_t name_hash(const char *name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    h ^= *p;
    h *= 0x100000001b3ULL;
  }
  return (size_t)(h ^ (h >> 32));
}

/* The slot where the type of collection is, or would be linked. Call
 * with types_mutex held and type_nbuckets > 0. */
static resv_type_t **type_slot(resv_store_t *store, const char *collection) {
  resv_type_t **slot =
      &store->type_buckets[name_hash(collection) & (store->type_nbuckets - 1)];
  while (*slot && strcmp((*slot)->collection, collection) != 0) slot = &(*slot)->next;
  return slot;
}

/* Makes room for one more type (types_mutex held): the first buckets, or
 * twice as many once there are as many types as buckets. Fails only
 * without memory for the first ones; a table that cannot grow stays as
 * it is, slower but correct. */
static bool types_make_room(resv_store_t *store, resv_error_t *err) {
  if (store->type_nbuckets && store->ntypes < store->type_nbuckets) return true;
  size_t n = store->type_nbuckets ? store->type_nbuckets * 2 : 16;
  resv_type_t **buckets = calloc(n, sizeof *buckets);
  if (!buckets)
    return store->type_nbuckets ||
           resv__fail(err, RESV_ENOMEM, "out of memory for a type");
  for (size_t b = 0; b < store->type_nbuckets; b++) {
    resv_type_t *type = store->type_buckets[b];
    while (type) {
      resv_type_t *next = type->next;
      resv_type_t **head = &buckets[name_hash(type->collection) & (n - 1)];
      type->next = *head;
      *head = type;
      type = next;
    }
  }
  free(store->type_buckets);
  store->type_buckets = buckets;
  store->type_nbuckets = n;
  return true;
}

resv_type_t *resv_store_type(resv_store_t *store, const char *context,
                             size_t context_len, const char *aggregate,
                             size_t aggregate_len, resv_error_t *err) {
  char collection[RESV__MAX_NAMESPACE + 1];
  if (!resv__validate_type(context, context_len, aggregate, aggregate_len,
                           store->database, collection, sizeof collection, err))
    return NULL;
  if (atomic_load(&store->closed) || resv__store_forked(store)) {
    resv__fail(err, RESV_ECLOSED, "the store is closed");
    return NULL;
  }
  pthread_mutex_lock(&store->types_mutex);
  resv_type_t *type = NULL;
  if (store->type_nbuckets) type = *type_slot(store, collection);
  if (!type && types_make_room(store, err)) {
    type = calloc(1, sizeof *type);
    char *names = type ? malloc(context_len + aggregate_len + 2) : NULL;
    if (!names) {
      free(type);
      type = NULL;
      resv__fail(err, RESV_ENOMEM, "out of memory for a type");
    } else {
      type->store = store;
      type->context = names;
      type->context_len = context_len;
      memcpy(names, context, context_len);
      names[context_len] = '\0';
      type->aggregate = names + context_len + 1;
      type->aggregate_len = aggregate_len;
      memcpy(type->aggregate, aggregate, aggregate_len);
      type->aggregate[aggregate_len] = '\0';
      strcpy(type->collection, collection);
      if (store->ops->type_init && !store->ops->type_init(store->backend, type, err)) {
        free(names);
        free(type);
        type = NULL;
      } else {
        *type_slot(store, collection) = type;
        store->ntypes++;
      }
    }
  }
  pthread_mutex_unlock(&store->types_mutex);
  return type;
}

const char *resv_type_collection(const resv_type_t *type) { return type->collection; }

bool resv__store_usage(resv_store_t *store, int64_t *entries, int64_t *bytes) {
  *entries = *bytes = -1;
  if (!store->ops->usage) return false;
  *entries = *bytes = 0;
  pthread_mutex_lock(&store->types_mutex);
  for (size_t b = 0; b < store->type_nbuckets; b++)
    for (resv_type_t *type = store->type_buckets[b]; type; type = type->next)
      store->ops->usage(store->backend, type, entries, bytes);
  pthread_mutex_unlock(&store->types_mutex);
  return true;
}

void resv__store_free_types(resv_store_t *store) {
  for (size_t b = 0; b < store->type_nbuckets; b++) {
    resv_type_t *type = store->type_buckets[b];
    while (type) {
      resv_type_t *next = type->next;
      if (store->ops->type_free) store->ops->type_free(store->backend, type);
      free(type->context);
      free(type);
      type = next;
    }
  }
  free(store->type_buckets);
}
