"""Aggregation stages the emulator does not run.

MongoDB manual, "Aggregation Stages"
(https://www.mongodb.com/docs/manual/reference/operator/aggregation-pipeline/):
$out and $merge write a pipeline's result to a collection. The emulator
does not emulate them: like a server that does not know a stage, it
answers the aggregate with an error (Location40324, "Unrecognized pipeline
stage name") and writes nothing, never an internal error.
"""

import unittest

import pymongo

from .support import EmulatorTest


class WritingStagesTest(EmulatorTest):

    def test_out_and_merge_are_refused_and_write_nothing(self):
        self.coll.insert_one({'_id': 1})
        for stage in ({'$out': 'copy'}, {'$merge': {'into': 'copy'}}):
            with self.assertRaises(pymongo.errors.OperationFailure) as caught:
                list(self.coll.aggregate([{'$match': {}}, stage]))
            self.assertEqual(caught.exception.code, 40324)
            self.assertIn(next(iter(stage)), str(caught.exception))
        self.assertNotIn('copy', self.db.list_collection_names())


if __name__ == '__main__':
    unittest.main()
