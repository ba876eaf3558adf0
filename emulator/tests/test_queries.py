"""Query operators on null and missing fields.

MongoDB manual, "Comparison Query Operators" and "Type Bracketing": $lt,
$lte, $gt, $gte only match fields of the same type bracket as the value,
so {$lte: 5} never matches null or a missing field. "$ne" selects documents
whose field is not equal to the value, and {f: {$ne: null}} therefore
excludes both null and missing fields ("Query for Null or Missing Fields").
"$size" matches arrays of the given length and never a missing field.
"""

import unittest

from .support import EmulatorTest


class QueryTest(EmulatorTest):

    def setUp(self):
        super().setUp()
        self.coll.insert_many([
            {'_id': 'null', 'expires_at': None, 'holds': []},
            {'_id': 'missing'},
            {'_id': 'three', 'expires_at': 3, 'holds': ['a']},
            {'_id': 'nine', 'expires_at': 9, 'holds': []},
        ])

    def ids(self, query):
        return sorted(doc['_id'] for doc in self.coll.find(query))

    def test_range_operators_never_match_null_or_missing(self):
        self.assertEqual(self.ids({'expires_at': {'$lte': 5}}), ['three'])
        self.assertEqual(self.ids({'expires_at': {'$lt': 100}}), ['nine', 'three'])
        self.assertEqual(self.ids({'expires_at': {'$gt': -1}}), ['nine', 'three'])
        self.assertEqual(self.ids({'expires_at': {'$gte': None}}), ['null'])

    def test_ne_null_excludes_null_and_missing(self):
        self.assertEqual(self.ids({'expires_at': {'$ne': None}}), ['nine', 'three'])
        self.assertEqual(self.ids({'expires_at': None}), ['missing', 'null'])

    def test_size_zero_never_matches_missing(self):
        self.assertEqual(self.ids({'holds': {'$size': 0}}), ['nine', 'null'])
        self.assertEqual(self.ids({'holds': {'$size': 1}}), ['three'])

    def test_or_and_exists(self):
        self.assertEqual(self.ids({'$or': [{'_id': 'missing'}, {'expires_at': {'$lte': 3}}]}),
                         ['missing', 'three'])
        self.assertEqual(self.ids({'expires_at': {'$exists': False}}), ['missing'])


class IdInTest(EmulatorTest):
    """MongoDB manual, "$in": selects the documents whose field equals any
    value in the array; on _id it is a lookup per value in the _id index.
    An embedded _id matches only with its fields in the same order
    ("Query on Embedded/Nested Documents": equality is exact, order
    included)."""

    def test_id_in_finds_each_value_and_keeps_embedded_order(self):
        from bson.son import SON
        key = SON([('t', ''), ('n', 'email'), ('k', 'a')])
        self.coll.insert_many([{'_id': 'format', 'format': 1}, {'_id': key}, {'_id': 'other'}])
        got = sorted(str(d['_id']) for d in self.coll.find({'_id': {'$in': [key, 'format']}}))
        self.assertEqual(len(got), 2)
        self.assertIn('format', got)
        swapped = SON([('n', 'email'), ('t', ''), ('k', 'a')])
        self.assertEqual([d['_id'] for d in self.coll.find({'_id': {'$in': [swapped, 'x']}})], [])


if __name__ == '__main__':
    unittest.main()
