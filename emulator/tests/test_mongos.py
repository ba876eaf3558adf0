"""Mongos mode and the sharded-write rules of MongoDB 6.0.

MongoDB manual: a mongos answers hello with msg: "isdbgrid";
"sh.shardCollection()" records the shard key in config.collections and
fails with AlreadyInitialized (23) for a collection sharded with another
key; "create" answers ok for an existing collection on mongos. Before 7.1,
"findAndModify" on a sharded collection "must contain the shard key" in its
query (ShardKeyNotFound, 61); an upsert needs the full shard key as
equalities; "updateOne"/"deleteOne" need the shard key or an exact _id.
"""

import unittest

import pymongo
from bson.son import SON

from .support import EmulatorTest

SHARD_KEY = SON([('tenant_id', 1), ('key', 'hashed')])


class MongosTest(EmulatorTest):
    mongos = True

    def shard(self, key=SHARD_KEY):
        return self.client.admin.command(SON([('shardCollection', self.coll.full_name),
                                              ('key', key)]))

    def test_hello_says_isdbgrid(self):
        reply = self.client.admin.command('hello')
        self.assertEqual(reply['msg'], 'isdbgrid')
        self.assertNotIn('setName', reply)
        self.assertEqual(reply['maxWireVersion'], 17)

    def test_shard_collection_records_key_and_is_idempotent(self):
        self.assertEqual(self.shard()['collectionsharded'], self.coll.full_name)
        self.assertIn(self.coll.name, self.db.list_collection_names())
        config = self.client.get_database('config', codec_options=self.db.codec_options)
        entry = config.collections.find_one({'_id': self.coll.full_name})
        self.assertEqual(entry['key'], SHARD_KEY)
        self.assertEqual(list(entry['key']), ['tenant_id', 'key'])
        self.assertIs(entry['unique'], False)
        self.assertEqual(self.shard()['ok'], 1)

    def test_shard_collection_with_another_key_fails(self):
        self.shard()
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.shard(SON([('key', 1)]))
        self.assertEqual(caught.exception.code, 23)
        self.assertIn('already', str(caught.exception))

    def test_create_existing_collection_is_ok(self):
        self.db.command('create', self.coll.name)
        self.assertEqual(self.db.command('create', self.coll.name)['ok'], 1)

    def test_find_and_modify_needs_shard_key(self):
        self.shard()
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.coll.find_one_and_update({'_id': 1, 'tenant_id': ''}, {'$set': {'a': 1}}, upsert=True)
        self.assertEqual(caught.exception.code, 61)
        self.assertIn('must contain the shard key', str(caught.exception))
        doc = self.coll.find_one_and_update({'_id': 1, 'tenant_id': '', 'key': 'k'},
                                            {'$set': {'a': 1}}, upsert=True,
                                            return_document=pymongo.ReturnDocument.AFTER)
        self.assertEqual(doc, SON([('_id', 1), ('tenant_id', ''), ('key', 'k'), ('a', 1)]))

    def test_update_needs_shard_key_or_id(self):
        self.shard()
        with self.assertRaises(pymongo.errors.WriteError) as caught:
            self.coll.update_one({'tenant_id': ''}, {'$set': {'a': 1}})
        self.assertEqual(caught.exception.code, 72)
        with self.assertRaises(pymongo.errors.WriteError) as caught:
            self.coll.update_one({'_id': 1, 'key': 'k'}, {'$set': {'a': 1}}, upsert=True)
        self.assertEqual(caught.exception.code, 61)
        self.coll.update_one({'_id': 1}, {'$set': {'a': 1}})  # exact _id: allowed
        self.coll.update_one({'$and': [{'tenant_id': ''}, {'key': 'k'}]}, {'$set': {'a': 1}},
                             upsert=True)
        self.assertEqual(self.coll.count_documents({}), 1)

    def test_delete_one_needs_shard_key_or_id(self):
        self.shard()
        self.coll.insert_one({'_id': 1, 'tenant_id': '', 'key': 'k'})
        with self.assertRaises(pymongo.errors.WriteError) as caught:
            self.coll.delete_one({'tenant_id': ''})
        self.assertEqual(caught.exception.code, 61)
        self.assertEqual(self.coll.delete_many({'tenant_id': ''}).deleted_count, 1)

    def test_unsharded_collection_has_no_rules(self):
        self.coll.find_one_and_update({'_id': 1}, {'$set': {'a': 1}}, upsert=True)
        self.assertEqual(self.coll.count_documents({}), 1)


class ReplicaSetTest(EmulatorTest):

    def test_hello_as_primary(self):
        reply = self.client.admin.command('hello')
        self.assertEqual(reply['setName'], 'rs0')
        self.assertIs(reply['isWritablePrimary'], True)
        self.assertEqual(reply['maxWireVersion'], 17)
        self.assertEqual(reply['logicalSessionTimeoutMinutes'], 30)
        self.assertIs(self.client.admin.command('isMaster')['ismaster'], True)

    def test_shard_collection_is_not_a_command(self):
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.client.admin.command('shardCollection', self.coll.full_name, key={'a': 1})
        self.assertEqual(caught.exception.code, 59)


if __name__ == '__main__':
    unittest.main()
