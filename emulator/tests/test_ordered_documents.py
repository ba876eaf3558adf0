"""Embedded documents compare field by field, in order.

MongoDB manual, "Comparison/Sort Order" (Objects): "MongoDB's comparison of
BSON objects uses the following order: ... recursively compare key-value
pairs in the order that they appear within the BSON object", and "Query on
Embedded/Nested Documents": equality on an embedded document requires an
exact match, "including the field order".
"""

import unittest

import pymongo
from bson.son import SON

from .support import EmulatorTest

TNK = SON([('t', ''), ('n', 'e'), ('k', 'x')])
KNT = SON([('k', 'x'), ('n', 'e'), ('t', '')])


class OrderedDocumentsTest(EmulatorTest):

    def test_reordered_ids_are_distinct_documents(self):
        self.coll.insert_one({'_id': TNK, 'v': 1})
        self.coll.insert_one({'_id': KNT, 'v': 2})  # no duplicate key
        self.assertEqual(self.coll.count_documents({}), 2)

    def test_query_matches_only_the_same_field_order(self):
        self.coll.insert_one({'_id': TNK, 'v': 1})
        self.assertIsNone(self.coll.find_one({'_id': KNT}))
        self.assertEqual(self.coll.find_one({'_id': TNK})['v'], 1)
        self.coll.insert_one({'_id': 2, 'owner': SON([('tenant_id', 'a'), ('id', 'b')])})
        self.assertIsNone(self.coll.find_one({'owner': SON([('id', 'b'), ('tenant_id', 'a')])}))
        self.assertEqual(self.coll.find_one({'owner': SON([('tenant_id', 'a'), ('id', 'b')])})['_id'], 2)

    def test_same_order_collides_on_insert(self):
        self.coll.insert_one({'_id': TNK})
        with self.assertRaises(pymongo.errors.DuplicateKeyError):
            self.coll.insert_one({'_id': SON([('t', ''), ('n', 'e'), ('k', 'x')])})

    def test_stored_field_order_is_returned(self):
        self.coll.insert_one(SON([('_id', KNT), ('z', 1), ('a', SON([('y', 1), ('b', 2)]))]))
        doc = self.coll.find_one()
        self.assertEqual(list(doc), ['_id', 'z', 'a'])
        self.assertEqual(list(doc['_id']), ['k', 'n', 't'])
        self.assertEqual(list(doc['a']), ['y', 'b'])


if __name__ == '__main__':
    unittest.main()
