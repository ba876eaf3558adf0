"""MongoDB errors as Python exceptions, with the server's codes and names.

A command handler raises CommandError; the dispatcher turns it into the
reply ``{ok: 0, errmsg, code, codeName}`` a real server sends, or into a
write error inside ``writeErrors`` for the batch write commands.
"""

CODE_NAMES = {
    1: 'InternalError', 2: 'BadValue', 6: 'HostUnreachable', 7: 'HostNotFound',
    9: 'FailedToParse', 11: 'UserNotFound', 13: 'Unauthorized', 14: 'TypeMismatch',
    17: 'ProtocolError', 18: 'AuthenticationFailed', 27: 'IndexNotFound',
    64: 'WriteConcernFailed', 67: 'CannotCreateIndex', 76: 'NoReplicationEnabled',
    79: 'UnknownReplWriteConcern', 85: 'IndexOptionsConflict', 86: 'IndexKeySpecsConflict',
    100: 'UnsatisfiableWriteConcern', 334: 'MechanismUnavailable',
    20: 'IllegalOperation', 23: 'AlreadyInitialized', 26: 'NamespaceNotFound',
    43: 'CursorNotFound', 48: 'NamespaceExists', 50: 'MaxTimeMSExpired', 53: 'InvalidIdField',
    59: 'CommandNotFound', 61: 'ShardKeyNotFound', 63: 'StaleShardVersion',
    66: 'ImmutableField', 72: 'InvalidOptions', 89: 'NetworkTimeout',
    91: 'ShutdownInProgress', 112: 'WriteConflict', 150: 'StaleEpoch',
    168: 'InvalidPipelineOperator', 189: 'PrimarySteppedDown',
    262: 'ExceededTimeLimit', 9001: 'SocketException',
    10107: 'NotWritablePrimary', 11000: 'DuplicateKey',
    11600: 'InterruptedAtShutdown', 11602: 'InterruptedDueToReplStateChange',
    13435: 'NotPrimaryNoSecondaryOk', 13436: 'NotPrimaryOrSecondary',
}

# Codes the server labels RetryableWriteError on a retryable write
# (retryable-writes spec, "Determining Retryable Errors").
RETRYABLE_CODES = {6, 7, 89, 91, 134, 189, 262, 9001, 10107, 11600, 11602,
                   13435, 13436}


class CommandError(Exception):
    """A command failed with a MongoDB error code."""

    def __init__(self, code, errmsg, **extra):
        super().__init__(errmsg)
        self.code = code
        self.errmsg = errmsg
        self.extra = extra  # more reply fields, e.g. keyPattern, keyValue

    @property
    def code_name(self):
        return CODE_NAMES.get(self.code, 'Location%d' % self.code)


def bad_value(errmsg):
    return CommandError(2, errmsg)


def describe(value):
    """Render a value roughly as the server's error messages do."""
    if isinstance(value, dict):
        return '{ ' + ', '.join('%s: %s' % (k, describe(v)) for k, v in value.items()) + ' }'
    if isinstance(value, list):
        return '[ ' + ', '.join(describe(v) for v in value) + ' ]'
    if isinstance(value, str):
        return '"%s"' % value
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'true' if value else 'false'
    return str(value)


def duplicate_key(namespace, id_value):
    """E11000 for the _id index, worded like MongoDB 6.0."""
    return CommandError(
        11000,
        'E11000 duplicate key error collection: %s index: _id_ dup key: { _id: %s }'
        % (namespace, describe(id_value)),
        keyPattern={'_id': 1}, keyValue={'_id': id_value})
