"""Order-sensitive BSON values: conversion, hashing and comparison.

MongoDB compares embedded documents field by field *in order*, so
``{t: "", n: "e", k: "x"}`` and ``{k: "x", n: "e", t: ""}`` are different
values. Python dicts compare without order. The emulator therefore turns
every document it receives or stores into ``bson.SON``, whose ``==`` with
another SON is order-sensitive (mongomock's matcher then inherits that), keys
its ``_id`` index with a hashable form that keeps order, and compares values
of different types by BSON's type order with "missing" below null, as
aggregation expressions do.
"""

import datetime
import numbers

from bson.codec_options import CodecOptions
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.son import SON
from sentinels import NOTHING

# mongomock's marker for a missing field; the emulator uses the same one.
MISSING = NOTHING

# Decode BSON into SON so that field order survives and compares.
CODEC_OPTIONS = CodecOptions(document_class=SON)


def to_son(value):
    """Return a deep copy of value with every mapping turned into SON."""
    if isinstance(value, dict):
        return SON([(k, to_son(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return [to_son(v) for v in value]
    return value


def id_key(value):
    """A hashable key for an _id that is equal exactly when MongoDB's _id
    index considers two values equal: embedded documents by ordered fields,
    numbers by numeric value (1 == 1.0 == Int64(1)), booleans apart from
    numbers."""
    if isinstance(value, dict):
        return ('object', tuple((k, id_key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ('array', tuple(id_key(v) for v in value))
    if isinstance(value, bool):
        return ('bool', value)
    if isinstance(value, numbers.Number):
        return ('number', value)
    if value is None:
        return ('null',)
    try:
        hash(value)
    except TypeError:
        return (type(value).__name__, repr(value))
    return (type(value).__name__, value)


# BSON comparison order of types
# (https://www.mongodb.com/docs/manual/reference/bson-type-comparison-order/).
def type_rank(value):
    """The rank of value's type in BSON comparison order; missing is lowest."""
    if value is MISSING:
        return 0
    if value is None:
        return 2
    if isinstance(value, bool):
        return 8
    if isinstance(value, numbers.Number):
        return 3
    if isinstance(value, str):
        return 4
    if isinstance(value, dict):
        return 5
    if isinstance(value, (list, tuple)):
        return 6
    if isinstance(value, (bytes, bytearray)):
        return 7
    if isinstance(value, ObjectId):
        return 7.5
    if isinstance(value, datetime.datetime):
        return 9
    return 10


def _sign(a, b):
    return (a > b) - (a < b)


def compare(a, b):
    """Compare two BSON values: -1, 0 or 1, across types by BSON order."""
    ra, rb = type_rank(a), type_rank(b)
    if ra != rb:
        return _sign(ra, rb)
    if a is MISSING or a is None:
        return 0
    if isinstance(a, dict):
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            c = _sign(type_rank(va), type_rank(vb)) or _sign(ka, kb) or compare(va, vb)
            if c:
                return c
        return _sign(len(a), len(b))
    if isinstance(a, (list, tuple)):
        for x, y in zip(a, b):
            c = compare(x, y)
            if c:
                return c
        return _sign(len(a), len(b))
    if isinstance(a, (bytes, bytearray)) and len(a) != len(b):
        return _sign(len(a), len(b))
    try:
        return _sign(a, b)
    except TypeError:
        return _sign(repr(a), repr(b))


def equal(a, b):
    """BSON equality: order-sensitive for documents, missing equals only
    missing, 1 equals 1.0 but not true."""
    return compare(a, b) == 0


def int64_if_wide(value, *operands):
    """Keep MongoDB's integer widths: a sum or maximum involving a long is a
    long, and so is any integer too wide for an int."""
    if isinstance(value, int) and not isinstance(value, (bool, Int64)):
        if any(isinstance(o, Int64) for o in operands) or not -2**31 <= value < 2**31:
            return Int64(value)
    return value
