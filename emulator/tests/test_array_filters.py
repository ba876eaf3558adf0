"""arrayFilters and the filtered positional operators of update and
findAndModify (MongoDB 3.6+).

MongoDB manual, "$[<identifier>]": an update operator's path may name
`$[<identifier>]`, which stands for every element of that array matching
the statement's arrayFilters document for the identifier (its top-level
fields are `<identifier>` or `<identifier>.<field>`); the identifier must
begin with a lowercase letter and be alphanumeric, and each identifier of
the update needs exactly one filter. "$[]": every element of the array.
The update command's reference: "arrayFilters ... You cannot have an array
filter document for an identifier if the identifier is not included in the
update document", and pipeline-style updates take no arrayFilters.
MongoDB's own CRUD tests (crud/updateOne-arrayFilters.json and the
updateMany and findOneAndUpdate ones under emulator/spectests) check the
same on their documents.
"""

import pymongo
from bson.son import SON

from .support import EmulatorTest


class ArrayFiltersTest(EmulatorTest):

    def setUp(self):
        super().setUp()
        self.coll.insert_one(SON([('_id', 1), ('n', [1, 2, 3]),
                                  ('y', [SON([('b', 1), ('c', 0)]), SON([('b', 2), ('c', 0)]),
                                         SON([('b', 1), ('c', 0)])])]))

    def test_identifier_updates_the_matching_elements_only(self):
        result = self.coll.update_one({'_id': 1}, {'$set': {'n.$[big]': 0}},
                                      array_filters=[{'big': {'$gte': 2}}])
        self.assertEqual((result.matched_count, result.modified_count), (1, 1))
        self.assertEqual(self.coll.find_one()['n'], [1, 0, 0])

    def test_filter_on_a_field_of_the_element(self):
        self.coll.update_many({}, {'$inc': {'y.$[e].c': 5}}, array_filters=[{'e.b': 1}])
        self.assertEqual([d['c'] for d in self.coll.find_one()['y']], [5, 0, 5])

    def test_all_positional_updates_every_element(self):
        self.coll.update_one({'_id': 1}, {'$set': {'y.$[].c': 7}})
        self.assertEqual([d['c'] for d in self.coll.find_one()['y']], [7, 7, 7])

    def test_no_element_matching_leaves_the_document(self):
        result = self.coll.update_one({'_id': 1}, {'$set': {'n.$[big]': 0}},
                                      array_filters=[{'big': {'$gt': 10}}])
        self.assertEqual((result.matched_count, result.modified_count), (1, 0))
        self.assertEqual(self.coll.find_one()['n'], [1, 2, 3])

    def test_find_and_modify_takes_array_filters(self):
        doc = self.coll.find_one_and_update({'_id': 1}, {'$set': {'y.$[e].c': 1}},
                                            array_filters=[{'e.b': 2}],
                                            return_document=pymongo.ReturnDocument.AFTER)
        self.assertEqual([d['c'] for d in doc['y']], [0, 1, 0])

    def assert_write_error(self, code, update, filters):
        with self.assertRaises(pymongo.errors.WriteError) as caught:
            self.coll.update_one({'_id': 1}, update, array_filters=filters)
        self.assertEqual(caught.exception.code, code)

    def test_a_filter_the_update_does_not_use_is_failed_to_parse(self):
        self.assert_write_error(9, {'$set': {'n.0': 0}}, [{'i': 1}])

    def test_an_identifier_without_a_filter_is_bad_value(self):
        self.assert_write_error(2, {'$set': {'n.$[i]': 0}}, [])

    def test_an_identifier_must_begin_with_a_lowercase_letter(self):
        self.assert_write_error(2, {'$set': {'n.$[I]': 0}}, [{'I': 1}])

    def test_one_filter_per_identifier(self):
        self.assert_write_error(9, {'$set': {'n.$[i]': 0}}, [{'i': 1}, {'i': 2}])

    def test_a_pipeline_update_takes_no_array_filters(self):
        self.assert_write_error(72, [{'$set': {'a': 1}}], [{'i': 1}])

    def test_an_array_update_needs_the_array(self):
        self.assert_write_error(2, {'$set': {'missing.$[i]': 0}}, [{'i': 1}])
