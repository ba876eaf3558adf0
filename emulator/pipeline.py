"""Update pipelines: an update given as an array of aggregation stages.

``update`` and ``findAndModify`` accept such a pipeline since MongoDB 4.2,
with the stages ``$set``/``$addFields``, ``$unset``, ``$project`` and
``$replaceRoot``/``$replaceWith``. mongomock has no pipeline updates (and its
``$addFields`` cannot remove a field), so this module applies those stages to
one document with the expressions of expressions.py. Field order follows
MongoDB: a changed field keeps its place, a new one goes to the end, ``_id``
stays first and may not change. The same stages also serve the ``aggregate``
command (see run_stage).
"""

import copy

from bson.son import SON
from mongomock import OperationFailure

from .errors import CommandError
from .expressions import Expression, type_name
from .ordered import MISSING, equal, to_son


def _is_literal_object(spec):
    return isinstance(spec, dict) and spec and not any(k.startswith('$') for k in spec)


def _set_path(doc, parts, value):
    """Set doc[a][b]... = value, creating embedded documents on the way;
    a MISSING value removes the field."""
    head = parts[0]
    if len(parts) == 1:
        if value is MISSING:
            doc.pop(head, None)
        else:
            doc[head] = value
        return
    child = doc.get(head)
    if not isinstance(child, dict):
        if value is MISSING:
            return
        child = doc[head] = SON()
    _set_path(child, parts[1:], value)


def _add_fields(doc, spec, expression, target):
    """$set/$addFields: an object literal merges into an embedded document,
    any other expression replaces the field (missing removes it)."""
    for path, sub in spec.items():
        parts = path.split('.')
        if _is_literal_object(sub):
            child = target
            for part in parts:
                if not isinstance(child.get(part), dict):
                    child[part] = SON()
                child = child[part]
            _add_fields(doc, sub, expression, child)
        else:
            _set_path(target, parts, expression.value(sub))


def _unset(doc, spec):
    paths = [spec] if isinstance(spec, str) else spec
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise OperationFailure('$unset specification must be a string or an array of strings',
                               code=31002)
    for path in paths:
        _set_path(doc, path.split('.'), MISSING)
    return doc


def _get_path(doc, parts):
    for part in parts:
        if not isinstance(doc, dict) or part not in doc:
            return MISSING
        doc = doc[part]
    return doc


def _project(doc, spec):
    """$project: inclusion (with computed fields) or exclusion; _id is kept
    unless excluded."""
    flags = {k: v for k, v in spec.items()
             if isinstance(v, (bool, int, float)) and not isinstance(v, dict)}
    excluded = [k for k, v in flags.items() if not v]
    included = [k for k, v in flags.items() if v]
    computed = {k: v for k, v in spec.items() if k not in flags}
    if not included and not computed:
        out = copy.deepcopy(doc)
        for path in excluded:
            _set_path(out, path.split('.'), MISSING)
        return out
    if [k for k in excluded if k != '_id']:
        raise OperationFailure('Invalid $project :: caused by :: Cannot do exclusion on '
                               'field %s in inclusion projection' % excluded[0], code=31254)
    out = SON()
    keep = set(p.split('.')[0] for p in included)
    if '_id' not in excluded:
        keep.add('_id')
    for key, value in doc.items():
        if key in keep:
            nested = [p.split('.', 1)[1] for p in included if p.startswith(key + '.')]
            if nested and isinstance(value, dict):
                out[key] = _project(value, {p: 1 for p in nested} | {'_id': 0})
            else:
                out[key] = copy.deepcopy(value)
    expression = Expression(doc)
    for path, sub in computed.items():
        _set_path(out, path.split('.'), expression.value(sub))
    return out


def _replace_root(doc, new_root):
    value = Expression(doc).value(new_root)
    if not isinstance(value, dict):
        raise OperationFailure("'newRoot' expression must evaluate to an object, but resulting "
                               'value was: %s. Type of resulting value: \'%s\'.'
                               % (value, type_name(value)), code=40228)
    return to_son(value)


def run_stage(doc, name, spec):
    """Apply one update stage to doc; returns the new document."""
    if name in ('$set', '$addFields'):
        if not isinstance(spec, dict) or not spec:
            raise OperationFailure('Invalid %s :: caused by :: specification must be an object'
                                   % name, code=40272)
        out = copy.deepcopy(doc)
        _add_fields(doc, spec, Expression(doc), out)
        return out
    if name == '$unset':
        return _unset(copy.deepcopy(doc), spec)
    if name == '$project':
        return _project(doc, spec)
    if name == '$replaceRoot':
        if not isinstance(spec, dict) or 'newRoot' not in spec:
            raise OperationFailure("no newRoot specified for the $replaceRoot stage", code=40231)
        return _replace_root(doc, spec['newRoot'])
    if name == '$replaceWith':
        return _replace_root(doc, spec)
    raise CommandError(72, '%s is not allowed to be used within an update' % name)


UPDATE_STAGES = ('$set', '$addFields', '$unset', '$project', '$replaceRoot', '$replaceWith')


def apply_pipeline(doc, pipeline):
    """Run an update pipeline on doc (which has its _id) and return the new
    document. The _id must not change; if a stage drops it, it comes back
    first, as on the server."""
    original_id = doc['_id']
    for stage in pipeline:
        if not isinstance(stage, dict) or len(stage) != 1:
            raise CommandError(40323, 'A pipeline stage specification object must contain '
                               'exactly one field.')
        (name, spec), = stage.items()
        doc = run_stage(doc, name, spec)
    if '_id' not in doc:
        doc = SON([('_id', original_id)] + list(doc.items()))
    elif not equal(doc['_id'], original_id):
        raise CommandError(66, "Performing an update on the path '_id' would modify the "
                           "immutable field '_id'")
    return doc
