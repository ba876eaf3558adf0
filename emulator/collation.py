"""Collection options kept by ``create``, and a collection's default collation.

MongoDB's ``create`` takes options (``collation``, ``validator``,
``capped``, ``timeseries``, ...) that ``listCollections`` reports back in
each collection's ``options`` field. The emulator keeps the documented ones
as given, filling in what the server fills in (a collation's defaults, a
time series' granularity), checks the few rules the server checks at
create (``capped`` needs ``size``, ``timeseries`` needs ``timeField``), and
lets the rest of the command (``writeConcern``, ``lsid``, ``$db``...) go.

Of those options only the default collation changes answers here: the
``_id`` index and every query on the collection compare strings by it
(MongoDB manual, "Collation"), unless the command names a collation of
its own (store.py's ``Collection.matching``). ICU is not modelled: strength 1 compares
base letters (case and diacritics ignored), strength 2 ignores case
(diacritics count), strength 3 and above compare strings as given;
``caseLevel: true`` makes case count at strengths 1 and 2. Both sides of a
comparison are folded, so ``{_id: "ANN"}`` finds ``"ann"`` and the two
cannot both be ``_id``\\s. Operator arguments that are not values
(``$regex``, ``$type``, ``$expr``...) are left as they are; a ``$regex``
then sees the folded strings (MongoDB's sees them as stored: a known
difference). Sorting is not collated. Validators, capped sizes and
time-series buckets are kept and listed, not enforced.
"""

import unicodedata

from bson.son import SON

from .errors import CommandError

# The create options MongoDB lists, in the order it accepts them.
OPTION_NAMES = ('capped', 'size', 'max', 'timeseries', 'expireAfterSeconds',
                'clusteredIndex', 'changeStreamPreAndPostImages', 'storageEngine',
                'validator', 'validationLevel', 'validationAction', 'indexOptionDefaults',
                'viewOn', 'pipeline', 'collation', 'encryptedFields')

# A collation as listCollections shows it: the given fields over ICU's
# defaults (MongoDB manual, "Collation", "Collation Document").
COLLATION_DEFAULTS = (('locale', None), ('caseLevel', False), ('caseFirst', 'off'),
                      ('strength', 3), ('numericOrdering', False),
                      ('alternate', 'non-ignorable'), ('maxVariable', 'punct'),
                      ('normalization', False), ('backwards', False), ('version', '57.1'))

# Query operators whose argument is not a value compared with the field.
_NOT_VALUES = {'$regex', '$options', '$type', '$exists', '$size', '$mod', '$where',
               '$expr', '$jsonSchema', '$text', '$bitsAllSet', '$bitsAnySet',
               '$bitsAllClear', '$bitsAnyClear'}


def create_options(command):
    """The options a create command gives its collection, as
    listCollections reports them (raises CommandError for what MongoDB
    refuses)."""
    options = SON()
    for name in OPTION_NAMES:
        if name in command:
            options[name] = command[name]
    if 'validator' in options:
        options.setdefault('validationLevel', 'strict')
        options.setdefault('validationAction', 'error')
    if options.get('capped') and 'size' not in options:
        raise CommandError(72, "the 'size' field is required when 'capped' is true")
    if 'timeseries' in options:
        series = options['timeseries']
        if not isinstance(series, dict) or not isinstance(series.get('timeField'), str):
            raise CommandError(40414, "BSON field 'create.timeseries.timeField' is missing "
                                      "but a required field")
        filled = SON(series)
        filled.setdefault('granularity', 'seconds')
        filled.setdefault('bucketMaxSpanSeconds', 3600)
        options['timeseries'] = filled
    if 'collation' in options:
        collation = full_collation(options['collation'])
        if collation is None:
            del options['collation']  # {locale: "simple"} is no collation
        else:
            options['collation'] = collation
    return options


def full_collation(spec):
    """The collation document with its defaults, or None for simple."""
    if not isinstance(spec, dict) or not isinstance(spec.get('locale'), str):
        raise CommandError(40414, "BSON field 'collation.locale' is missing but a required "
                                  "field")
    if spec['locale'] == 'simple':
        return None
    strength = spec.get('strength', 3)
    if strength not in (1, 2, 3, 4, 5):
        raise CommandError(2, 'collation strength must be an integer from 1 to 5, '
                              'found: %r' % (strength,))
    full = SON()
    for field, default in COLLATION_DEFAULTS:
        full[field] = spec.get(field, default)
    return full


def collection_type(options):
    if 'viewOn' in options:
        return 'view'
    if 'timeseries' in options:
        return 'timeseries'
    return 'collection'


def folder(collation):
    """The function that maps a string to the form strings equal under
    collation share, or None when collation compares strings as given."""
    if not collation or collation.get('strength', 3) >= 3:
        return None
    strength = collation['strength']
    keep_case = bool(collation.get('caseLevel'))

    def fold(text):
        if strength == 1:
            text = ''.join(c for c in unicodedata.normalize('NFD', text)
                           if not unicodedata.combining(c))
        text = unicodedata.normalize('NFC', text)
        return text if keep_case else text.casefold()
    return fold


def fold_value(value, fold):
    """value with every string in it folded (field names kept)."""
    if isinstance(value, str):
        return fold(value)
    if isinstance(value, dict):
        return SON((k, fold_value(v, fold)) for k, v in value.items())
    if isinstance(value, list):
        return [fold_value(v, fold) for v in value]
    return value


def fold_query(query, fold):
    """A query with the values it compares folded, operator arguments that
    are not values left alone."""
    if isinstance(query, dict):
        return SON((k, v if k in _NOT_VALUES else fold_query(v, fold))
                   for k, v in query.items())
    if isinstance(query, list):
        return [fold_query(v, fold) for v in query]
    if isinstance(query, str):
        return fold(query)
    return query
