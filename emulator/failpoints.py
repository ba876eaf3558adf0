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


class FailPoints:
    """The server's fail points (only failCommand), shared by connections."""

    def __init__(self):
        self._lock = threading.Lock()
        self._data = None
        self._mode = 'off'
        self._remaining = 0  # for {times: N}
        self._skip = 0       # for {skip: N}
        self._count = 0      # times entered, reported by configureFailPoint

    def configure(self, command):
        name = command.get('configureFailPoint')
        if name != 'failCommand':
            raise CommandError(2, 'Cannot find failpoint: %s' % name)
        mode = command.get('mode')
        data = command.get('data') or {}
        with self._lock:
            count = self._count
            if mode == 'off':
                self._mode, self._data = 'off', None
            elif mode == 'alwaysOn':
                self._mode, self._data = 'alwaysOn', data
            elif isinstance(mode, dict) and 'times' in mode:
                self._mode, self._data, self._remaining = 'times', data, int(mode['times'])
                if self._remaining <= 0:
                    self._mode = 'off'
            elif isinstance(mode, dict) and 'skip' in mode:
                self._mode, self._data, self._skip = 'skip', data, int(mode['skip'])
            else:
                raise CommandError(2, 'mode must be "alwaysOn", "off", {times: N} or {skip: N}')
            if self._mode != 'off' and not isinstance(data.get('failCommands'), list):
                self._mode, self._data = 'off', None
                raise CommandError(2, "'failCommands' must be an array of command names")
            return count

    def check(self, command_name, command, app_name):
        """The Action for this command, or None when it runs normally."""
        if command_name in NEVER_FAILED:
            return None
        with self._lock:
            data = self._data
            if self._mode == 'off' or data is None:
                return None
            if command_name not in data.get('failCommands', ()):
                return None
            if 'appName' in data and data['appName'] != app_name:
                return None
            if self._mode == 'skip':
                if self._skip > 0:
                    self._skip -= 1
                    return None
            elif self._mode == 'times':
                self._remaining -= 1
                if self._remaining <= 0:
                    self._mode, self._data = 'off', None
            self._count += 1
            return Action(data)
