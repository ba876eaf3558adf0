"""findAndModify answers.

MongoDB manual, "findAndModify": with new: true the reply's value is the
modified document, with new: false (the default) the original, null for an
upsert that inserted; lastErrorObject holds n, updatedExisting and, after
an upsert insert, upserted (the new _id); remove: true deletes and returns
the removed document; fields projects the returned document.
"""

import unittest

from bson.son import SON

from .support import EmulatorTest


class FindAndModifyTest(EmulatorTest):

    def run_fam(self, **fields):
        command = SON([('findAndModify', 'reservations')])
        command.update(fields)
        return self.db.command(command)

    def test_new_returns_post_image(self):
        self.coll.insert_one({'_id': 1, 'v': 1})
        reply = self.run_fam(query={'_id': 1}, update={'$inc': {'v': 1}}, new=True)
        self.assertEqual(reply['value'], {'_id': 1, 'v': 2})
        self.assertEqual(reply['lastErrorObject'], {'n': 1, 'updatedExisting': True})

    def test_old_returns_pre_image(self):
        self.coll.insert_one({'_id': 1, 'v': 1})
        reply = self.run_fam(query={'_id': 1}, update={'$inc': {'v': 1}}, new=False)
        self.assertEqual(reply['value'], {'_id': 1, 'v': 1})

    def test_upsert_reports_upserted(self):
        reply = self.run_fam(query={'_id': 7}, update=[{'$set': {'v': 1}}], upsert=True, new=True)
        self.assertEqual(reply['lastErrorObject'], SON([('n', 1), ('updatedExisting', False),
                                                        ('upserted', 7)]))
        self.assertEqual(reply['value'], {'_id': 7, 'v': 1})
        reply = self.run_fam(query={'_id': 8}, update={'$set': {'v': 1}}, upsert=True)
        self.assertIsNone(reply['value'])

    def test_no_match(self):
        reply = self.run_fam(query={'_id': 1}, update={'$set': {'v': 1}})
        self.assertEqual(reply['lastErrorObject'], {'n': 0, 'updatedExisting': False})
        self.assertIsNone(reply['value'])

    def test_remove(self):
        self.coll.insert_one({'_id': 1, 'v': 1})
        reply = self.run_fam(query={'_id': 1}, remove=True)
        self.assertEqual(reply['value'], {'_id': 1, 'v': 1})
        self.assertEqual(reply['lastErrorObject'], {'n': 1})
        self.assertEqual(self.coll.count_documents({}), 0)
        self.assertEqual(self.run_fam(query={'_id': 1}, remove=True)['lastErrorObject'], {'n': 0})

    def test_fields_projection(self):
        self.coll.insert_one(SON([('_id', 1), ('a', 1), ('b', 2)]))
        reply = self.run_fam(query={'_id': 1}, update={'$set': {'c': 3}}, new=True,
                             fields={'b': 1, 'c': 1})
        self.assertEqual(list(reply['value'].items()), [('_id', 1), ('b', 2), ('c', 3)])

    def test_pull_post_image_projected_without_id(self):
        # abandon's pull (csrc/mongo/mongo_ops.c): the post-image of a
        # $pull, projected to expires_at and holds, _id excluded. MongoDB
        # manual, "Project Fields to Return from Query": _id is returned
        # unless the projection says _id: 0, the one exclusion an inclusion
        # projection may hold; a field that is null is returned as null,
        # one that is missing is left out.
        self.coll.insert_one(SON([('_id', 1), ('owner', 'o'), ('expires_at', 5),
                                  ('holds', ['a', 'b'])]))
        self.coll.insert_one(SON([('_id', 2), ('owner', 'o'), ('expires_at', None),
                                  ('version', 3)]))
        fields = SON([('_id', 0), ('expires_at', 1), ('holds', 1)])
        reply = self.run_fam(query={'_id': 1}, update={'$pull': {'holds': 'a'}}, new=True,
                             fields=fields)
        self.assertEqual(list(reply['value'].items()), [('expires_at', 5), ('holds', ['b'])])
        reply = self.run_fam(query={'_id': 1}, update={'$pull': {'holds': 'b'}}, new=True,
                             fields=fields)
        self.assertEqual(list(reply['value'].items()), [('expires_at', 5), ('holds', [])])
        reply = self.run_fam(query={'_id': 2}, update={'$pull': {'holds': 'a'}}, new=True,
                             fields=fields)
        self.assertEqual(list(reply['value'].items()), [('expires_at', None)])
        self.assertEqual(reply['lastErrorObject'], {'n': 1, 'updatedExisting': True})


if __name__ == '__main__':
    unittest.main()
