"""Index metadata, and the shard key index rule of shardCollection.

MongoDB's documentation followed:
- createIndexes, https://www.mongodb.com/docs/manual/reference/command/createIndexes/ :
  each index has a key pattern and a name; creating an existing index again
  does nothing ("all indexes already exist"); the same name with another
  key is IndexKeySpecsConflict (86), the same key under another name
  IndexOptionsConflict (85); the reply counts numIndexesBefore/After;
- listIndexes and dropIndexes
  (https://www.mongodb.com/docs/manual/reference/command/dropIndexes/ ):
  by name, by key pattern or "*"; the _id index cannot be dropped;
- shard key indexes, https://www.mongodb.com/docs/manual/core/sharding-shard-key-indexes/
  and shardCollection, https://www.mongodb.com/docs/manual/reference/command/shardCollection/ :
  every sharded collection has an index that starts with the shard key; an
  empty collection gets it from shardCollection, a non-empty one must have
  it first (InvalidOptions, 72, "Please create an index that starts with
  the proposed shard key before sharding the collection").
"""

import pymongo
from bson.son import SON

from .support import EmulatorTest

SHARD_KEY = SON([('tenant_id', 1), ('key', 'hashed')])


def names(coll):
    return [index['name'] for index in coll.list_indexes()]


class IndexTest(EmulatorTest):

    def create(self, *specs):
        return self.db.command(SON([('createIndexes', self.coll.name), ('indexes', list(specs))]))

    def test_create_list_and_again(self):
        reply = self.create({'key': SHARD_KEY, 'name': 'tenant_id_1_key_hashed'})
        self.assertEqual((reply['numIndexesBefore'], reply['numIndexesAfter']), (1, 2))
        self.assertIs(reply['createdCollectionAutomatically'], True)
        indexes = list(self.coll.list_indexes())
        self.assertEqual([i['name'] for i in indexes], ['_id_', 'tenant_id_1_key_hashed'])
        self.assertEqual(list(indexes[1]['key'].items()), [('tenant_id', 1), ('key', 'hashed')])
        reply = self.create({'key': SHARD_KEY, 'name': 'tenant_id_1_key_hashed'})
        self.assertEqual((reply['numIndexesAfter'], reply['note']), (2, 'all indexes already exist'))

    def test_conflicts(self):
        self.create({'key': {'a': 1}, 'name': 'a'})
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.create({'key': {'b': 1}, 'name': 'a'})
        self.assertEqual(caught.exception.code, 86)
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.create({'key': {'a': 1}, 'name': 'other'})
        self.assertEqual(caught.exception.code, 85)
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.create({'key': {'a': 1}})
        self.assertEqual(caught.exception.code, 9)
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.create({'key': {'u': 1}, 'name': 'u', 'unique': True})
        self.assertEqual(caught.exception.code, 67)  # not built, so refused
        self.assertEqual(names(self.coll), ['_id_', 'a'])

    def test_drop_indexes(self):
        self.create({'key': {'a': 1}, 'name': 'a'}, {'key': {'b': -1}, 'name': 'b'})
        self.assertEqual(self.db.command('dropIndexes', self.coll.name, index={'b': -1})
                         ['nIndexesWas'], 3)
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.db.command('dropIndexes', self.coll.name, index='_id_')
        self.assertEqual(caught.exception.code, 72)
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.db.command('dropIndexes', self.coll.name, index='nope')
        self.assertEqual(caught.exception.code, 27)
        self.db.command('dropIndexes', self.coll.name, index='*')
        self.assertEqual(names(self.coll), ['_id_'])


class ShardKeyIndexTest(EmulatorTest):
    mongos = True

    def shard(self):
        return self.client.admin.command(SON([('shardCollection', self.coll.full_name),
                                              ('key', SHARD_KEY)]))

    def test_empty_collection_gets_the_shard_key_index(self):
        self.db.create_collection(self.coll.name)
        self.shard()
        self.assertEqual(names(self.coll), ['_id_', 'tenant_id_1_key_hashed'])

    def test_an_id_shard_key_uses_the_id_index(self):
        self.client.admin.command(SON([('shardCollection', self.coll.full_name),
                                       ('key', {'_id': 1})]))
        self.assertEqual(names(self.coll), ['_id_'])

    def test_non_empty_collection_needs_the_index_first(self):
        self.coll.insert_one({'_id': 'format', 'format': 1})
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.shard()
        self.assertEqual(caught.exception.code, 72)
        self.assertEqual(caught.exception.details['codeName'], 'InvalidOptions')
        self.assertIn('Please create an index that starts with the proposed shard key',
                      str(caught.exception))
        config = self.client.config.collections
        self.assertIsNone(config.find_one({'_id': self.coll.full_name}))
        self.coll.create_index([('tenant_id', 1), ('key', 'hashed')])
        self.assertEqual(self.shard()['collectionsharded'], self.coll.full_name)

    def test_an_index_with_the_key_as_prefix_is_enough(self):
        self.coll.insert_one({'_id': 1})
        self.coll.create_index([('tenant_id', 1), ('key', 'hashed'), ('x', 1)])
        self.assertEqual(self.shard()['ok'], 1)
        self.assertEqual(len(names(self.coll)), 2)
