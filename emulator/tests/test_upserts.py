"""Upsert seeding and duplicate keys.

MongoDB manual, "Upsert with Operator Expressions" / "Upsert with
Replacement Document": the new document is created "from the equality
clauses in the <query> parameter" and then the update applies; fields in
$or clauses (of more than one clause) do not seed. "Duplicate Key Errors on
Upsert": the server retries an upsert that failed on a duplicate key only
when the query is an equality on the unique index's fields alone; otherwise
the operation fails with E11000 (code 11000) -- a write error for update, a
command error for findAndModify. Inserting an existing _id fails the same
way. Single-document writes are atomic ("Atomicity and Transactions").
An update with multi and upsert that matches nothing inserts one document
("update" command, upsert: "If no documents match, inserts a single
document"); when some match, it updates them all and inserts none.
An unordered batch ("update" command, ordered: "If false, then when an
update fails, continue with the remaining update statements, if any")
reports each failed statement in writeErrors by its zero-based index in
the updates array, and each upserted document in upserted with its index
and _id.
"""

import threading
import unittest

import pymongo
from bson.son import SON

from .support import EmulatorTest, client

KEY = SON([('t', ''), ('n', 'email'), ('k', 'ann@example.com')])


def reservation_filter(owner):
    return SON([('_id', KEY), ('tenant_id', ''), ('key', 'ann@example.com'),
                ('$or', [{'owner': owner}, {'expires_at': {'$lte': 100}}])])


class UpsertTest(EmulatorTest):

    def test_seeded_from_equalities_not_from_or(self):
        doc = self.coll.find_one_and_update(
            reservation_filter('o1'), [{'$set': {'owner': 'o1', 'expires_at': 200}}],
            upsert=True, return_document=pymongo.ReturnDocument.AFTER)
        self.assertEqual(doc, SON([('_id', KEY), ('tenant_id', ''), ('key', 'ann@example.com'),
                                   ('owner', 'o1'), ('expires_at', 200)]))

    def test_seeded_from_and_and_eq(self):
        self.coll.update_one({'$and': [{'_id': 5}, {'a': {'$eq': 1}}], 'b': {'$gt': 1}},
                             {'$set': {'c': 1}}, upsert=True)
        self.assertEqual(self.coll.find_one(), SON([('_id', 5), ('a', 1), ('c', 1)]))

    def test_set_on_insert_applies_only_when_inserting(self):
        self.coll.update_one({'_id': 1}, {'$setOnInsert': {'x': 1}, '$set': {'y': 1}}, upsert=True)
        self.coll.update_one({'_id': 1}, {'$setOnInsert': {'x': 2}, '$set': {'y': 2}}, upsert=True)
        self.assertEqual(self.coll.find_one(), SON([('_id', 1), ('x', 1), ('y', 2)]))

    def test_multi_upsert_inserts_one_when_nothing_matches(self):
        result = self.coll.update_many({'_id': {'$gt': 5}, 'k': 'v'}, {'$set': {'x': 1}},
                                       upsert=True)
        self.assertEqual((result.matched_count, result.upserted_id is not None), (0, True))
        self.assertEqual(self.coll.find_one({}, {'_id': 0}), SON([('k', 'v'), ('x', 1)]))
        result = self.coll.update_many({'k': 'v'}, {'$set': {'x': 2}}, upsert=True)
        self.assertEqual((result.matched_count, result.upserted_id), (1, None))
        self.assertEqual(self.coll.count_documents({}), 1)

    def test_upsert_duplicate_key_is_a_write_error_for_update(self):
        self.coll.insert_one({'_id': KEY, 'owner': 'o1', 'expires_at': 500})
        with self.assertRaises(pymongo.errors.DuplicateKeyError) as caught:
            self.coll.update_one(reservation_filter('o2'), [{'$set': {'owner': 'o2'}}], upsert=True)
        self.assertEqual(caught.exception.code, 11000)
        self.assertIn('E11000 duplicate key error', str(caught.exception))
        self.assertEqual(self.coll.find_one()['owner'], 'o1')

    def test_upsert_duplicate_key_is_a_command_error_for_find_and_modify(self):
        self.coll.insert_one({'_id': KEY, 'owner': 'o1', 'expires_at': 500})
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.coll.find_one_and_update(reservation_filter('o2'), [{'$set': {'owner': 'o2'}}],
                                          upsert=True)
        self.assertEqual(caught.exception.code, 11000)
        self.assertEqual(caught.exception.details['codeName'], 'DuplicateKey')

    def test_unordered_batch_of_pipeline_upserts_reports_each_statement(self):
        other = SON([('t', ''), ('n', 'email'), ('k', 'bob@example.com')])
        self.coll.insert_one({'_id': KEY, 'owner': 'o1', 'expires_at': 500})
        bob = SON([('_id', other), ('tenant_id', ''), ('key', 'bob@example.com'),
                   ('$or', [{'owner': 'o2'}, {'expires_at': {'$lte': 100}}])])
        requests = [pymongo.UpdateOne(reservation_filter('o2'), [{'$set': {'owner': 'o2'}}],
                                      upsert=True),
                    pymongo.UpdateOne(bob, [{'$set': {'owner': 'o2'}}], upsert=True),
                    pymongo.UpdateOne({'_id': other, 'owner': 'o2'},
                                      [{'$set': {'expires_at': 7}}])]
        with self.assertRaises(pymongo.errors.BulkWriteError) as caught:
            self.coll.bulk_write(requests, ordered=False)
        details = caught.exception.details
        self.assertEqual([(e['index'], e['code']) for e in details['writeErrors']], [(0, 11000)])
        self.assertEqual([(u['index'], u['_id']) for u in details['upserted']], [(1, other)])
        self.assertEqual((details['nMatched'], details['nModified'], details['nUpserted']),
                         (1, 1, 1))
        self.assertEqual(self.coll.find_one({'_id': KEY})['owner'], 'o1')
        self.assertEqual(self.coll.find_one({'_id': other}, {'_id': 0}),
                         SON([('tenant_id', ''), ('key', 'bob@example.com'), ('owner', 'o2'),
                              ('expires_at', 7)]))

    def test_insert_existing_id_fails(self):
        self.coll.insert_one({'_id': KEY})
        with self.assertRaises(pymongo.errors.DuplicateKeyError) as caught:
            self.coll.insert_one({'_id': KEY})
        self.assertEqual(caught.exception.code, 11000)

    def test_concurrent_upserts_insert_once(self):
        results = []

        def reserve(owner):
            c = client()
            coll = c.get_database(self.db.name).reservations
            try:
                coll.find_one_and_update(reservation_filter(owner), [{'$set': {'owner': owner}}],
                                         upsert=True)
                results.append('ok')
            except pymongo.errors.OperationFailure as error:
                results.append(error.code)
            finally:
                c.close()

        threads = [threading.Thread(target=reserve, args=('o%d' % i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results.count('ok'), 1)
        self.assertEqual(results.count(11000), 15)
        self.assertEqual(self.coll.count_documents({}), 1)


if __name__ == '__main__':
    unittest.main()
