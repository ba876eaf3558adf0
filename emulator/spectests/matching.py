"""The unified test format's "Evaluating Matches": an expected value
against an actual one, with the operators $$exists, $$type and
$$unsetOrMatches, extra fields allowed in root-level documents only."""

from bson.int64 import Int64


class Skip(Exception):
    """Something of the format the runner does not implement."""


class Mismatch(Exception):
    """The actual value does not match the expected one."""


# -- matching (the format's "Evaluating Matches") ------------------------------

TYPES = {'double': float, 'string': str, 'object': dict, 'array': list, 'bool': bool,
         'null': type(None), 'int': int, 'long': (int, Int64)}


def is_number(value):
    return isinstance(value, (int, float, Int64)) and not isinstance(value, bool)


def match(expected, actual, path='', root=True):
    """Raises Mismatch unless actual matches expected."""
    if isinstance(expected, dict) and len(expected) == 1:
        (key, arg), = expected.items()
        if key == '$$exists':
            raise Skip('$$exists outside a document at %s' % path)
        if key == '$$unsetOrMatches':
            if actual is _UNSET:
                return
            return match(arg, actual, path, root)
        if key == '$$type':
            names = arg if isinstance(arg, list) else [arg]
            for name in names:
                if name not in TYPES:
                    raise Skip('$$type %r' % name)
                if name in ('int', 'long') and is_number(actual) and float(actual) == int(actual):
                    return
                if isinstance(actual, TYPES[name]) and not (name in ('int', 'long', 'double')
                                                           and isinstance(actual, bool)):
                    return
            raise Mismatch('%s: %r is not of type %r' % (path, actual, arg))
        if key.startswith('$$'):
            raise Skip('matching operator %s' % key)
    if actual is _UNSET:
        raise Mismatch('%s: missing, expected %r' % (path, expected))
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            raise Mismatch('%s: expected a document %r, got %r' % (path, expected, actual))
        for key, value in expected.items():
            if isinstance(value, dict) and list(value) == ['$$exists']:
                if (key in actual) != bool(value['$$exists']):
                    raise Mismatch('%s.%s: exists is %s' % (path, key, key in actual))
                continue
            match(value, actual.get(key, _UNSET), '%s.%s' % (path, key), False)
        if not root:
            extra = set(actual) - set(expected)
            if extra:
                raise Mismatch('%s: extra fields %s in %r' % (path, sorted(extra), actual))
        return
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            raise Mismatch('%s: expected %r, got %r' % (path, expected, actual))
        for i, (e, a) in enumerate(zip(expected, actual)):
            match(e, a, '%s[%d]' % (path, i), False)
        return
    if is_number(expected) and is_number(actual):
        if float(expected) != float(actual):
            raise Mismatch('%s: expected %r, got %r' % (path, expected, actual))
        return
    if expected != actual or type(expected) is bool and type(actual) is not bool:
        raise Mismatch('%s: expected %r, got %r' % (path, expected, actual))


class _Unset:
    def __repr__(self):
        return '<unset>'


_UNSET = _Unset()



# Operations whose result is an iterable of documents: each is a root-level
# document (the format's "Allowing Extra Fields in Root-level Documents").
ITERABLE_RESULTS = ('find', 'aggregate')


def match_result(op, result):
    expected, path = op['expectResult'], '%s result' % op['name']
    if op['name'] in ITERABLE_RESULTS and isinstance(expected, list) and \
            isinstance(result, list) and len(expected) == len(result):
        for i, (e, a) in enumerate(zip(expected, result)):
            match(e, a, '%s[%d]' % (path, i))
        return
    match(expected, result, path)
