"""Classic updates, upsert seeding and projections for one document.

Update operator documents (``$set``, ``$inc``, ``$pull``, ``$addToSet``,
``$setOnInsert``...) are applied by mongomock itself: the document is put
into a private, per-thread mongomock collection, updated there and read
back as SON. What mongomock does not do the way MongoDB does is here:

- seeding an upserted document from the filter: only plain equalities
  (``{f: v}``, ``{f: {$eq: v}}``, also inside a top-level ``$and`` or a
  one-clause ``$or``) seed it; a ``$or`` of several clauses seeds nothing;
- projections keep the stored document's field order (mongomock moves
  ``_id`` last);
- ``arrayFilters`` and the positional operators ``$[]`` and
  ``$[<identifier>]`` (MongoDB 3.6+), which mongomock has not: each path
  naming them is expanded here, for the document at hand, into the paths of
  the array elements it designates, and mongomock applies the operator to
  those.
"""

import copy
import re
import threading

import mongomock
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.son import SON

from mongomock.filtering import filter_applies

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


_IDENTIFIER = re.compile(r'^[a-z][a-zA-Z0-9]*$')
_POSITIONAL = re.compile(r'^\$\[(.*)\]$')


def array_filters(filters, update):
    """The update statement's arrayFilters as {identifier: filter}, checked
    against the update as MongoDB parses them (manual, "$[<identifier>]"):
    each filter's top-level fields name one identifier, an alphanumeric
    string beginning with a lowercase letter (BadValue, 2); one filter per
    identifier (FailedToParse, 9); each identifier of a path has its filter
    (BadValue, 2) and each filter is used (FailedToParse, 9); a pipeline
    update takes none (InvalidOptions, 72)."""
    if filters is None:
        filters = []
    if isinstance(update, list):
        if filters:
            raise CommandError(72, 'arrayFilters may not be specified for pipeline-style '
                               'updates')
        return {}
    if not isinstance(filters, list):
        raise CommandError(14, "BSON field 'arrayFilters' is the wrong type, expected "
                           'type array')
    table = {}
    for entry in filters:
        names = {key.split('.')[0] for key in entry} if isinstance(entry, dict) else set()
        if len(names) != 1:
            raise CommandError(9, 'Error parsing array filter :: caused by :: Expected a '
                               'single top-level field name, found %d' % len(names))
        name, = names
        if not _IDENTIFIER.match(name):
            raise CommandError(2, 'Error parsing array filter :: caused by :: The top-level '
                               'field name must be an alphanumeric string beginning with a '
                               "lowercase letter, found '%s'" % name)
        if name in table:
            raise CommandError(9, 'Found multiple array filters with the same top-level '
                               "field name %s" % name)
        table[name] = entry
    used = set()
    for fields in update.values():
        for path in (fields if isinstance(fields, dict) else {}):
            for part in path.split('.'):
                found = _POSITIONAL.match(part)
                if found and found.group(1):
                    if found.group(1) not in table:
                        raise CommandError(2, "No array filter found for identifier '%s' in "
                                           "path '%s'" % (found.group(1), path))
                    used.add(found.group(1))
    for name in table:
        if name not in used:
            raise CommandError(9, "The array filter for identifier '%s' was not used in the "
                               'update %s' % (name, dict(update)))
    return table


def _expand(value, parts, done, table):
    """The concrete paths (dotted, with indexes) that parts designate in
    value, reached by the path prefix done."""
    if not parts:
        return ['.'.join(done)]
    found = _POSITIONAL.match(parts[0])
    if found is None:
        if isinstance(value, dict):
            child = value.get(parts[0], _ABSENT)
        elif isinstance(value, list) and parts[0].isdigit() and int(parts[0]) < len(value):
            child = value[int(parts[0])]
        else:
            child = _ABSENT
        if child is _ABSENT and any(_POSITIONAL.match(p) for p in parts[1:]):
            raise CommandError(2, "The path '%s' must exist in the document in order to apply "
                               'array updates.' % '.'.join(done + parts[:1]))
        return _expand(child, parts[1:], done + parts[:1], table)
    if not isinstance(value, list):
        raise CommandError(2, 'Cannot apply array updates to non-array element %s: %r'
                           % ('.'.join(done), value))
    name, out = found.group(1), []
    for index, element in enumerate(value):
        if not name or filter_applies(table[name], {name: element}):
            out += _expand(element, parts[1:], done + [str(index)], table)
    return out


class _Absent:
    pass


_ABSENT = _Absent()


def _positional_fields(doc, fields, table):
    """An operator's fields with each $[] / $[<identifier>] path replaced by
    the concrete paths it designates in doc (none when no element matches)."""
    out = SON()
    for path, value in fields.items():
        parts = path.split('.')
        if not any(_POSITIONAL.match(p) for p in parts):
            out[path] = value
            continue
        for concrete in _expand(doc, parts, [], table):
            out[concrete] = copy.deepcopy(value)
    return out


def apply_operators(doc, update, inserting, filters=None):
    """Apply an update operator document to doc with mongomock.

    On insert, $setOnInsert joins $set; otherwise it is dropped. Since
    MongoDB 5.0 the fields of an operator are applied in lexicographic order
    (so new fields are appended in that order); they are sorted here.
    filters: array_filters()'s table, for the paths with $[...]."""
    ops = SON()
    for operator, fields in update.items():
        if operator == '$setOnInsert':
            if not inserting:
                continue
            operator = '$set'
        if isinstance(fields, dict):
            fields = _positional_fields(doc, fields, filters or {})
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
