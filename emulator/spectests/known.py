"""The spec tests' cases known to fail, each with its reason, and the
errors pymongo 3.11 raises on the client where a newer driver sends the
command (run.py skips a case meeting one, naming it).

Every entry is outside what the store sends or a limitation of pymongo
3.11; a disagreement with MongoDB's documented behaviour in what the store
sends is fixed in the emulator instead (emulator/spectests/README.md).
"""

# Cases that fail today, each with why: (file, description) -> reason.
PYMONGO_WCE_LABELS = (
    "pymongo 3.11 looks for a writeConcernError's RetryableWriteError label inside the "
    "writeConcernError, where 4.4+ servers (and the emulator) put it at the reply's top "
    "level, so it never retries these; mongoc reads the top level")
KNOWN = {
    ('crud/find.json', 'Find with batchSize equal to limit'):
        'pymongo 3.11 sends batchSize = limit, the specification now asks for limit + 1 '
        '(a driver\'s choice: the server answers either)',
    ('read-write-concern/default-write-concern-3.4.json',
     'Aggregate with $out omits default write concern'):
        'the emulator has no $out (Location40324, as MongoDB answers an unknown stage); '
        'the store never sends it',
    ('read-write-concern/default-write-concern-4.2.json',
     'Aggregate with $merge omits default write concern'):
        'the emulator has no $merge (Location40324, as MongoDB answers an unknown stage); '
        'the store never sends it',
    ('retryable-writes/deleteOne-errorLabels.json',
     'DeleteOne succeeds after WriteConcernError ShutdownInProgress'): PYMONGO_WCE_LABELS,
    ('retryable-writes/findOneAndDelete-errorLabels.json',
     'FindOneAndDelete succeeds after WriteConcernError ShutdownInProgress'): PYMONGO_WCE_LABELS,
    ('retryable-writes/findOneAndReplace-errorLabels.json',
     'FindOneAndReplace succeeds after WriteConcernError ShutdownInProgress'): PYMONGO_WCE_LABELS,
    ('retryable-writes/findOneAndUpdate-errorLabels.json',
     'FindOneAndUpdate succeeds after WriteConcernError ShutdownInProgress'): PYMONGO_WCE_LABELS,
    ('retryable-writes/insertOne-errorLabels.json',
     'InsertOne succeeds after WriteConcernError InterruptedAtShutdown'): PYMONGO_WCE_LABELS,
    ('retryable-writes/insertOne-errorLabels.json',
     'InsertOne succeeds after WriteConcernError InterruptedDueToReplStateChange'):
        PYMONGO_WCE_LABELS,
    ('retryable-writes/insertOne-errorLabels.json',
     'InsertOne succeeds after WriteConcernError PrimarySteppedDown'): PYMONGO_WCE_LABELS,
    ('retryable-writes/insertOne-errorLabels.json',
     'InsertOne succeeds after WriteConcernError ShutdownInProgress'): PYMONGO_WCE_LABELS,
    ('retryable-writes/insertOne-errorLabels.json',
     'InsertOne fails after multiple retryable writeConcernErrors'): PYMONGO_WCE_LABELS,
    ('retryable-writes/insertOne-serverErrors.json',
     'InsertOne succeeds after retryable writeConcernError'): PYMONGO_WCE_LABELS,
    ('retryable-writes/updateOne-errorLabels.json',
     'UpdateOne succeeds after WriteConcernError ShutdownInProgress'): PYMONGO_WCE_LABELS,
    ('retryable-writes/bulkWrite-errorLabels.json',
     'BulkWrite succeeds after WriteConcernError ShutdownInProgress'): PYMONGO_WCE_LABELS,
    ('retryable-writes/bulkWrite-serverErrors.json',
     'BulkWrite succeeds after retryable writeConcernError in first batch'): PYMONGO_WCE_LABELS,
    ('retryable-writes/insertMany-errorLabels.json',
     'InsertMany succeeds after WriteConcernError ShutdownInProgress'): PYMONGO_WCE_LABELS,
    ('retryable-writes/replaceOne-errorLabels.json',
     'ReplaceOne succeeds after WriteConcernError ShutdownInProgress'): PYMONGO_WCE_LABELS,
}

# The emulator's aggregate: the store never sends one.
NO_OUT_MERGE = ('the emulator has no $out or $merge (Location40324, as MongoDB answers an '
                'unknown stage); the store never sends aggregate')
for _file, _cases in (
        ('crud/aggregate-merge-errorResponse.json',
         ['aggregate $merge DuplicateKey error is accessible']),
        ('crud/aggregate-merge.json',
         ['Aggregate with $merge', 'Aggregate with $merge and batch size of 0',
          'Aggregate with $merge and majority readConcern',
          'Aggregate with $merge and local readConcern',
          'Aggregate with $merge and available readConcern']),
        ('crud/aggregate-out-readConcern.json',
         ['readConcern majority with out stage', 'readConcern local with out stage',
          'readConcern available with out stage']),
        ('crud/aggregate-out.json',
         ['Aggregate with $out', 'Aggregate with $out and batch size of 0']),
        ('retryable-writes/aggregate-out-merge.json',
         ['aggregate with $out does not set txnNumber',
          'aggregate with $merge does not set txnNumber'])):
    for _case in _cases:
        KNOWN[(_file, _case)] = NO_OUT_MERGE
KNOWN.update({
    ('crud/aggregate-collation.json', 'Aggregate with collation'):
        'the emulator\'s aggregate applies no collation (find, count, update, delete and '
        'findAndModify do); the store never sends aggregate',
    ('crud/db-aggregate.json', 'Aggregate with $listLocalSessions'):
        'the emulator has no aggregate on a database (BadValue 2) and no sessions to list; '
        'the store never sends it',
    ('crud/find-comment.json', 'find with comment sets comment on getMore'):
        'pymongo 3.11 sends a find\'s comment on the find only; 4.1+ repeat it on each '
        'getMore (MongoDB 4.4+ takes it there)',
})

# Errors pymongo 3.11 raises before sending a command that newer drivers
# send (the case expects the server's answer): (type name, text) -> why.
DRIVER_REFUSALS = [
    ('ConfigurationError', 'hint is unsupported for unacknowledged writes',
     'pymongo 3.11 refuses hint on an unacknowledged write before sending it'),
    ('InvalidDocument', "must not start with '$'",
     'pymongo 3.11 refuses a document key starting with $ before sending it'),
    ('InvalidDocument', "must not contain '.'",
     'pymongo 3.11 refuses a document key containing . before sending it'),
]


def driver_refusal(error):
    for type_name, text, why in DRIVER_REFUSALS:
        if type(error).__name__ == type_name and text in str(error):
            return why
    return None
