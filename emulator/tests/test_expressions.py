"""Aggregation expressions in update pipelines, on null and missing fields.

MongoDB manual: "$lte (aggregation)" and the others "compare both value and
type, using the specified BSON comparison order for values of different
types" (no type bracketing: null and missing sort below numbers); "$eq
(aggregation)" distinguishes a missing field from null; "$ifNull" treats
"undefined values or missing fields" as null; "$cond" evaluates its else
branch when the condition is false, null or missing; "$$REMOVE" removes a
field in $set/$addFields ("Variables in Aggregation Expressions").
"""

import unittest

from bson.int64 import Int64
from bson.son import SON

from .support import EmulatorTest


class ExpressionTest(EmulatorTest):

    def setUp(self):
        super().setUp()
        self.coll.insert_many([
            {'_id': 'null', 'expires_at': None, 'holds': ['a']},
            {'_id': 'missing'},
            {'_id': 'long', 'expires_at': Int64(7), 'holds': ['a', 'b']},
        ])

    def evaluate(self, expression, _id):
        """Set field r to expression on document _id, return r (or 'MISSING')."""
        self.coll.update_one({'_id': _id}, [{'$set': {'r': expression}}])
        return self.coll.find_one({'_id': _id}).get('r', 'MISSING')

    def test_lte_and_gt_compare_across_types(self):
        for _id in ('null', 'missing'):
            self.assertIs(self.evaluate({'$lte': ['$expires_at', 5]}, _id), True)
            self.assertIs(self.evaluate({'$lt': ['$expires_at', 5]}, _id), True)
            self.assertIs(self.evaluate({'$gt': ['$expires_at', 5]}, _id), False)
        self.assertIs(self.evaluate({'$gt': ['$expires_at', 5]}, 'long'), True)
        self.assertIs(self.evaluate({'$lt': ['$nothing', None]}, 'null'), True)

    def test_missing_is_not_eq_null(self):
        self.assertIs(self.evaluate({'$eq': ['$expires_at', None]}, 'missing'), False)
        self.assertIs(self.evaluate({'$ne': ['$expires_at', None]}, 'missing'), True)
        self.assertIs(self.evaluate({'$eq': ['$expires_at', None]}, 'null'), True)

    def test_if_null_treats_null_and_missing_alike(self):
        self.assertEqual(self.evaluate({'$ifNull': ['$expires_at', 'd']}, 'null'), 'd')
        self.assertEqual(self.evaluate({'$ifNull': ['$expires_at', 'd']}, 'missing'), 'd')
        self.assertEqual(self.evaluate({'$ifNull': ['$expires_at', 'd']}, 'long'), 7)

    def test_cond_takes_else_for_null_missing_false(self):
        for _id in ('null', 'missing'):
            self.assertEqual(self.evaluate({'$cond': ['$expires_at', 'then', 'else']}, _id), 'else')
        self.assertEqual(self.evaluate({'$cond': {'if': False, 'then': 1, 'else': 2}}, 'long'), 2)
        self.assertEqual(self.evaluate({'$cond': ['$expires_at', 'then', 'else']}, 'long'), 'then')

    def test_remove_variable_removes_field(self):
        self.coll.update_one({'_id': 'long'}, [{'$set': {'holds': '$$REMOVE',
                                                         'expires_at': {'$cond': [True, '$$REMOVE', 1]}}}])
        self.assertEqual(self.coll.find_one({'_id': 'long'}), {'_id': 'long'})

    def test_type(self):
        self.assertEqual(self.evaluate({'$type': '$expires_at'}, 'missing'), 'missing')
        self.assertEqual(self.evaluate({'$type': '$expires_at'}, 'null'), 'null')
        self.assertEqual(self.evaluate({'$type': '$expires_at'}, 'long'), 'long')
        self.assertEqual(self.evaluate({'$type': '$holds'}, 'long'), 'array')

    def test_logic(self):
        self.assertIs(self.evaluate({'$and': [True, '$expires_at']}, 'missing'), False)
        self.assertIs(self.evaluate({'$or': [False, '$expires_at']}, 'long'), True)
        self.assertIs(self.evaluate({'$not': [{'$eq': [1, 1]}]}, 'long'), False)
        self.assertIs(self.evaluate({'$not': ['$expires_at']}, 'null'), True)

    def test_max_keeps_long_and_ignores_null(self):
        self.assertEqual(self.evaluate({'$max': ['$expires_at', 3]}, 'null'), 3)
        value = self.evaluate({'$max': ['$expires_at', 3]}, 'long')
        self.assertEqual(value, 7)
        self.assertIsInstance(value, Int64)
        self.assertIsInstance(self.evaluate({'$add': ['$expires_at', 1]}, 'long'), Int64)

    def test_array_operators(self):
        self.assertEqual(self.evaluate({'$concatArrays': ['$holds', ['c']]}, 'long'), ['a', 'b', 'c'])
        self.assertIsNone(self.evaluate({'$concatArrays': ['$holds', ['c']]}, 'missing'))
        self.assertEqual(self.evaluate({'$setUnion': ['$holds', ['b', 'c']]}, 'long'), ['a', 'b', 'c'])
        self.assertIsNone(self.evaluate({'$setUnion': ['$holds', ['c']]}, 'missing'))
        self.assertIs(self.evaluate({'$in': ['b', '$holds']}, 'long'), True)
        self.assertIs(self.evaluate({'$in': ['z', '$holds']}, 'long'), False)
        self.assertEqual(self.evaluate({'$filter': {'input': '$holds', 'as': 'h',
                                                    'cond': {'$ne': ['$$h', 'a']}}}, 'long'), ['b'])
        self.assertEqual(self.evaluate({'$size': '$holds'}, 'long'), 2)
        self.assertIs(self.evaluate({'$isArray': '$holds'}, 'missing'), False)
        self.assertIs(self.evaluate({'$isArray': ['$holds']}, 'long'), True)

    def test_literal_and_object_order(self):
        self.assertEqual(self.evaluate({'$literal': '$holds'}, 'long'), '$holds')
        owner = self.evaluate({'$literal': SON([('tenant_id', 't'), ('id', 'x')])}, 'long')
        self.assertEqual(list(owner), ['tenant_id', 'id'])
        owner = self.evaluate({'$cond': [True, SON([('tenant_id', '$_id'), ('id', 'x')]), 0]}, 'long')
        self.assertEqual(owner, SON([('tenant_id', 'long'), ('id', 'x')]))
        self.assertEqual(list(owner), ['tenant_id', 'id'])


class DocumentShapeExpressionTest(EmulatorTest):
    """The expressions the store's conformance predicate uses, in a query's
    $expr (csrc/doc/doc_decode.c, resv__mongo_conforms_new).

    MongoDB manual (6.0): "$expr" "allows the use of aggregation
    expressions within the query language" (find, update, delete and
    findAndModify filters); "$objectToArray" "converts a document to an
    array ... Each element in the return array is a document that contains
    two fields k and v", one per top-level field in the document's order,
    null for a null or missing argument, error 40390 for a non-document;
    "$map" "applies an expression to each item in an array", the item
    bound to $$this unless "as" names it; "$setUnion" "filters out
    duplicates in its result"; "$type" names BSON types ("int", "long",
    "double", "string", "object", "array", "null", "missing").
    """

    def setUp(self):
        super().setUp()
        self.coll.insert_many([
            SON([('_id', 1), ('owner', SON([('tenant_id', ''), ('id', 'u')])),
                 ('expires_at', Int64(9)), ('holds', ['a', 'a'])]),
            SON([('_id', 2), ('expires_at', None)]),
            SON([('_id', 3), ('expires_at', 9.5)]),
        ])

    def evaluate(self, expression, _id):
        self.coll.update_one({'_id': _id}, [{'$set': {'r': expression}}])
        return self.coll.find_one({'_id': _id}).get('r', 'MISSING')

    def ids(self, expression):
        return sorted(d['_id'] for d in self.coll.find({'$expr': expression}))

    def test_expr_in_a_query_has_aggregation_semantics(self):
        # Missing is not null under $eq; $type tells a double from a long.
        self.assertEqual(self.ids({'$eq': ['$expires_at', None]}), [2])
        self.assertEqual(self.ids({'$eq': [{'$type': '$expires_at'}, 'double']}), [3])
        self.assertEqual(self.ids({'$in': [{'$type': '$expires_at'}, ['int', 'long']]}), [1])
        result = self.coll.update_one({'$expr': {'$eq': [{'$type': '$expires_at'}, 'null']}},
                                      {'$set': {'seen': True}})
        self.assertEqual(result.matched_count, 1)
        self.assertEqual(self.coll.delete_one({'_id': 3, '$expr': False}).deleted_count, 0)
        self.assertEqual(self.coll.find_one_and_update(
            {'_id': 1, '$expr': {'$eq': ['$owner.id', 'v']}}, {'$set': {'x': 1}}), None)

    def test_object_to_array_keeps_field_order(self):
        # First, before r (where evaluate stores its result) is a field too.
        names = self.evaluate({'$map': {'input': {'$objectToArray': '$$ROOT'}, 'in': '$$this.k'}}, 1)
        self.assertEqual(names, ['_id', 'owner', 'expires_at', 'holds'])
        pairs = self.evaluate({'$objectToArray': '$owner'}, 1)
        self.assertEqual(pairs, [SON([('k', 'tenant_id'), ('v', '')]), SON([('k', 'id'), ('v', 'u')])])
        self.assertEqual([list(p) for p in pairs], [['k', 'v'], ['k', 'v']])
        self.assertIsNone(self.evaluate({'$objectToArray': '$owner'}, 2))
        self.assertIsNone(self.evaluate({'$objectToArray': None}, 2))
        with self.assertRaises(Exception) as raised:
            self.evaluate({'$objectToArray': '$expires_at'}, 1)
        self.assertEqual(getattr(raised.exception, 'code', None), 40390)

    def test_map_evaluates_its_in_with_these_semantics(self):
        shape = self.evaluate({'$map': {'input': {'$objectToArray': '$$ROOT'},
                                        'in': ['$$this.k', {'$type': '$$this.v'}]}}, 1)
        self.assertEqual(shape, [['_id', 'int'], ['owner', 'object'],
                                 ['expires_at', 'long'], ['holds', 'array']])
        self.assertEqual(self.evaluate({'$map': {'input': '$holds', 'as': 'h',
                                                 'in': {'$eq': ['$$h', 'a']}}}, 1), [True, True])
        self.assertIsNone(self.evaluate({'$map': {'input': '$holds', 'in': 1}}, 2))

    def test_set_union_of_one_array_drops_duplicates(self):
        self.assertEqual(self.evaluate({'$size': {'$setUnion': ['$holds']}}, 1), 1)
        self.assertEqual(self.evaluate({'$size': '$holds'}, 1), 2)


if __name__ == '__main__':
    unittest.main()
