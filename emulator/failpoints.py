"""MongoDB's ``failCommand`` fail point, for fault tests.

``{configureFailPoint: "failCommand", mode, data}`` as documented in the
server wiki ("The failCommand fail point"): mode is ``"alwaysOn"``,
``"off"``, ``{times: N}`` or ``{skip: N}``; data names the ``failCommands``
it applies to (only those: ``hello``/``isMaster`` are never failed unless
listed, ``configureFailPoint`` never), optionally ``appName`` (only
connections whose handshake gave that application name), and what to do:
``blockConnection`` with ``blockTimeMS`` (wait, then go on), then
``closeConnection`` (drop the socket without a reply), else ``errorCode``
(answer ``{ok: 0, code, errmsg, codeName}`` without running the command,
with ``errorLabels`` as the server adds them), else ``writeConcernError``
(run the command, then attach the error, labelled the same way: the
retryable-writes spec tests retry a write after a ShutdownInProgress
writeConcernError and expect it applied once).

``onPrimaryTransactionalWrite`` (the server's fail point the
retryable-writes tests use) acts on retryable writes only (a write command
with ``lsid`` and ``txnNumber``), with the same modes: by default
(``closeConnection`` true) the write is committed, its retry record kept,
and the connection closed without a reply, so the driver's retry is
answered from the record. ``failBeforeCommitExceptionCode`` stops the write
before it commits: nothing is applied, and the command answers that code
(a write error of its first statement for insert, update and delete, the
command's error for findAndModify), or, with ``closeConnection``, nothing
at all. The server counts the fail point per statement; the emulator per
command (the same for the one-statement writes of the retryable-writes
tests and of the store).
"""

import threading

from .errors import CODE_NAMES, RETRYABLE_CODES, CommandError

WRITE_COMMANDS = {'insert', 'update', 'delete', 'findAndModify', 'findandmodify'}
NEVER_FAILED = {'configureFailPoint'}


class Action:
    """What the fail point does to one command."""

    def __init__(self, data):
        self.block_ms = data.get('blockTimeMS', 0) if data.get('blockConnection') else 0
        self.close = bool(data.get('closeConnection'))
        self.error_code = data.get('errorCode')
        self.error_labels = data.get('errorLabels')
        self.write_concern_error = data.get('writeConcernError')

    def error_reply(self, command_name, command):
        """The reply for errorCode, or None."""
        if self.error_code is None:
            return None
        reply = {'ok': 0, 'errmsg': "Failing command via 'failCommand' failpoint",
                 'code': self.error_code,
                 'codeName': CODE_NAMES.get(self.error_code, 'Location%d' % self.error_code)}
        labels = self.labels_for(self.error_code, command_name, command)
        if labels:
            reply['errorLabels'] = labels
        return reply

    def labels_for(self, code, command_name, command):
        """The errorLabels of a reply failing with code: the fail point's
        own, else RetryableWriteError for a retryable code on a retryable
        write (the server labels a writeConcernError's code the same way)."""
        if self.error_labels is not None:
            return list(self.error_labels)
        if code in RETRYABLE_CODES and retryable_write(command_name, command):
            return ['RetryableWriteError']
        return []

    def attach_write_concern_error(self, reply, command_name, command):
        """Adds the writeConcernError (and its labels) to a reply of a
        command that ran."""
        wce = self.write_concern_error
        reply['writeConcernError'] = wce
        code = wce.get('code') if isinstance(wce, dict) else None
        labels = self.labels_for(code, command_name, command)
        if labels:
            reply['errorLabels'] = labels


def retryable_write(command_name, command):
    return command_name in WRITE_COMMANDS and 'txnNumber' in command and \
        command.get('autocommit', True) is not False


class FailPoint:
    """One fail point's mode and data."""

    def __init__(self):
        self.data = None
        self.mode = 'off'
        self.remaining = 0  # for {times: N}
        self.skip = 0       # for {skip: N}
        self.count = 0      # times entered, reported by configureFailPoint

    def configure(self, mode, data):
        if mode == 'off':
            self.mode, self.data = 'off', None
        elif mode == 'alwaysOn':
            self.mode, self.data = 'alwaysOn', data
        elif isinstance(mode, dict) and 'times' in mode:
            self.mode, self.data, self.remaining = 'times', data, int(mode['times'])
            if self.remaining <= 0:
                self.mode = 'off'
        elif isinstance(mode, dict) and 'skip' in mode:
            self.mode, self.data, self.skip = 'skip', data, int(mode['skip'])
        else:
            raise CommandError(2, 'mode must be "alwaysOn", "off", {times: N} or {skip: N}')

    def enter(self):
        """The data when the fail point fires for this command (counting
        it), or None."""
        data = self.data
        if self.mode == 'off' or data is None:
            return None
        if self.mode == 'skip':
            if self.skip > 0:
                self.skip -= 1
                return None
        elif self.mode == 'times':
            self.remaining -= 1
            if self.remaining <= 0:
                self.mode, self.data = 'off', None
        self.count += 1
        return data


class FailPoints:
    """The server's fail points (failCommand, onPrimaryTransactionalWrite),
    shared by connections."""

    NAMES = ('failCommand', 'onPrimaryTransactionalWrite')

    def __init__(self):
        self._lock = threading.Lock()
        self._points = {name: FailPoint() for name in self.NAMES}

    def configure(self, command):
        name = command.get('configureFailPoint')
        if name not in self._points:
            raise CommandError(2, 'Cannot find failpoint: %s' % name)
        point = self._points[name]
        data = command.get('data') or {}
        with self._lock:
            count = point.count
            point.configure(command.get('mode'), data)
            if name == 'failCommand' and point.mode != 'off' and \
                    not isinstance(data.get('failCommands'), list):
                point.mode, point.data = 'off', None
                raise CommandError(2, "'failCommands' must be an array of command names")
            return count

    def check(self, command_name, command, app_name):
        """The failCommand Action for this command, or None when it runs
        normally."""
        if command_name in NEVER_FAILED:
            return None
        with self._lock:
            point = self._points['failCommand']
            data = point.data
            if point.mode == 'off' or data is None:
                return None
            if command_name not in data.get('failCommands', ()):
                return None
            if 'appName' in data and data['appName'] != app_name:
                return None
            data = point.enter()
            return Action(data) if data is not None else None

    def check_transactional_write(self, command_name, command):
        """onPrimaryTransactionalWrite for a retryable write about to be
        applied: None, or (close the connection, error code that stops
        the write before it commits, or None)."""
        if not retryable_write(command_name, command):
            return None
        with self._lock:
            data = self._points['onPrimaryTransactionalWrite'].enter()
        if data is None:
            return None
        close = data.get('closeConnection', True)
        code = data.get('failBeforeCommitExceptionCode')
        return bool(close), (int(code) if code is not None else None)
