"""$setField in update pipelines (MongoDB 5.0+).

MongoDB manual, "$setField (aggregation)": `{$setField: {field, input,
value}}` returns input with field added or updated; field is a constant
string, and "if field contains a $ or a ., use $literal" (that is how a
document gets a field named `$a` or `a.b`); "if input evaluates to missing,
undefined, or null, $setField returns null"; input otherwise must be a
document; "if value evaluates to $$REMOVE, the field is removed". An
updated field keeps its place, a new one is appended. MongoDB's own CRUD
tests (crud/updateOne-dots_and_dollars.json and the updateMany and
findOneAndUpdate ones under emulator/spectests) set `$a` and `a.b` so.
"""

import pymongo
from bson.son import SON

from .support import EmulatorTest


class SetFieldTest(EmulatorTest):

    def setUp(self):
        super().setUp()
        self.coll.insert_one(SON([('_id', 1), ('a', 1), ('foo', SON([('x', 1)]))]))

    def test_a_dollar_and_a_dotted_field_with_literal(self):
        self.coll.update_one({'_id': 1}, [{'$replaceWith': {'$setField': {
            'field': {'$literal': '$a'}, 'value': 1, 'input': '$$ROOT'}}}])
        self.coll.update_one({'_id': 1}, [{'$set': {'foo': {'$setField': {
            'field': {'$literal': 'b.c'}, 'value': 2, 'input': '$foo'}}}}])
        self.assertEqual(self.coll.find_one(), SON([
            ('_id', 1), ('a', 1), ('foo', SON([('x', 1), ('b.c', 2)])), ('$a', 1)]))

    def test_an_existing_field_keeps_its_place(self):
        self.coll.update_one({'_id': 1}, [{'$replaceWith': {'$setField': {
            'field': 'a', 'value': 5, 'input': '$$ROOT'}}}])
        self.assertEqual(list(self.coll.find_one().items()),
                         [('_id', 1), ('a', 5), ('foo', SON([('x', 1)]))])

    def test_remove_removes_the_field(self):
        self.coll.update_one({'_id': 1}, [{'$set': {'foo': {'$setField': {
            'field': 'x', 'value': '$$REMOVE', 'input': '$foo'}}}}])
        self.assertEqual(self.coll.find_one()['foo'], SON())

    def test_a_null_or_missing_input_is_null(self):
        self.coll.update_one({'_id': 1}, [{'$set': {'r': {'$setField': {
            'field': 'x', 'value': 1, 'input': '$nothing'}}}}])
        self.assertIsNone(self.coll.find_one()['r'])

    def test_an_input_that_is_not_a_document_is_refused(self):
        with self.assertRaises(pymongo.errors.WriteError) as caught:
            self.coll.update_one({'_id': 1}, [{'$set': {'r': {'$setField': {
                'field': 'x', 'value': 1, 'input': '$a'}}}}])
        self.assertIn("requires 'input' to evaluate to type Object", str(caught.exception))

    def test_a_field_path_is_not_a_constant(self):
        with self.assertRaises(pymongo.errors.WriteError):
            self.coll.update_one({'_id': 1}, [{'$set': {'r': {'$setField': {
                'field': '$a', 'value': 1, 'input': '$$ROOT'}}}}])
