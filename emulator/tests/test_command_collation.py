"""A collation named by a command (find, count, update, delete,
findAndModify).

MongoDB manual, "Collation" (https://www.mongodb.com/docs/manual/reference/collation/):
"Operations that support collation" take a `collation` document, which the
operation uses to compare strings "If no collation is specified for the
operation ... the collection's default collation"; a collation given to the
operation replaces the collection's, so `{locale: "simple"}` compares
strings as given even on a case-insensitive collection. The update and
delete commands take it per statement. MongoDB's own CRUD tests
(crud/*-collation.json under emulator/spectests) query 'PING' under
`{locale: "en_US", strength: 2}` and expect 'ping'.
"""

import pymongo
from bson.son import SON
from pymongo.collation import Collation

from .support import EmulatorTest

CASE_INSENSITIVE = Collation(locale='en_US', strength=2)


class CommandCollationTest(EmulatorTest):

    def setUp(self):
        super().setUp()
        self.coll.insert_many([{'_id': 1, 'x': 'ping'}, {'_id': 2, 'x': 'Ping'},
                               {'_id': 3, 'x': 'pong'}])

    def test_find_and_count(self):
        self.assertEqual([d['_id'] for d in self.coll.find({'x': 'PING'},
                                                           collation=CASE_INSENSITIVE)], [1, 2])
        self.assertEqual(list(self.coll.find({'x': 'PING'})), [])
        self.assertEqual(self.db.command(SON([('count', 'reservations'), ('query', {'x': 'PING'}),
                                              ('collation', {'locale': 'en', 'strength': 2})]))
                         ['n'], 2)

    def test_update_and_delete_statements(self):
        result = self.coll.update_many({'x': 'PING'}, {'$set': {'y': 1}},
                                       collation=CASE_INSENSITIVE)
        self.assertEqual(result.matched_count, 2)
        result = self.coll.update_one({'x': 'PONG'}, {'$set': {'y': 2}},
                                      collation=CASE_INSENSITIVE)
        self.assertEqual(result.matched_count, 1)
        self.assertEqual(self.coll.delete_one({'x': 'PING'},
                                              collation=CASE_INSENSITIVE).deleted_count, 1)
        self.assertEqual(self.coll.delete_many({'x': 'PING'},
                                               collation=CASE_INSENSITIVE).deleted_count, 1)
        self.assertEqual([d['_id'] for d in self.coll.find()], [3])

    def test_find_and_modify(self):
        doc = self.coll.find_one_and_update({'x': 'PONG'}, {'$set': {'y': 1}},
                                            collation=CASE_INSENSITIVE,
                                            return_document=pymongo.ReturnDocument.AFTER)
        self.assertEqual(doc['_id'], 3)
        doc = self.coll.find_one_and_delete({'x': 'PONG'}, collation=CASE_INSENSITIVE)
        self.assertEqual(doc['_id'], 3)

    def test_simple_replaces_the_default_collation(self):
        self.db.command('create', 'ci', collation={'locale': 'en', 'strength': 2})
        ci = self.db.ci
        ci.insert_one({'_id': 'Ann', 'x': 'A'})
        self.assertEqual(ci.find_one({'_id': 'ann'})['_id'], 'Ann')
        simple = Collation(locale='simple')
        self.assertIsNone(ci.find_one({'_id': 'ann'}, collation=simple))
        self.assertEqual(ci.find_one({'_id': 'Ann'}, collation=simple)['_id'], 'Ann')
        self.assertEqual(len(list(ci.find({'x': 'a'}))), 1)
        self.assertEqual(list(ci.find({'x': 'a'}, collation=simple)), [])

    def test_a_collation_needs_a_locale(self):
        with self.assertRaises(pymongo.errors.OperationFailure):
            self.db.command(SON([('find', 'reservations'), ('collation', {'strength': 2})]))

    def test_a_costly_delete_matches_again_under_the_same_collation(self):
        # With a cost per document the delete yields between documents and
        # matches each again before deleting it (test_max_time.py): under
        # the statement's collation, as it matched them the first time.
        self.client.admin.command(SON([('emulatorControl', 'cost'), ('perDocumentMS', 1)]))
        self.addCleanup(self.client.admin.command,
                        SON([('emulatorControl', 'cost'), ('perDocumentMS', 0)]))
        self.assertEqual(self.coll.delete_many({'x': 'PING'},
                                               collation=CASE_INSENSITIVE).deleted_count, 2)
