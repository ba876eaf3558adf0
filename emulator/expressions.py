"""Aggregation expressions, evaluated with MongoDB 6.0's semantics.

mongomock's expression evaluator (mongomock.aggregate._Parser) does most of
the work. This subclass fixes what it gets wrong for the reservation store
(docs/design.md section 10), each fix tested in tests/test_expressions.py:

- a missing field is a value of its own: ``$eq`` of missing and null is
  false, while ``$lte``/``$lt``/``$gt``/``$gte``/``$cmp`` compare across
  types by BSON order (missing < null < numbers), with no type bracketing;
- ``$$REMOVE`` evaluates to missing, so ``$set``ting it removes the field;
- object literals keep their field order (documents compare in order) and
  array literals have their elements evaluated;
- added or fixed: ``$type``, ``$isArray``, ``$isNumber``, ``$not`` with an
  array argument, ``$max``/``$min`` across types, ``$in``, ``$setUnion`` and
  ``$filter`` on null or missing input, ``$ifNull`` with several arguments,
  ``$add`` keeping 64-bit integers, ``$$NOW``;
- ``$map`` evaluates its ``in`` with these semantics (mongomock's uses its
  own evaluator), ``$objectToArray`` keeps the document's field order;
- ``$expr`` in a query filter (find, update, delete, findAndModify) is
  evaluated here too, not by mongomock's evaluator.

Missing values travel as mongomock does: evaluating a missing field raises
KeyError, and ``value()`` turns that into the MISSING marker.
"""

import datetime
import re

from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.son import SON
from mongomock import OperationFailure
from mongomock import filtering
from mongomock import helpers
from mongomock.aggregate import _Parser

from .ordered import MISSING, compare, equal, int64_if_wide

_COMPARISONS = {
    '$eq': lambda c: c == 0, '$ne': lambda c: c != 0,
    '$gt': lambda c: c > 0, '$gte': lambda c: c >= 0,
    '$lt': lambda c: c < 0, '$lte': lambda c: c <= 0,
    '$cmp': lambda c: c,
}


def type_name(value):
    """The name ``$type`` gives a value."""
    if value is MISSING:
        return 'missing'
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'bool'
    if isinstance(value, Int64):
        return 'long'
    if isinstance(value, int):
        return 'int' if -2**31 <= value < 2**31 else 'long'
    if isinstance(value, float):
        return 'double'
    if isinstance(value, str):
        return 'string'
    if isinstance(value, dict):
        return 'object'
    if isinstance(value, list):
        return 'array'
    if isinstance(value, bytes):
        return 'binData'
    if isinstance(value, ObjectId):
        return 'objectId'
    if isinstance(value, datetime.datetime):
        return 'date'
    if isinstance(value, (Regex, re.Pattern)):
        return 'regex'
    return type(value).__name__


def truthy(value):
    """MongoDB's conversion to boolean: false, null, missing and 0 are false."""
    return value is not MISSING and helpers.mongodb_to_bool(value)


class Expression(_Parser):
    """Evaluates aggregation expressions against one document."""

    def __init__(self, document, variables=None):
        super().__init__(document, variables, ignore_missing_keys=True)

    def value(self, expression):
        """Evaluate expression; a missing result is MISSING."""
        try:
            return self.parse(expression)
        except KeyError:
            return MISSING

    def _args(self, arg, count=None):
        """Operator arguments as a list (a lone argument may omit the array)."""
        args = arg if isinstance(arg, list) else [arg]
        if count is not None and len(args) != count:
            raise OperationFailure('Expression takes exactly %d arguments. %d were passed in.'
                                   % (count, len(args)), code=16020)
        return args

    def _with(self, variables):
        merged = dict(self._user_vars)
        merged.update(variables)
        return Expression(self._doc_dict, merged)

    def parse(self, expression):
        if isinstance(expression, dict):
            if len(expression) == 1:
                operator, arg = next(iter(expression.items()))
                handler = self._HANDLERS.get(operator)
                if handler is not None:
                    return handler(self, operator, arg)
            if not any(key.startswith('$') for key in expression):
                literal = SON()
                for key, sub in expression.items():
                    value = self.value(sub)
                    if value is not MISSING:
                        literal[key] = value
                return literal
            return super().parse(expression)
        if isinstance(expression, list):
            return [None if v is MISSING else v for v in map(self.value, expression)]
        if expression == '$$REMOVE':
            raise KeyError('REMOVE')
        if expression == '$$NOW':
            now = datetime.datetime.utcnow()
            return now.replace(microsecond=now.microsecond // 1000 * 1000)
        return super().parse(expression)

    def _comparison(self, operator, arg):
        a, b = (self.value(x) for x in self._args(arg, 2))
        return _COMPARISONS[operator](compare(a, b))

    def _not(self, operator, arg):
        (x,) = self._args(arg, 1)
        return not truthy(self.value(x))

    def _and_or(self, operator, arg):
        values = (truthy(self.value(x)) for x in self._args(arg))
        return all(values) if operator == '$and' else any(values)

    def _cond(self, operator, arg):
        if isinstance(arg, dict):
            cond, then, other = arg['if'], arg['then'], arg['else']
        else:
            cond, then, other = self._args(arg, 3)
        return self.parse(then if truthy(self.value(cond)) else other)

    def _type(self, operator, arg):
        (x,) = self._args(arg, 1)
        return type_name(self.value(x))

    def _is_array(self, operator, arg):
        (x,) = self._args(arg, 1)
        return isinstance(self.value(x), list)

    def _is_number(self, operator, arg):
        (x,) = self._args(arg, 1)
        return type_name(self.value(x)) in ('int', 'long', 'double', 'Decimal128')

    def _if_null(self, operator, arg):
        args = self._args(arg)
        if len(args) < 2:
            raise OperationFailure('$ifNull needs at least two arguments', code=1257300)
        for x in args[:-1]:
            value = self.value(x)
            if value is not MISSING and value is not None:
                return value
        return self.parse(args[-1])

    def _max_min(self, operator, arg):
        args = self._args(arg)
        values = [self.value(x) for x in args]
        if len(args) == 1 and isinstance(values[0], list):
            values = values[0]
        values = [v for v in values if v is not MISSING and v is not None]
        if not values:
            return None
        best = values[0]
        for v in values[1:]:
            c = compare(v, best)
            if (c > 0) if operator == '$max' else (c < 0):
                best = v
        return int64_if_wide(best, *values)

    def _add(self, operator, arg):
        values = [self.value(x) for x in self._args(arg)]
        if any(v is MISSING or v is None for v in values):
            return None
        if any(isinstance(v, datetime.datetime) for v in values):
            return super().parse({'$add': values})
        return int64_if_wide(sum(values), *values)

    def _in(self, operator, arg):
        needle, haystack = (self.value(x) for x in self._args(arg, 2))
        if not isinstance(haystack, list):
            raise OperationFailure('$in requires an array as a second argument, found: %s'
                                   % type_name(haystack), code=40081)
        return any(equal(needle, v) for v in haystack)

    def _set_union(self, operator, arg):
        result = []
        for x in self._args(arg):
            value = self.value(x)
            if value is MISSING or value is None:
                return None
            if not isinstance(value, list):
                raise OperationFailure('All operands of $setUnion must be arrays.', code=17043)
            for item in value:
                if not any(equal(item, seen) for seen in result):
                    result.append(item)
        return result

    def _filter(self, operator, arg):
        if not isinstance(arg, dict) or 'input' not in arg or 'cond' not in arg:
            raise OperationFailure("$filter needs 'input' and 'cond'", code=28648)
        items = self.value(arg['input'])
        if items is MISSING or items is None:
            return None
        if not isinstance(items, list):
            raise OperationFailure('input to $filter must be an array not %s'
                                   % type_name(items), code=28651)
        name = arg.get('as', 'this')
        return [item for item in items
                if truthy(self._with({name: item}).value(arg['cond']))]

    def _map(self, operator, arg):
        if not isinstance(arg, dict) or 'input' not in arg or 'in' not in arg:
            raise OperationFailure("Missing 'input' or 'in' parameter to $map", code=16880)
        items = self.value(arg['input'])
        if items is MISSING or items is None:
            return None
        if not isinstance(items, list):
            raise OperationFailure('input to $map must be an array not %s'
                                   % type_name(items), code=16883)
        name = arg.get('as', 'this')
        results = (self._with({name: item}).value(arg['in']) for item in items)
        return [None if v is MISSING else v for v in results]

    def _object_to_array(self, operator, arg):
        (x,) = self._args(arg, 1)
        value = self.value(x)
        if value is MISSING or value is None:
            return None
        if not isinstance(value, dict):
            raise OperationFailure('$objectToArray requires a document input, found: %s'
                                   % type_name(value), code=40390)
        return [SON([('k', k), ('v', v)]) for k, v in value.items()]


    def _set_field(self, operator, arg):
        """$setField (MongoDB 5.0+): input with field set to value, in place
        when present, else appended; value $$REMOVE removes it; a null or
        missing input is null. field is a constant string (a $literal one
        may start with $ or hold dots: that is its purpose)."""
        if not isinstance(arg, dict):
            raise OperationFailure('$setField only supports an object as its argument',
                                   code=4161100)
        for key in arg:
            if key not in ('field', 'input', 'value'):
                raise OperationFailure('$setField found an unknown argument: %s' % key,
                                       code=4161101)
        for key, code in (('field', 4161102), ('value', 4161103), ('input', 4161109)):
            if key not in arg:
                raise OperationFailure("$setField requires '%s' to be specified" % key,
                                       code=code)
        field = arg['field']
        if isinstance(field, dict) and list(field) == ['$literal']:
            field = field['$literal']
        elif isinstance(field, str) and field.startswith('$'):
            raise OperationFailure("$setField: '%s' is a field path reference, which is not "
                                   "allowed here: did you mean {$literal: '%s'}?"
                                   % (field, field), code=4161108)
        if not isinstance(field, str):
            raise OperationFailure("$setField requires 'field' to evaluate to type String, "
                                   'but got %s' % type_name(field),
                                   code=4161106 if isinstance(field, dict) else 4161107)
        return self._set_field_of(field, self.value(arg['input']), self.value(arg['value']))

    @staticmethod
    def _set_field_of(field, source, value):
        if source is MISSING or source is None:
            return None
        if not isinstance(source, dict):
            raise OperationFailure("$setField requires 'input' to evaluate to type Object",
                                   code=4161105)
        out = SON()
        for key, sub in source.items():
            if key != field:
                out[key] = sub
            elif value is not MISSING:
                out[key] = value
        if field not in source and value is not MISSING:
            out[field] = value
        return out


def _query_expr(expression, document, ignore_missing_keys=True):
    """$expr in a query: the expression's value, as a boolean."""
    return truthy(Expression(document).value(expression))


filtering.register_parse_expression(_query_expr)


Expression._HANDLERS = dict(
    {op: Expression._comparison for op in _COMPARISONS},
    **{'$not': Expression._not, '$and': Expression._and_or, '$or': Expression._and_or,
       '$cond': Expression._cond, '$type': Expression._type,
       '$isArray': Expression._is_array, '$isNumber': Expression._is_number,
       '$ifNull': Expression._if_null, '$max': Expression._max_min,
       '$min': Expression._max_min, '$add': Expression._add, '$in': Expression._in,
       '$setUnion': Expression._set_union, '$filter': Expression._filter,
       '$map': Expression._map, '$objectToArray': Expression._object_to_array,
       '$setField': Expression._set_field})
