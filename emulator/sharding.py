"""Mongos mode: shardCollection, config.collections and the targeting rules
for single-document writes on a sharded collection (MongoDB 6.0).

``shardCollection`` records the key in a real ``config.collections``
document, as a mongos shows it, so a client can read back how a collection
is sharded with a plain ``find`` on database ``config``. Sharding again with
the same key answers ok; with another key, AlreadyInitialized (23). A
non-empty collection can be sharded only when it has an index that starts
with the shard key (InvalidOptions, 72); an empty one gets that index made
for it, as MongoDB does.

Before MongoDB 7.1 mongos must target a single-document write to one
shard: findAndModify and any upsert need equalities on the whole shard key
in the filter (ShardKeyNotFound, 61); an update or delete of one document
needs the whole shard key or an exact ``_id`` match. The messages are the
6.0 server's.
"""

import datetime
import uuid

from bson.objectid import ObjectId
from bson.son import SON
from bson.timestamp import Timestamp

from . import indexes
from .errors import CommandError, describe
from .ordered import equal
from .updates import equalities

CONFIG_DB = 'config'
CONFIG_COLLECTIONS = 'collections'


def shard_key(store, namespace):
    """The shard key pattern of namespace, or None when not sharded."""
    config = store.collection(CONFIG_DB, CONFIG_COLLECTIONS)
    if config is None:
        return None
    docs = config.matching({'_id': namespace})
    return docs[0]['key'] if docs and not docs[0].get('dropped') else None


def shard_collection(store, command):
    """Run shardCollection (the caller holds the store lock)."""
    namespace = command.get('shardCollection')
    key = command.get('key')
    if not isinstance(namespace, str) or '.' not in namespace:
        raise CommandError(73, 'Invalid namespace specified \'%s\'' % (namespace,))
    if not isinstance(key, dict) or not key:
        raise CommandError(2, 'The shard key pattern must be a non-empty object')
    existing = shard_key(store, namespace)
    if existing is not None:
        if equal(existing, key):
            return SON([('collectionsharded', namespace)])
        raise CommandError(23, 'sharding already enabled for collection %s with options '
                           '{ _id: "%s", key: %s, unique: false }'
                           % (namespace, namespace, describe(existing)))
    database, name = namespace.split('.', 1)
    collection = store.collection(database, name)
    has_index = collection is not None and any(
        indexes.starts_with(index['key'], key) for index in collection.indexes)
    if collection is not None and collection.documents and not has_index:
        raise CommandError(72, 'Please create an index that starts with the proposed shard '
                           'key before sharding the collection')
    collection = store.collection(database, name, create=True)
    if not any(indexes.starts_with(index['key'], key) for index in collection.indexes):
        # an empty collection gets its shard key index
        collection.set_indexes(indexes.add(collection.indexes, [
            {'key': key, 'name': indexes.default_name(key)}]))
    now = datetime.datetime.utcnow().replace(microsecond=0)
    store.collection(CONFIG_DB, CONFIG_COLLECTIONS, create=True).insert(SON([
        ('_id', namespace), ('lastmodEpoch', ObjectId()), ('lastmod', now),
        ('timestamp', Timestamp(int(now.timestamp()), 1)), ('uuid', uuid.uuid4()),
        ('key', key), ('unique', bool(command.get('unique', False))),
        ('noBalance', False)]))
    return SON([('collectionsharded', namespace)])


def _has_shard_key(key, query):
    pinned = {path for path, value in equalities(query)
              if not isinstance(value, list)}
    return all(field in pinned for field in key)


def _has_exact_id(query):
    return any(path == '_id' for path, _ in equalities(query))


def check_find_and_modify(key, query):
    if not _has_shard_key(key, query):
        raise CommandError(61, 'Query for sharded findAndModify must contain the shard key')


def check_update(key, statement):
    query = statement.get('q', {})
    if statement.get('multi'):
        return
    if statement.get('upsert') and not _has_shard_key(key, query):
        raise CommandError(61, 'Failed to target upsert by query :: could not extract exact '
                           'shard key')
    if not _has_shard_key(key, query) and not _has_exact_id(query):
        raise CommandError(72, 'A single update on a sharded collection must contain an exact '
                           'match on _id (and have the collection default collation) or '
                           'contain the shard key (and have the simple collation). Update '
                           'request: %s, shard key pattern: %s'
                           % (describe(statement), describe(key)))


def check_delete(key, statement):
    query = statement.get('q', {})
    if statement.get('limit') and not _has_shard_key(key, query) and not _has_exact_id(query):
        raise CommandError(61, 'A single delete on a sharded collection must contain an exact '
                           'match on _id (and have the collection default collation) or '
                           'contain the shard key (and have the simple collation). Delete '
                           'request: %s, shard key pattern: %s'
                           % (describe(statement), describe(key)))
