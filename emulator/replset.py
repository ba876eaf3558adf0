"""A replica set of emulators: three members on three loopback ports, one
process, one model of replication.

The model (documented in emulator/README.md, "Replica set"):

- One oplog, the history of the current primary: each change the primary
  makes to its data (store.py's journal entries, and the outcome of each
  retryable write, as MongoDB keeps in config.transactions) is appended
  with the time it was made. Each member has its own data and the number
  of oplog entries it has applied; the primary has applied them all.
- A secondary applies an entry ``lag`` seconds after the primary wrote it
  (``--lag-ms``, or ``emulatorControl: "lag"``; 0 by default), and only
  while the primary that wrote it is alive: an entry a secondary has not
  received when its primary dies never reaches it.
- Write concern: ``w: N`` is acknowledged once N members have applied the
  write, ``w: "majority"`` once two of the three have (the implicit
  default of MongoDB 5.0+ on a set of three data-bearing members), ``w: 1``
  at once; ``wtimeout`` gives a writeConcernError (64) when it passes.
- Election: when there is no primary and two members are alive, after the
  election timeout the live electable member that has applied the most
  entries becomes primary with a new term (a larger ``electionId``). The
  oplog is cut to what it has applied: the entries past that point are
  rolled back, and a member holding them (the dead old primary) rebuilds
  its data from the oplog, as MongoDB's rollback does. A write acknowledged
  by a majority is on the winner, so it survives; a ``w: 1`` write not yet
  replicated is lost.
- A read with read concern "majority" (or "snapshot", "linearizable")
  sees the data up to the majority commit point, the entries a majority
  has applied: the data of the member at that point.
- ``replSetStepDown``: the primary catches up the most advanced live
  secondary at once, steps down (not electable for the given seconds) and
  hands the election to it immediately (MongoDB 4.0.2+'s election handoff).
  A primary that sees fewer than two live members steps down.
- A killed member closes its port and every connection; restarted, it
  listens on the same port as a secondary with a new topologyVersion
  processId, keeps what it had applied and catches up from the primary.
- A partitioned member is cut off from the other members while clients
  still reach it: it neither sends nor receives replication. Cut off while
  primary, it keeps acting as primary (its own term, its own electionId)
  for ``notice`` seconds (MongoDB's electionTimeoutMillis, 10 s by default;
  ``emulatorControl: "partition"`` takes ``noticeMS``), taking writes into
  a private history the others never see; ``w: 1`` is acknowledged, a
  majority wait runs into its wtimeout (64) or, once the member steps
  down, PrimarySteppedDown (189), as MongoDB's replication waiters do. Meanwhile the other two
  elect a primary of a larger term. When the partition heals, the member's
  private history is rolled back (its data rebuilt from the majority's
  oplog up to the point they share) and it catches up as a secondary;
  when no election happened in between, its history joins the oplog
  instead, as nothing diverged.

All members' data share one lock, so every change, replication step,
election, kill and restart is atomic with respect to the others.
"""

import threading
import time

from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.son import SON

from .errors import CommandError
from .store import Store

SET_NAME = 'rs0'
PRIMARY, SECONDARY, DOWN = 'PRIMARY', 'SECONDARY', 'DOWN'


class ReplicaSet:
    """Three Emulator members sharing one oplog."""

    def __init__(self, members=3, lag_ms=0, election_timeout_ms=300, ports=None,
                 verbose=False, **emulator_options):
        from .server import Emulator  # server imports this module
        self.lock = threading.RLock()
        self.work = threading.Condition(self.lock)        # the replicator waits here
        self.replicated = threading.Condition(self.lock)  # write concern waits here
        self.topology = threading.Condition(self.lock)    # awaitable hello waits here
        self.oplog = []  # [(monotonic time written, entry)]
        self.term = 1
        self.lag = lag_ms / 1000.0
        self.election_timeout = election_timeout_ms / 1000.0
        self.primary = None
        self.no_primary_since = None
        self.default_write_concern = None  # setDefaultRWConcern's; None: implicit majority
        self._stopping = False
        self._thread = None
        ports = list(ports or [0] * members)
        self.members = []
        for index, port in enumerate(ports):
            member = Emulator(port=port, verbose=verbose, replset=self, **emulator_options)
            member.index = index
            member.state = SECONDARY
            member.applied = 0
            member.electable_at = 0.0
            member.process_id = ObjectId()
            member.counter = 0
            member.store = Store(lock=self.lock, journal=self._journal_for(member))
            member.partitioned = False
            member.diverged = False  # its applied entries were cut by an election
            member.term = 1
            member.private = []   # a cut-off primary's writes: [(time, entry)]
            member.notice_at = None  # when a cut-off primary steps down
            self.members.append(member)
        self.primary = self.members[0]
        self.primary.state = PRIMARY

    # -- life cycle -----------------------------------------------------------

    def start(self):
        for member in self.members:
            member.start()
        self._thread = threading.Thread(target=self._run, name='replication', daemon=True)
        self._thread.start()
        return self

    def stop(self):
        with self.lock:
            self._stopping = True
            self.work.notify_all()
            self.replicated.notify_all()
            self.topology.notify_all()
        for member in self.members:
            member.stop()
        if self._thread is not None:
            self._thread.join(5)

    @property
    def hosts(self):
        return [member.address for member in self.members]

    @property
    def uri(self):
        from .server import tls_options
        return 'mongodb://%s/?replicaSet=%s%s' % (','.join(self.hosts), SET_NAME,
                                                  tls_options(self.members[0].tls, '&'))

    @property
    def majority(self):
        return len(self.members) // 2 + 1

    def member(self, which):
        """A member by index, host:port, or "primary" (None when none)."""
        if which == 'primary':
            return self.primary
        for member in self.members:
            if which in (member.index, member.address):
                return member
        raise CommandError(2, 'no member %r in the replica set' % (which,))

    # -- the oplog ----------------------------------------------------------------

    def _journal_for(self, member):
        def journal(entry):
            if member.partitioned and member.state == PRIMARY:
                member.private.append((time.monotonic(), entry))
                return
            if member is not self.primary:
                raise CommandError(10107, 'not primary')
            self.oplog.append((time.monotonic(), entry))
            member.applied = len(self.oplog)
            self.work.notify_all()
        return journal

    def record_retry(self, member, key, reply):
        """The outcome of a retryable write, replicated like the data."""
        if member.state == PRIMARY:
            member.store.journal(('retry', key, reply))
            member.remember_retry(key, reply)

    def _apply(self, member, entry):
        if entry[0] == 'retry':
            member.remember_retry(entry[1], entry[2])
        else:
            member.store.apply(entry)

    def _catch_up(self, member, now=None):
        """Apply the entries due (all of them when now is None) to member;
        returns when the next one falls due, or None."""
        while member.applied < len(self.oplog):
            written, entry = self.oplog[member.applied]
            if now is not None and written + self.lag > now:
                return written + self.lag
            self._apply(member, entry)
            member.applied += 1
        return None

    def _replicate(self, now):
        """One replication step (lock held); returns the next due time."""
        due = None
        primary = self.primary
        if primary is None:
            return None
        progressed = False
        for member in self.members:
            if member is primary or member.state == DOWN or member.partitioned:
                continue
            before = member.applied
            next_due = self._catch_up(member, now)
            progressed |= member.applied != before
            if next_due is not None and (due is None or next_due < due):
                due = next_due
        if progressed:
            self.replicated.notify_all()
        return due

    def _run(self):
        with self.lock:
            while not self._stopping:
                now = time.monotonic()
                due = self._replicate(now)
                self._check_primary(now)
                wait = 0.05 if due is None else max(0.0, min(0.05, due - now))
                self.work.wait(wait)

    # -- elections ------------------------------------------------------------

    def _alive(self):
        """The live members on the majority's side of any partition."""
        return [m for m in self.members if m.state != DOWN and not m.partitioned]

    def _changed(self):
        """Every member's hello changes: wake awaitable hellos and waiters."""
        for member in self.members:
            member.counter += 1
        self.topology.notify_all()
        self.replicated.notify_all()
        self.work.notify_all()

    def _check_primary(self, now):
        for member in self.members:
            if member.partitioned and member.state == PRIMARY and member.notice_at <= now:
                member.state = SECONDARY  # it has noticed it sees no majority
                self._changed()
        alive = self._alive()
        if self.primary is not None and len(alive) < self.majority:
            self.primary.state = SECONDARY  # it cannot see a majority
            self.primary = None
            self.no_primary_since = now
            self._changed()
        if self.primary is not None or len(alive) < self.majority:
            return
        if self.no_primary_since is None:
            self.no_primary_since = now
        if now - self.no_primary_since < self.election_timeout:
            return
        candidates = [m for m in alive if m.electable_at <= now]
        if candidates:
            self._elect(max(candidates, key=lambda m: (m.applied, -m.index)))

    def _elect(self, winner):
        cut = winner.applied
        if cut < len(self.oplog):
            del self.oplog[cut:]  # rolled back
            for member in self.members:
                if member.applied > cut and member.partitioned:
                    member.applied = cut  # rebuilt when the partition heals
                    member.diverged = True
                elif member.applied > cut:
                    self._rebuild(member, cut)
        self.term += 1
        for member in self.members:
            if member.state == PRIMARY and not member.partitioned:
                member.state = SECONDARY
        winner.state = PRIMARY
        winner.term = self.term
        self.primary = winner
        self.no_primary_since = None
        self._changed()

    def _rebuild(self, member, count):
        """Rollback: member's data becomes the first count oplog entries."""
        member.store.databases = {}
        member.clear_retries()
        member.applied = 0
        member.private = []
        member.diverged = False
        for _, entry in self.oplog[:count]:
            self._apply(member, entry)
        member.applied = count

    def partition(self, member, notice_ms=10000):
        """Cut member off from the other members (clients still reach it)."""
        with self.lock:
            if member.partitioned:
                return
            now = time.monotonic()
            self._replicate(now)  # what was due has been received
            member.partitioned = True
            member.diverged = False
            member.notice_at = now + notice_ms / 1000.0
            if member is self.primary:
                self.primary = None
                self.no_primary_since = now
            self._changed()

    def heal(self, member):
        """Reconnect member: a history the majority never saw is rolled back."""
        with self.lock:
            if not member.partitioned:
                return
            member.partitioned = False
            if member.private and not member.diverged and member.term == self.term and \
                    member.applied == len(self.oplog):
                # No election since it was cut off: nothing diverged, its
                # writes are the set's history.
                self.oplog.extend(member.private)
                member.private = []
                member.applied = len(self.oplog)
                if member.state == PRIMARY and self.primary is None:
                    self.primary = member
                    self.no_primary_since = None
            elif member.private or member.diverged:
                self._rebuild(member, member.applied)
            if member.state == PRIMARY and self.primary is not member:
                member.state = SECONDARY  # it hears of the larger term
            self._changed()

    def step_down(self, member, seconds, force=False):
        with self.lock:
            if member.state != PRIMARY:
                raise CommandError(10107, 'not primary so can\'t step down')
            now = time.monotonic()
            candidates = [m for m in self._alive() if m is not member and m.electable_at <= now
                          and not member.partitioned]
            if not candidates and not force:
                raise CommandError(262, 'No electable secondaries caught up as of %s. Please '
                                   'use the replSetStepDown command with the argument '
                                   '{force: true} to force node to step down.'
                                   % time.strftime('%Y-%m-%dT%H:%M:%S'))
            member.electable_at = now + seconds
            if candidates:
                winner = max(candidates, key=lambda m: (m.applied, -m.index))
                self._catch_up(winner)
                self.replicated.notify_all()
                self._elect(winner)
            else:
                member.state = SECONDARY
                if member is self.primary:
                    self.primary = None
                    self.no_primary_since = now
                self._changed()

    def kill(self, member):
        """The member's process dies: its port and connections close."""
        with self.lock:
            if member.state == DOWN:
                return
            now = time.monotonic()
            self._replicate(now)  # what was due has been received
            member.unlisten()
            if member is self.primary:
                self.primary = None
                self.no_primary_since = now
            member.state = DOWN
            self._changed()

    def restart(self, member):
        with self.lock:
            if member.state != DOWN:
                return
            member.state = SECONDARY
            member.process_id = ObjectId()
            member.counter = 0
            member.electable_at = 0.0
            member.reset_process_state()
            member.listen()
            self._changed()

    def set_lag(self, lag_ms):
        with self.lock:
            self.lag = lag_ms / 1000.0
            self.work.notify_all()

    # -- what the commands see --------------------------------------------------

    def hello_fields(self, member):
        with self.lock:
            reply = SON([('topologyVersion', SON([('processId', member.process_id),
                                                  ('counter', Int64(member.counter))])),
                         ('hosts', self.hosts), ('setName', SET_NAME), ('setVersion', 1),
                         ('secondary', member.state == SECONDARY)])
            if member.partitioned:
                # It knows no primary but itself, while it still is one.
                if member.state == PRIMARY:
                    reply['primary'] = member.address
            elif self.primary is not None:
                reply['primary'] = self.primary.address
            reply['me'] = member.address
            if member.state == PRIMARY:
                reply['electionId'] = ObjectId('7fffffff%016x' % member.term)
            return reply

    def await_hello(self, member, topology_version, max_await_ms):
        """An awaitable hello (SDAM, "Streaming Protocol"): wait until the
        member's topologyVersion differs from the client's, or the time is up."""
        deadline = time.monotonic() + max_await_ms / 1000.0
        with self.lock:
            while not self._stopping and member.state != DOWN:
                if (topology_version.get('processId') != member.process_id or
                        int(topology_version.get('counter', -1)) != member.counter):
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self.topology.wait(remaining)

    def wait_for_write_concern(self, member, write_concern, max_time=None):
        """Called with the lock held right after a write on member. Returns
        None when acknowledged, 'closed' when the member died, or a
        writeConcernError document (MaxTimeMSExpired, 50, when the
        command's maxTimeMS deadline, max_time, passes first)."""
        if not isinstance(write_concern, dict) or 'w' not in write_concern:
            write_concern = dict(self.default_write_concern or {}, **(write_concern or {}))
        w = write_concern.get('w', 'majority')
        if w == 'majority':
            need = self.majority
        elif isinstance(w, (int, float)) and not isinstance(w, bool):
            need = int(w)
        else:
            return _wce(79, 'UnknownReplWriteConcern',
                        'No write concern mode named \'%s\' found in replica set '
                        'configuration' % (w,))
        if need <= 0:
            return None
        if need > len(self.members):
            return _wce(100, 'UnsatisfiableWriteConcern', 'Not enough data-bearing nodes')
        if member.partitioned:
            return self._wait_cut_off(member, need, write_concern, max_time)
        optime = member.applied
        entry = self.oplog[optime - 1] if optime else None
        wtimeout = write_concern.get('wtimeout') or 0
        deadline = time.monotonic() + wtimeout / 1000.0 if wtimeout else None
        while True:
            if member.state == DOWN or self._stopping:
                return 'closed'
            rolled_back = optime and (len(self.oplog) < optime or self.oplog[optime - 1] is not entry)
            if rolled_back:
                return _wce(11602, 'InterruptedDueToReplStateChange',
                            'operation was interrupted because the node stepped down '
                            'and the write was rolled back')
            if sum(1 for m in self.members if m.applied >= optime) >= need:
                return None
            if member is not self.primary:
                return _wce(11602, 'InterruptedDueToReplStateChange',
                            'Replication state change interrupted the wait for write concern')
            error = self._wait_step(write_concern, deadline, max_time)
            if error is not None:
                return error

    def _wait_step(self, write_concern, deadline, max_time):
        """One wait for replication (lock held): the error when a time
        limit has passed, else None after waiting."""
        now = time.monotonic()
        if max_time is not None and max_time <= now and \
                (deadline is None or max_time <= deadline):
            return _wce(50, 'MaxTimeMSExpired', 'operation exceeded time limit')
        if deadline is not None and deadline <= now:
            error = _wce(64, 'WriteConcernFailed', 'waiting for replication timed out')
            error['errInfo'] = SON([('wtimeout', True),
                                    ('writeConcern', SON(write_concern))])
            return error
        limits = [t - now for t in (deadline, max_time) if t is not None]
        self.replicated.wait(min(limits) if limits else None)
        return None

    def _wait_cut_off(self, member, need, write_concern, max_time):
        """Write concern on a partitioned member: only it has the write, so
        w: 1 is met at once and anything more waits until a time limit
        passes, the member steps down, or the partition heals (rolling the
        write back)."""
        if need <= 1:
            return None
        entry = member.private[-1] if member.private else None
        wtimeout = write_concern.get('wtimeout') or 0
        deadline = time.monotonic() + wtimeout / 1000.0 if wtimeout else None
        while True:
            if member.state == DOWN or self._stopping:
                return 'closed'
            if not member.partitioned and entry is not None and \
                    any(e is entry for e in self.oplog):
                return self.wait_for_write_concern(member, write_concern, max_time)
            if not member.partitioned or member.state != PRIMARY or \
                    (entry is not None and all(e is not entry for e in member.private)):
                return _wce(189, 'PrimarySteppedDown',
                            'Primary stepped down while waiting for replication')
            error = self._wait_step(write_concern, deadline, max_time)
            if error is not None:
                return error

    def majority_store(self, member):
        """The data a read concern "majority" sees on member (lock held):
        its own up to the majority commit point, the count of entries a
        majority has applied. The member whose count is that point holds
        exactly that data."""
        ranked = sorted(self.members, key=lambda m: m.applied, reverse=True)
        point = ranked[self.majority - 1]
        return member.store if member.applied <= point.applied else point.store

    def status(self):
        with self.lock:
            return SON([
                ('set', SET_NAME), ('term', Int64(self.term)),
                ('oplogLength', len(self.oplog)), ('lagMS', int(self.lag * 1000)),
                ('members', [SON([('_id', m.index), ('name', m.address),
                                  ('stateStr', m.state), ('applied', m.applied),
                                  ('partitioned', m.partitioned)])
                             for m in self.members])])


def _wce(code, code_name, errmsg):
    return SON([('code', code), ('codeName', code_name), ('errmsg', errmsg)])
