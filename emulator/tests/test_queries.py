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


if __name__ == '__main__':
    unittest.main()
