"""Classic updates, upsert seeding and projections for one document.

Update operator documents (``$set``, ``$inc``, ``$pull``, ``$addToSet``,
``$setOnInsert``...) are applied by mongomock itself: the document is put
into a private, per-thread mongomock collection, updated there and read
back as SON. What mongomock does not do the way MongoDB does is here:

- seeding an upserted document from the filter: only plain equalities
  (``{f: v}``, ``{f: {$eq: v}}``, also inside a top-level ``$and`` or a
  one-clause ``$or``) seed it; a ``$or`` of several clauses seeds nothing;
- projections keep the stored document's field order (mongomock moves
  ``_id`` last).
"""

import copy
import re
import threading

import mongomock
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.son import SON

from .errors import CommandError
from .ordered import to_son

_local = threading.local()


def _scratch():
    """This thread's private mongomock collection."""
    if not hasattr(_local, 'collection'):
        _local.collection = mongomock.MongoClient().scratch.documents
    return _local.collection


def is_equality(value):
    """True when a filter value is a plain equality (no operator, no regex)."""
    if isinstance(value, dict):
        return not any(k.startswith('$') for k in value)
    return not isinstance(value, (re.Pattern, Regex))


def equalities(query):
    """The fields a filter pins by equality, in filter order, as
    (dotted path, value) pairs. Used both to seed upserts and to find the
    shard key of a write."""
    out = []
    for key, value in query.items():
        if key == '$and' or (key == '$or' and isinstance(value, list) and len(value) == 1):
            for clause in value:
                if isinstance(clause, dict):
                    out.extend(equalities(clause))
        elif key.startswith('$'):
            continue
        elif is_equality(value):
            out.append((key, value))
        elif isinstance(value, dict) and set(value) == {'$eq'} and is_equality(value['$eq']):
            out.append((key, value['$eq']))
    return out


def seed_from_filter(query):
    """The document an upsert starts from, before its update applies."""
    doc = SON()
    for path, value in equalities(query):
        parts = path.split('.')
        target = doc
        for part in parts[:-1]:
            if not isinstance(target.get(part), dict):
                target[part] = SON()
            target = target[part]
        target[parts[-1]] = copy.deepcopy(value)
    return with_id_first(doc)


def with_id_first(doc, new_id=None):
    """doc with _id as its first field, generating one if it has none."""
    if '_id' in doc and next(iter(doc)) == '_id':
        return doc
    _id = doc['_id'] if '_id' in doc else (new_id if new_id is not None else ObjectId())
    return SON([('_id', _id)] + [(k, v) for k, v in doc.items() if k != '_id'])


def is_operator_update(update):
    keys = list(update)
    operators = [k for k in keys if k.startswith('$')]
    if operators and len(operators) != len(keys):
        raise CommandError(9, 'Unknown modifier: %s. Expected a valid update modifier or '
                           'pipeline-style update specified as an array'
                           % [k for k in keys if not k.startswith('$')][0])
    return bool(operators)


def apply_operators(doc, update, inserting):
    """Apply an update operator document to doc with mongomock.

    On insert, $setOnInsert joins $set; otherwise it is dropped. Since
    MongoDB 5.0 the fields of an operator are applied in lexicographic order
    (so new fields are appended in that order); they are sorted here."""
    ops = SON()
    for operator, fields in update.items():
        if operator == '$setOnInsert':
            if not inserting:
                continue
            operator = '$set'
        if isinstance(fields, dict):
            merged = SON(ops.get(operator, SON()))
            merged.update(fields)
            fields = SON(sorted(merged.items()))
        ops[operator] = fields
    collection = _scratch()
    collection.delete_many({})
    collection.insert_one(copy.deepcopy(doc))
    try:
        if ops:
            collection.update_one({}, ops)
        return to_son(collection.find_one({}))
    except mongomock.WriteError as error:
        raise CommandError(error.code or 9, str(error))
    except mongomock.OperationFailure as error:
        raise CommandError(error.code or 2, str(error))
    finally:
        collection.delete_many({})


def replace(doc, replacement):
    """A replacement update keeps the _id and takes everything else."""
    if '_id' in replacement and replacement['_id'] != doc['_id']:
        raise CommandError(66, "After applying the update, the (immutable) field '_id' "
                           'was found to have been altered to _id: %s' % (replacement['_id'],))
    return SON([('_id', doc['_id'])] + [(k, copy.deepcopy(v))
                                        for k, v in replacement.items() if k != '_id'])


def project(doc, projection):
    """Apply a find/findAndModify projection (inclusion or exclusion of
    fields, dotted paths allowed), keeping the document's field order."""
    if not projection or doc is None:
        return doc
    flags = {k: bool(v) for k, v in projection.items()}
    include_id = flags.pop('_id', True)
    inclusion = any(flags.values())
    if inclusion and not all(flags.values()):
        raise CommandError(31254, 'Cannot do exclusion on field in inclusion projection')

    def pick(sub, paths, inclusion):
        out = SON()
        for key, value in sub.items():
            nested = [p.split('.', 1)[1] for p in paths if p.startswith(key + '.')]
            if key in paths:
                if inclusion:
                    out[key] = copy.deepcopy(value)
            elif nested and isinstance(value, dict):
                out[key] = pick(value, nested, inclusion)
            elif not inclusion:
                out[key] = copy.deepcopy(value)
        return out

    paths = list(flags)
    if inclusion and include_id:
        paths.append('_id')
    if not inclusion and not include_id:
        paths.append('_id')
    return pick(doc, paths, inclusion)
