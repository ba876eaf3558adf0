"""Updates given as an aggregation pipeline (MongoDB 4.2+).

MongoDB manual, "Updates with Aggregation Pipeline": update and
findAndModify accept an array of the stages $addFields/$set, $project/$unset
and $replaceRoot/$replaceWith. $set keeps existing fields in place and
appends new ones; the _id cannot change.
"""

import unittest

import pymongo
from bson.son import SON

from .support import EmulatorTest


class PipelineUpdateTest(EmulatorTest):

    def setUp(self):
        super().setUp()
        self.coll.insert_one(SON([('_id', 1), ('a', 1), ('b', SON([('x', 1), ('y', 2)])),
                                  ('holds', ['h'])]))

    def test_set_and_add_fields(self):
        self.coll.update_one({'_id': 1}, [{'$set': {'a': {'$add': ['$a', 1]}, 'c': '$a',
                                                    'b.z': 3}}, {'$addFields': {'d': '$c'}}])
        self.assertEqual(self.coll.find_one(), SON([
            ('_id', 1), ('a', 2), ('b', SON([('x', 1), ('y', 2), ('z', 3)])), ('holds', ['h']),
            ('c', 1), ('d', 1)]))

    def test_unset_and_project(self):
        self.coll.update_one({'_id': 1}, [{'$unset': ['holds', 'b.x']}])
        self.assertEqual(self.coll.find_one(), SON([('_id', 1), ('a', 1), ('b', SON([('y', 2)]))]))
        self.coll.update_one({'_id': 1}, [{'$project': {'a': 1, 'n': {'$literal': 5}}}])
        self.assertEqual(self.coll.find_one(), SON([('_id', 1), ('a', 1), ('n', 5)]))

    def test_replace_root_and_replace_with(self):
        self.coll.update_one({'_id': 1}, [{'$replaceWith': SON([('k', '$a'), ('v', 2)])}])
        self.assertEqual(self.coll.find_one(), SON([('_id', 1), ('k', 1), ('v', 2)]))
        self.coll.update_one({'_id': 1}, [{'$replaceRoot': {'newRoot': {'w': '$v'}}}])
        self.assertEqual(self.coll.find_one(), SON([('_id', 1), ('w', 2)]))

    def test_id_is_immutable(self):
        with self.assertRaises(pymongo.errors.WriteError) as caught:
            self.coll.update_one({'_id': 1}, [{'$set': {'_id': 2}}])
        self.assertEqual(caught.exception.code, 66)

    def test_find_and_modify_with_pipeline(self):
        doc = self.coll.find_one_and_update(
            {'_id': 1}, [{'$set': {'holds': {'$concatArrays': ['$holds', ['i']]}}}],
            return_document=pymongo.ReturnDocument.AFTER)
        self.assertEqual(doc['holds'], ['h', 'i'])

    def test_update_many_with_pipeline(self):
        self.coll.insert_one({'_id': 2, 'a': 5})
        result = self.coll.update_many({}, [{'$set': {'a': {'$multiply': ['$a', 2]}}}])
        self.assertEqual((result.matched_count, result.modified_count), (2, 2))
        self.assertEqual(sorted(d['a'] for d in self.coll.find()), [2, 10])


if __name__ == '__main__':
    unittest.main()
