"""Index metadata: createIndexes, listIndexes, dropIndexes.

The emulator keeps each collection's index specifications as MongoDB lists
them, but does not build them: queries scan (the ``_id`` index aside), which
gives the same answers. What an index decides is modelled: the ``_id``
index is unique, and shardCollection of a non-empty collection needs an
index that starts with the shard key (sharding.py). A unique index on
other fields would change what writes succeed, so the emulator refuses to
create one rather than ignore it.
"""

from bson.son import SON

from .errors import CommandError, describe

ID_INDEX = SON([('v', 2), ('key', SON([('_id', 1)])), ('name', '_id_')])
_PLUGINS = {'hashed'}


def default_name(key):
    """The name MongoDB and the drivers give an index: field_value_..."""
    return '_'.join('%s_%s' % (field, int(v) if isinstance(v, float) and v == int(v) else v)
                    for field, v in key.items())


def _same_value(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return float(a) == float(b)


def same_key(a, b):
    return list(a) == list(b) and all(_same_value(a[f], b[f]) for f in a)


def starts_with(index_key, prefix):
    """Does the index key pattern start with prefix (same fields, same
    directions or types, in order)?"""
    fields = list(index_key)[:len(prefix)]
    return fields == list(prefix) and all(_same_value(index_key[f], prefix[f]) for f in prefix)


def validate(spec):
    """A checked copy of one createIndexes specification."""
    if not isinstance(spec, dict):
        raise CommandError(14, 'The elements of the \'indexes\' array must be objects')
    key, name = spec.get('key'), spec.get('name')
    if not isinstance(key, dict) or not key:
        raise CommandError(67, 'Index keys cannot be empty.')
    if not isinstance(name, str) or not name:
        raise CommandError(9, 'Error in specification %s :: caused by :: The \'name\' field '
                           'is a required property of an index specification' % describe(spec))
    for field, value in key.items():
        if isinstance(value, str):
            if value not in _PLUGINS:
                raise CommandError(67, 'Unknown index plugin \'%s\' (the emulator builds '
                                   'ascending, descending and hashed indexes)' % value)
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value == 0:
            raise CommandError(67, 'Values in v:2 index key pattern cannot be of type %s. '
                               'Only numbers > 0, numbers < 0, and strings are allowed.'
                               % type(value).__name__)
    if spec.get('unique') and not same_key(key, {'_id': 1}):
        raise CommandError(67, 'the emulator does not build unique indexes other than _id')
    index = SON([('v', 2), ('key', SON(key)), ('name', name)])
    for option, value in spec.items():
        if option not in ('key', 'name', 'v', 'ns'):
            index[option] = value
    return index


def add(existing, specs):
    """The index list after createIndexes of specs (checked)."""
    indexes = list(existing)
    for spec in specs:
        index = validate(spec)
        same_name = [i for i in indexes if i['name'] == index['name']]
        same_pattern = [i for i in indexes if same_key(i['key'], index['key'])]
        if same_name:
            if not same_key(same_name[0]['key'], index['key']):
                raise CommandError(86, 'An existing index has the same name as the requested '
                                   'index. Requested index: %s, existing index: %s'
                                   % (describe(index), describe(same_name[0])))
            continue
        if same_pattern:
            raise CommandError(85, 'Index already exists with a different name: %s'
                               % same_pattern[0]['name'])
        indexes.append(index)
    return indexes


def remove(existing, which):
    """The index list after dropIndexes of which (a name, a key pattern,
    "*" or a list of names)."""
    if which == '*':
        return [i for i in existing if i['name'] == '_id_']
    names = which if isinstance(which, list) else [which]
    indexes = list(existing)
    for target in names:
        if isinstance(target, dict):
            matches = [i for i in indexes if same_key(i['key'], target)]
        else:
            matches = [i for i in indexes if i['name'] == target]
        if not matches:
            raise CommandError(27, 'index not found with name [%s]' % (
                describe(target) if isinstance(target, dict) else target))
        if matches[0]['name'] == '_id_':
            raise CommandError(72, 'cannot drop _id index')
        indexes.remove(matches[0])
    return indexes
