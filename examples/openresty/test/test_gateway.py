"""The sign-up gateway in a real nginx (Debian's nginx-core with its Lua
module), against MongoDB: RESV_TEST_URI, which scripts/with-mongo sets to
MONGODB_URI or a fresh emulator. Run through `make test-nginx`, or:

    scripts/with-mongo /usr/bin/python3 examples/openresty/test/test_gateway.py [Class[.test] ...]

Each test starts its own nginx on free loopback ports (gateway.py) and
uses e-mail addresses no other test or run uses.
"""

import concurrent.futures
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from gateway import Gateway, REPO, free_port as gateway_free_port  # noqa: E402

URI = os.environ.get('RESV_TEST_URI', '')
RUN = uuid.uuid4().hex[:8]


def fresh(name):
    return '%s-%s-%s' % (name, RUN, uuid.uuid4().hex[:12])


def race(gw, pairs, timeout=15.0):
    """Signs up every (email, username) pair at once; the answers in order."""
    with concurrent.futures.ThreadPoolExecutor(len(pairs)) as pool:
        futures = [pool.submit(gw.signup, e, u, timeout=timeout) for e, u in pairs]
        return [f.result() for f in futures]


def statuses(answers):
    return sorted(status for status, _ in answers)


def sign_up_while(gw, disturb, sign_up, threads=4):
    """Calls sign_up(t, i) for i = 0, 1, ... in each of `threads` threads t
    until disturb() returns; then, once nginx has all its workers, 20
    sign-ups of new pairs. Returns their statuses and the error log."""
    stop = [False]

    def loop(t):
        i = 0
        while not stop[0]:
            sign_up(t, i)
            i += 1

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        loops = [pool.submit(loop, t) for t in range(threads)]
        try:
            disturb()
        finally:
            stop[0] = True
        for f in loops:
            f.result()
    deadline = time.monotonic() + 10
    while len(gw.worker_pids()) < gw.workers and time.monotonic() < deadline:
        time.sleep(0.05)
    after = [gw.signup(fresh('s') + '@example.com', fresh('s'))[0] for _ in range(20)]
    return after, gw.log()


def signs_up_again(gw, seconds=20):
    """Signs up new pairs, one every 50 ms, until 10 in a row answer 201 or
    `seconds` pass (workers whose store opens again on its own). Returns
    the statuses and the error log."""
    answers, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline and answers[-10:] != [201] * 10:
        answers.append(gw.signup(fresh('a') + '@example.com', fresh('a'))[0])
        time.sleep(0.05)
    return answers, gw.log()


class FailPoint:
    """MongoDB's failCommand fail point on the commands a reservation writes
    with (findAndModify for one key, update for several), on while in use."""

    def __init__(self, uri, **data):
        import pymongo
        self.client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000)
        self.data = dict(data, failCommands=['findAndModify', 'update'])

    def __enter__(self):
        self.client.admin.command('configureFailPoint', 'failCommand',
                                  mode='alwaysOn', data=self.data)
        return self

    def __exit__(self, *exc):
        self.client.admin.command('configureFailPoint', 'failCommand', mode='off')
        self.client.close()


class Emulator:
    """A private emulator, for the test that stops its server."""

    def __init__(self, port=0):
        self.port = port

    def __enter__(self):
        self.proc = subprocess.Popen(
            ['/usr/bin/python3', os.path.join(REPO, 'emulator', 'run.py'),
             '--port', str(self.port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.uri = self.proc.stdout.readline().strip()
        return self

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()  # the emulator stops at end of input
            self.proc.terminate()
            self.proc.wait(10)

    def __exit__(self, *exc):
        self.stop()
        self.proc.stdout.close()


def needs_mongo(test):
    return unittest.skipUnless(URI, 'RESV_TEST_URI is not set')(test)


class MemoryStore(unittest.TestCase):
    """One worker on the embedded memory store (demo.py --memory)."""

    def test_one_of_concurrent_signups_for_one_email_wins(self):
        email = fresh('ann') + '@example.com'
        with Gateway() as gw:
            answers = race(gw, [(email, fresh('u%d' % i)) for i in range(16)])
        self.assertEqual([201] + [409] * 15, statuses(answers))
        for status, body in answers:
            if status == 409:
                self.assertEqual(('taken', 'email'), (body['error'], body['field']))

    def test_bad_bodies_answer_400(self):
        with Gateway() as gw:
            self.assertEqual(400, gw.post('/signup', {'email': 'a@b.c'})[0])
            self.assertEqual(400, gw.request('POST', '/signup', body='{',
                                             headers={'Content-Type': 'application/json'})[0])
            self.assertEqual(201, gw.post('/signup', {'email': fresh('f') + '@b.c',
                                                      'username': fresh('f')},
                                          form=True)[0])


class FileStore(unittest.TestCase):
    """Four workers on one file store (docs/design.md section 6): the make demo set-up."""

    def setUp(self):
        import tempfile
        self.dir = tempfile.mkdtemp(prefix='resv-gateway-store-')

    def tearDown(self):
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_four_workers_give_exactly_one_winner(self):
        email = fresh('fay') + '@example.com'
        with Gateway(path=self.dir, workers=4) as gw:
            self.assertEqual(4, len(gw.worker_pids()))
            answers = race(gw, [(email, fresh('u%d' % i)) for i in range(40)])
        self.assertEqual([201] + [409] * 39, statuses(answers), answers)

    def test_workers_started_by_reloads_open_the_store_while_it_is_written(self):
        # Each new worker opens the store, which walks every page a read can
        # reach (docs/file-store.md, "Opening a store"), while the old
        # workers, draining, and the other new ones commit sign-ups. A walk
        # that took a page a commit reused for one of the snapshot's would
        # refuse a sound store: that worker would answer 503 from then on (a
        # walk that ended its read transaction before reading the pages
        # failed here in one run of two).
        for sync in ('disk', 'process'):
            store = os.path.join(self.dir, sync)
            with Gateway(path=store, workers=4, sync=sync) as gw:
                answers = []

                def sign_up(t, i):
                    tag = uuid.uuid4().hex
                    answers.append(gw.signup('r-%s@example.com' % tag, 'r-' + tag))

                def reload_5_times():
                    for _ in range(5):
                        old = set(gw.worker_pids())
                        gw.proc.send_signal(signal.SIGHUP)
                        deadline = time.monotonic() + 10
                        while time.monotonic() < deadline:
                            now = set(gw.worker_pids())
                            if len(now) == 4 and not now & old:
                                break
                            time.sleep(0.05)
                        self.assertFalse(set(gw.worker_pids()) & old, sync)
                        time.sleep(0.3)  # the new workers serve, and write

                after, log = sign_up_while(gw, reload_5_times, sign_up)
            self.assertGreater(len(answers), 20, sync)
            self.assertEqual([], [a for a in answers if a[0] != 201][:3], sync)
            self.assertEqual([201] * 20, after, sync)
            self.assertNotIn('is damaged', log, sync)
            sys.stderr.write('  %s: %d sign-ups across 5 reloads, all 201\n'
                             % (sync, len(answers)))

    def test_workers_killed_under_signups_are_replaced_and_keep_one_winner(self):
        # nginx starts a new worker in place of each one killed (SIGKILL:
        # inside a commit, holding the write gate, between a commit's meta
        # page and its publication in lock.mdb), which opens the store while
        # the others write. Every answer is 201, 409, or 502 when the worker
        # that served the account service (the same nginx) was killed; an
        # e-mail is won at most once, and once the kills stop every worker
        # serves.
        for sync in ('disk', 'process'):
            store = os.path.join(self.dir, sync)
            emails = [fresh('k%d' % i) + '@example.com' for i in range(40)]
            with Gateway(path=store, workers=4, sync=sync) as gw:
                answers, cut, kills = [], [0], [0]

                def sign_up(t, i):
                    j = t + 7 * i  # every other one a new e-mail: writes
                    email = emails[j % len(emails)] if j % 2 else fresh('n') + '@x.org'
                    try:
                        status, body = gw.signup(email, fresh('k'))
                    except (ConnectionError, http.client.HTTPException):
                        cut[0] += 1  # its worker was killed under it
                        return
                    answers.append((email, status, body))

                def kill_one_every_100_ms_for_6_s():
                    until = time.monotonic() + 6
                    while time.monotonic() < until:
                        pids = gw.worker_pids()
                        if pids:
                            os.kill(pids[kills[0] % len(pids)], signal.SIGKILL)
                            kills[0] += 1
                        time.sleep(0.1)

                after, log = sign_up_while(gw, kill_one_every_100_ms_for_6_s, sign_up)
            upstream_cut = [a for a in answers if a[1] == 502 and isinstance(a[2], dict)
                            and a[2].get('error') == 'account service failed']
            odd = [a for a in answers if a[1] not in (201, 409) and a not in upstream_cut]
            self.assertEqual([], odd[:3], sync)
            won = [a[0] for a in answers if a[1] == 201 and a[0] in emails]
            self.assertEqual(sorted(set(won)), sorted(won), sync)
            self.assertEqual([], [a for a in answers if a[1] == 409 and a[0] not in emails][:3],
                             sync)
            self.assertGreater(len(answers), 40, sync)
            self.assertEqual([201] * 20, after, sync)
            self.assertNotIn('cannot open the store', log, sync)
            sys.stderr.write('  %s: %d workers killed, %d answers (%d new e-mails), %d cut, '
                             '%d 502 (account service cut)\n'
                             % (sync, kills[0], len(answers),
                                sum(a[0] not in emails for a in answers), cut[0],
                                len(upstream_cut)))

    def test_metrics_lists_every_worker_and_counts_the_calls(self):
        email = fresh('mia') + '@example.com'
        with Gateway(path=self.dir, workers=2) as gw:
            answers = race(gw, [(email, fresh('u%d' % i)) for i in range(10)])
            self.assertEqual([201] + [409] * 9, statuses(answers))
            time.sleep(1.5)  # every worker has published since
            status, text = gw.get('/metrics')
        self.assertEqual(200, status)
        self.assertIsInstance(text, str)
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith('#'):
                name, value = line.rsplit(' ', 1)
                samples[name] = float(value)
        # One HELP and TYPE per family, whatever the number of workers.
        self.assertEqual(1, text.count('# TYPE resv_calls_total counter\n'))
        workers = {re.search(r'worker="(\d+)"', n).group(1) for n in samples}
        self.assertEqual({'0', '1'}, workers)
        def calls(op, status):
            return sum(v for n, v in samples.items()
                       if n.startswith('resv_calls_total{') and 'op="%s"' % op in n
                       and 'status="%s"' % status in n)
        # The winner reserved and confirmed its e-mail and its username in
        # one call each; each loser's reserve_all met the taken e-mail.
        self.assertEqual(1, calls('reserve_all', 'reserved'))
        self.assertEqual(1, calls('confirm_all', 'confirmed'))
        self.assertEqual(9, calls('reserve_all', 'conflict'))
        self.assertEqual(0, calls('reserve', 'reserved'))
        # The file store is one for both workers: each sees its records.
        for w in ('0', '1'):
            self.assertGreaterEqual(samples['resv_entries{worker="%s"}' % w], 2)
            self.assertEqual(0, samples['resv_jobs_waiting{worker="%s"}' % w])
            self.assertIn('resv_call_duration_seconds_bucket{worker="%s",op="reserve",le="+Inf"}' % w,
                          samples)

    def test_a_signup_stays_taken_after_a_restart(self):
        email, name = fresh('gus') + '@example.com', fresh('gus')
        with Gateway(path=self.dir, workers=2) as gw:
            self.assertEqual(201, gw.signup(email, name)[0])
        with Gateway(path=self.dir, workers=2) as gw:
            status, body = gw.signup(email, fresh('other'))
        self.assertEqual((409, 'email', 'confirmed'),
                         (status, body['field'], body['state']), body)

    def test_a_worker_whose_store_did_not_open_serves_once_recover_moved_it_aside(self):
        # The operator's path after a damaged store (docs/openresty.md): the
        # workers answer 503 naming resv recover; once it has moved the
        # store aside, they open it again on their own, without a reload.
        with Gateway(path=self.dir, workers=2, sync='process') as gw:
            self.assertEqual(201, gw.signup(fresh('ida') + '@example.com', fresh('ida'))[0])
        with open(os.path.join(self.dir, 'data.mdb'), 'r+b') as f:
            f.truncate(3 * 4096)
        with Gateway(path=self.dir, workers=2, sync='process') as gw:
            status, body = gw.signup(fresh('ida') + '@example.com', fresh('ida'))
            self.assertEqual(503, status, body)
            self.assertIn('resv recover --path %s' % self.dir, body['detail'])
            env = dict(os.environ, LUA_CPATH=os.path.join(REPO, gw.build, '?.so') + ';;',
                       LUA_PATH=os.path.join(REPO, 'lua', '?.lua') + ';;')
            out = subprocess.run([os.path.join(REPO, 'bin', 'resv'), '--path', self.dir,
                                  '--json', 'recover'], env=env, check=True, text=True,
                                 stdout=subprocess.PIPE, timeout=60).stdout
            self.addCleanup(shutil.rmtree, json.loads(out)['kept'], ignore_errors=True)
            answers, log = signs_up_again(gw)
        self.assertEqual([201] * 10, answers[-10:], answers)
        self.assertEqual(2, log.count('opened the store, which did not open before'), log)

    @unittest.skipUnless(os.geteuid() == 0, 'needs root: to run the workers as nobody')
    def test_a_worker_whose_store_path_it_may_not_reach_serves_once_it_may(self):
        # A store behind a directory the workers' user may not enter yet
        # (a volume mounted or given to them after nginx started): 503
        # naming the path; once the operator opens the way, the workers
        # open the store on their own, without a reload (docs/openresty.md).
        os.chmod(self.dir, 0o700)
        gw = Gateway(path=os.path.join(self.dir, 'store'), workers=2, sync='process',
                     user='nobody')
        gw.check_readable = lambda: None  # the point: they cannot reach it
        with gw:
            status, body = gw.signup(fresh('ivy') + '@example.com', fresh('ivy'))
            self.assertEqual(503, status, body)
            self.assertIn('invalid: path: ', body['detail'])
            os.chmod(self.dir, 0o755)
            answers, log = signs_up_again(gw)
        self.assertEqual([201] * 10, answers[-10:], answers)
        self.assertEqual(2, log.count('opened the store, which did not open before'), log)

    def test_the_memory_store_with_several_workers_does_not_open(self):
        with Gateway(workers=2) as gw:
            status, body = gw.signup(fresh('h') + '@example.com', fresh('h'))
            log = gw.log()
        self.assertEqual(503, status, body)
        self.assertIn('per_process', log)


@needs_mongo
class OnMongo(unittest.TestCase):

    def test_one_of_concurrent_signups_for_one_email_wins(self):
        email = fresh('ann') + '@example.com'
        with Gateway(uri=URI) as gw:
            answers = race(gw, [(email, fresh('u%d' % i)) for i in range(20)])
        self.assertEqual([201] + [409] * 19, statuses(answers), answers)
        taken = [b for s, b in answers if s == 409]
        self.assertTrue(all(b['field'] == 'email' and b['value'] == email for b in taken))

    def test_distinct_emails_all_succeed(self):
        with Gateway(uri=URI) as gw:
            answers = race(gw, [(fresh('e%d' % i) + '@example.com', fresh('u%d' % i))
                                for i in range(20)])
        self.assertEqual([201] * 20, statuses(answers), answers)

    def test_a_taken_username_frees_the_email(self):
        name = fresh('bob')
        email = fresh('bob') + '@example.com'
        with Gateway(uri=URI) as gw:
            self.assertEqual(201, gw.signup(fresh('x') + '@example.com', name)[0])
            status, body = gw.signup(email, name.upper())
            self.assertEqual((409, 'username'), (status, body['field']))
            # The e-mail of the sign-up whose user name clashed stays free.
            self.assertEqual(201, gw.signup(email, fresh('bob'))[0])

    def test_failing_upstream_abandons_and_the_email_is_free_again(self):
        email = fresh('carl') + '@example.com'
        with Gateway(uri=URI) as gw:
            status, body = gw.signup(email, 'fail-' + fresh('carl'))
            self.assertEqual(502, status, body)
            self.assertEqual('account service failed', body['error'])
            status, body = gw.signup(email, fresh('carl'))
            self.assertEqual(201, status, body)
            self.assertEqual(email, body['email'])

    def test_several_workers_give_exactly_one_winner(self):
        email = fresh('dora') + '@example.com'
        with Gateway(uri=URI, workers=4) as gw:
            self.assertEqual(4, len(gw.worker_pids()))
            answers = race(gw, [(email, fresh('u%d' % i)) for i in range(40)])
        self.assertEqual([201] + [409] * 39, statuses(answers), answers)

    def health_while_writes_stall(self, wait):
        """(slowest /health in ms, the sign-ups' answers) while every
        findAndModify and update stalls for 500 ms."""
        with Gateway(uri=URI, wait=wait, timeout_ms=5000) as gw:
            gw.get('/health')
            with FailPoint(URI, blockConnection=True, blockTimeMS=500):
                with concurrent.futures.ThreadPoolExecutor(4) as pool:
                    signups = [pool.submit(gw.signup, fresh('s%d' % i) + '@example.com',
                                           fresh('s%d' % i)) for i in range(4)]
                    time.sleep(0.1)  # the sign-ups now wait for the store
                    slowest = 0.0
                    waiting_seen = 0
                    for _ in range(10):
                        t0 = time.monotonic()
                        try:
                            status, body = gw.get('/health', timeout=5)
                        except TimeoutError:
                            # Only a blocked worker keeps /health 5 s (the
                            # control, whose sign-ups hold it in turn).
                            slowest = max(slowest, time.monotonic() - t0)
                            break
                        slowest = max(slowest, time.monotonic() - t0)
                        self.assertEqual(200, status)
                        waiting_seen = max(waiting_seen, body['signups'])
                        time.sleep(0.03)
                    answers = [f.result() for f in signups]
        return slowest * 1000, waiting_seen, answers

    def test_the_worker_keeps_serving_while_calls_wait(self):
        for wait in ('inbox', 'thread', 'watcher', 'backoff'):
            slowest, waiting, answers = self.health_while_writes_stall(wait)
            sys.stderr.write('  /health while 4 sign-ups wait (%s): slowest %.1f ms\n'
                             % (wait, slowest))
            self.assertEqual(4, waiting, wait)  # /health ran beside them
            # A blocked worker stalls /health for the 500 ms of the fail
            # point (the control below); 150 ms leaves room for a loaded
            # machine (58 ms seen with six builds running beside it).
            self.assertLess(slowest, 150, wait)
            self.assertEqual([201] * 4, statuses(answers), (wait, answers))

    def test_the_check_above_sees_a_blocked_worker(self):
        # The control: waiting by blocking the worker stalls /health.
        slowest, _, answers = self.health_while_writes_stall('block')
        self.assertGreater(slowest, 300)
        self.assertEqual([201] * 4, statuses(answers), answers)

    def test_a_failing_command_gives_503_and_reserves_nothing(self):
        email = fresh('erin') + '@example.com'
        with Gateway(uri=URI) as gw:
            with FailPoint(URI, errorCode=2):
                status, body = gw.signup(email, fresh('erin'))
            self.assertEqual(503, status, body)
            self.assertEqual('store unavailable', body['error'])
            self.assertIn('server', body['detail'])
            status, body = gw.signup(email, fresh('erin'))
            self.assertEqual(201, status, body)

    def test_a_stalled_store_past_the_deadline_gives_503(self):
        email = fresh('fay') + '@example.com'
        with Gateway(uri=URI, timeout_ms=300) as gw:
            with FailPoint(URI, blockConnection=True, blockTimeMS=800):
                status, body = gw.signup(email, fresh('fay'))
            self.assertEqual(503, status, body)
            self.assertIn('timeout', body['detail'])


# A slow reserve a client may walk away from, and a probe of what the
# worker still holds for such calls (resv.ngx.waiting(), after a full
# collection: a call whose request is gone counts until its job is freed).
ABORT_LOCATIONS = r"""
    location = /slow_reserve {
      lua_check_client_abort on;
      content_by_lua_block {
        local r, err = require("gateway").users():reserve(
          { namespace = "abort", key = ngx.var.arg_k }, { id = "o" }, "a", 60000)
        ngx.say(r and r.status or err)
      }
    }
    location = /held {
      content_by_lua_block {
        collectgarbage()
        collectgarbage()
        ngx.say(require("resv.ngx").waiting())
      }
    }
"""


@needs_mongo
class ClientAborts(unittest.TestCase):
    """A request its client aborts leaves nothing pinned (issue 11, finding 3)."""

    def abort(self, gw, key):
        sock = socket.create_connection(('127.0.0.1', gw.port))
        sock.sendall(('GET /slow_reserve?k=%s HTTP/1.1\r\nHost: x\r\n\r\n' % key).encode())
        time.sleep(0.02)  # the call now waits for the store
        sock.close()

    def test_aborted_requests_leave_no_job_behind(self):
        for wait in ('inbox', 'thread', 'watcher'):
            with Gateway(uri=URI, wait=wait, extra_locations=ABORT_LOCATIONS) as gw:
                with FailPoint(URI, blockConnection=True, blockTimeMS=200):
                    for i in range(24):
                        self.abort(gw, fresh('k%d' % i))
                    # 24 calls on the store's 8 threads, 200 ms each: all
                    # have ended well within a second.
                    time.sleep(1.2)
                held = int(str(gw.request('GET', '/held')[1]).strip())
                self.assertEqual(0, held, wait)
                status, body = gw.request('GET', '/slow_reserve?k=' + fresh('after'))
                self.assertEqual((200, 'reserved'), (status, str(body).strip()), wait)


FAST_LOCATION = r"""
    location = /fast_get {
      content_by_lua_block {
        local r, err = require("gateway").users():get({ namespace = "fast", key = "none" })
        ngx.say(r and r.status or err)
      }
    }
"""


def slow_reserves(gw, n, timeout=15.0):
    """Starts n slow reserves at once; returns the pool and their futures."""
    pool = concurrent.futures.ThreadPoolExecutor(n)
    futures = [pool.submit(gw.request, 'GET', '/slow_reserve?k=' + fresh('s%d' % i),
                           timeout=timeout) for i in range(n)]
    return pool, futures


@needs_mongo
class Production(unittest.TestCase):
    """Reloads and head-of-line blocking (issue 15)."""

    def fast_calls_under_stalled_ones(self, wait, stalled):
        """The slowest of 5 fast gets, in ms, while `stalled` reserves wait
        3 s each, with a pool of 4 threads for the waits."""
        with Gateway(uri=URI, wait=wait, wait_threads=4, store_threads=64,
                     extra_locations=ABORT_LOCATIONS + FAST_LOCATION) as gw:
            self.assertEqual((200, 'absent'), (gw.request('GET', '/fast_get')[0],
                                               str(gw.request('GET', '/fast_get')[1]).strip()))
            with FailPoint(URI, blockConnection=True, blockTimeMS=3000):
                pool, futures = slow_reserves(gw, stalled)
                time.sleep(0.3)  # every slow call now waits for the store
                slowest = 0.0
                for _ in range(5):
                    t0 = time.monotonic()
                    status, body = gw.request('GET', '/fast_get')
                    slowest = max(slowest, time.monotonic() - t0)
                    self.assertEqual((200, 'absent'), (status, str(body).strip()))
                answers = [f.result() for f in futures]
                pool.shutdown()
        self.assertEqual([(200, 'reserved')] * stalled,
                         [(s, str(b).strip()) for s, b in answers])
        return slowest * 1000

    def test_a_ready_answer_is_not_held_behind_slow_calls(self):
        for stalled in (4, 16):
            slowest = self.fast_calls_under_stalled_ones('inbox', stalled)
            sys.stderr.write('  fast get under %d stalled calls (inbox): slowest %.1f ms\n'
                             % (stalled, slowest))
            self.assertLess(slowest, 500, stalled)

    def test_the_check_above_sees_head_of_line_blocking(self):
        # The control: a pool thread per waiting call makes the fast calls
        # queue behind the stalled ones.
        slowest = self.fast_calls_under_stalled_ones('thread', 16)
        sys.stderr.write('  fast get under 16 stalled calls (thread): slowest %.1f ms\n'
                         % slowest)
        self.assertGreater(slowest, 500)

    def test_calls_in_timers_and_the_log_phase_answer_and_blocking_is_logged_once(self):
        locations = r"""
    location = /phases {
      content_by_lua_block {
        local users = require("gateway").users()
        package.loaded.timer_answer = nil
        assert(ngx.timer.at(0, function()
          local r, err = users:get({ namespace = "phase", key = "timer" })
          package.loaded.timer_answer = r and r.status or err
        end))
        for _ = 1, 200 do
          if package.loaded.timer_answer then break end
          ngx.sleep(0.01)
        end
        ngx.say(package.loaded.timer_answer)
      }
      log_by_lua_block {
        local r, err = require("gateway").users():get({ namespace = "phase", key = "log" })
        package.loaded.log_answer = r and r.status or err
      }
    }
    location = /log_answer {
      content_by_lua_block { ngx.say(package.loaded.log_answer) }
    }
"""
        with Gateway(uri=URI, extra_locations=locations) as gw:
            for _ in range(3):
                status, body = gw.request('GET', '/phases')
                self.assertEqual((200, 'absent'), (status, str(body).strip()))
                self.assertEqual('absent', str(gw.request('GET', '/log_answer')[1]).strip())
            log = gw.log()
        self.assertEqual(1, log.count("resv: a call in nginx's log phase cannot yield"), log)
        self.assertNotIn("timer phase cannot yield", log)

    def test_a_missing_thread_pool_is_reported_at_start_and_calls_still_answer(self):
        # Reported when init_worker opens the store, before any call; the
        # calls then wait by the watcher. With the pool: nothing said.
        with Gateway(uri=URI, wait_threads=0) as gw:
            self.assertEqual('watcher', gw.get('/health')[1]['wait'])
            self.assertEqual(1, gw.log().count(
                "resv: the thread pool cannot be used (nginx.conf has no `thread_pool resv`)"),
                gw.log())
            status, body = gw.signup(fresh('pool') + '@example.com', fresh('pool'))
            self.assertEqual(201, status, body)
            log = gw.log()
        self.assertEqual(1, log.count('the thread pool cannot be used'), log)
        with Gateway(uri=URI) as gw:
            self.assertEqual('inbox', gw.get('/health')[1]['wait'])
            status, body = gw.signup(fresh('pool') + '@example.com', fresh('pool'))
            self.assertEqual(201, status, body)
            self.assertNotIn('thread pool cannot be used', gw.log())

    def test_with_the_code_cache_off_the_lazy_store_pattern_shares_one_store(self):
        store_dir = tempfile.mkdtemp(prefix='resv-codecache-')
        try:
            location = r"""
    location = /lazy {
      lua_code_cache off;
      content_by_lua_block {
        local users = require("users").get("%s")
        if not users then return ngx.exit(503) end
        local r, err = users:reserve({ namespace = "email", key = ngx.var.arg_k },
                                     { id = ngx.var.arg_o }, "a", 60000)
        ngx.say(r and r.status or err)
      }
    }
""" % store_dir
            key = fresh('lazy')
            with Gateway(path=store_dir, extra_locations=location) as gw:
                got = [str(gw.request('GET', '/lazy?k=%s&o=%s' % (key, o))[1]).strip()
                       for o in ('ann', 'bob', 'ann')]
                log = gw.log()
            self.assertEqual(['reserved', 'conflict', 'reserved'], got, log)
            self.assertIn('lua_code_cache is off', log)
        finally:
            shutil.rmtree(store_dir, ignore_errors=True)

    def test_a_reload_or_quit_answers_every_call_in_flight(self):
        for sig, name in ((signal.SIGHUP, 'reload'), (signal.SIGQUIT, 'quit')):
            for wait in ('inbox', 'thread'):
                with Gateway(uri=URI, wait=wait, store_threads=16,
                             extra_locations=ABORT_LOCATIONS) as gw:
                    old = set(gw.worker_pids())
                    with FailPoint(URI, blockConnection=True, blockTimeMS=1000):
                        pool, futures = slow_reserves(gw, 12)
                        # Signal once all 12 wait for the store: a request
                        # nginx has not read yet is closed by a graceful
                        # exit before resv sees it (seen once under load).
                        deadline = time.monotonic() + 5
                        while (int(str(gw.request('GET', '/held')[1]).strip()) < 12
                               and time.monotonic() < deadline):
                            time.sleep(0.02)
                        t0 = time.monotonic()
                        gw.proc.send_signal(sig)
                        answers = [f.result() for f in futures]
                        pool.shutdown()
                    self.assertEqual([(200, 'reserved')] * 12,
                                     [(s, str(b).strip()) for s, b in answers], (name, wait))
                    # The old worker goes within the slowest call and a second.
                    while old & set(gw.worker_pids()) and time.monotonic() - t0 < 5:
                        time.sleep(0.05)
                    gone = time.monotonic() - t0
                    self.assertFalse(old & set(gw.worker_pids()), (name, wait))
                    self.assertLess(gone, 1.0 + 1.0, (name, wait))
                    self.assertNotIn('open socket', gw.log(), (name, wait))
                    sys.stderr.write('  %s during 12 calls (%s): answered, old worker gone '
                                     'after %.2f s\n' % (name, wait, gone))


class StoreDown(unittest.TestCase):
    """A store whose server goes away answers 503, never 201."""

    def test_server_gone_gives_503(self):
        with Emulator() as emu, Gateway(uri=emu.uri, timeout_ms=1000) as gw:
            self.assertEqual(201, gw.signup(fresh('gus') + '@example.com', fresh('gus'))[0])
            emu.stop()
            answers = race(gw, [(fresh('h%d' % i) + '@example.com', fresh('h%d' % i))
                                for i in range(5)])
            self.assertEqual([503] * 5, statuses(answers), answers)
            self.assertEqual(200, gw.get('/health')[0])

    def test_no_server_at_start_gives_503(self):
        with Emulator() as emu:
            uri = emu.uri
        with Gateway(uri=uri, timeout_ms=1000) as gw:
            status, body = gw.signup(fresh('ida') + '@example.com', fresh('ida'))
            self.assertEqual(503, status, body)
            self.assertEqual('store unavailable', body['error'])


    def test_a_store_opened_while_the_server_was_down_serves_once_it_is_up(self):
        # Opening never waits on the network (docs/design.md section 7): the worker
        # starts, answers 503 while nothing listens, and 201 as soon as the
        # server is there, with no reload: the example (which opens its
        # store in init_worker, as the README's snippet does) and a store
        # opened on first use (users.lua's pattern).
        port = gateway_free_port()
        uri = 'mongodb://127.0.0.1:%d/resv_down' % port
        snippet = r"""
    location = /snippet {
      content_by_lua_block {
        local users = package.loaded.snippet_users
        if not users then
          local resv = require "resv"
          local store, err = resv.open { uri = "%s", timeout_ms = 1000 }
          if not store then return ngx.exit(503) end
          users = assert(store:type("shop", "user"))
          package.loaded.snippet_users = users
        end
        local r, err = users:reserve({ namespace = "email", key = ngx.var.arg_k },
                                     { id = "o" }, "a", 30000)
        if not r then return ngx.exit(503) end
        ngx.say(r.status)
      }
    }
""" % uri
        with Gateway(uri=uri, timeout_ms=1000, extra_locations=snippet) as gw:
            status, body = gw.signup(fresh('jo') + '@example.com', fresh('jo'))
            self.assertEqual((503, 'store unavailable'), (status, body['error']))
            self.assertEqual(503, gw.request('GET', '/snippet?k=' + fresh('s'))[0])
            with Emulator(port=port):
                self.assertEqual(201, gw.signup(fresh('jo') + '@example.com', fresh('jo'))[0])
                status, body = gw.request('GET', '/snippet?k=' + fresh('s'))
                self.assertEqual((200, 'reserved'), (status, str(body).strip()))


class OpenedInInit(unittest.TestCase):
    """A store opened in init_by_lua* (the master, before the fork) is
    refused there, naming init_worker_by_lua*: nginx does not start."""

    def assertRefusedInInit(self, options):
        init = 'init_by_lua_block { assert(require("resv").open { %s }) }' % options
        gw = Gateway(extra_http=init)
        try:
            gw.start()
        except RuntimeError as e:
            message = str(e)
        else:
            gw.stop()
            self.fail('nginx started with a store opened in init_by_lua')
        self.assertIn('init_by_lua', message)
        self.assertIn('open it in init_worker_by_lua*', message)

    def test_the_memory_store(self):
        self.assertRefusedInInit('')

    def test_the_file_store(self):
        path = tempfile.mkdtemp(prefix='resv-gateway-init-')
        try:
            self.assertRefusedInInit('path = "%s"' % path)
        finally:
            shutil.rmtree(path, ignore_errors=True)

    @needs_mongo
    def test_a_mongodb_store(self):
        self.assertRefusedInInit('uri = "%s"' % URI)


# A module of the tests below, loaded by each worker: a file store with
# sync = "process" (its calls answer on the worker's thread), opened on
# first use, and a MongoDB store closed with calls in flight.
NONBLOCKING_LUA = r"""
local resv = require "resv"
local _M = {}
local users

local function ms_since(t0)
  ngx.update_time()
  return math.floor((ngx.now() - t0) * 1000)
end

-- GET /nb?op=reserve|get&k=KEY: "<worker pid> <ms> <status or error>".
function _M.call(path)
  if users == nil then
    local store = assert(resv.open { path = path, sync = "process", timeout_ms = 1000 })
    users = assert(store:type("shop", "nb"))
  end
  local key = { namespace = "email", key = ngx.var.arg_k }
  ngx.update_time()
  local t0 = ngx.now()
  local r, err
  if ngx.var.arg_op == "reserve" then
    r, err = users:reserve(key, { id = "o1" }, "a", 60000)
  else
    r, err = users:get(key)
  end
  ngx.say(ngx.worker.pid(), " ", ms_since(t0), " ", r and r.status or err)
end

-- GET /nb/close: 8 calls in flight to uri, then store:close():
-- "<ms close took> <the calls' answers>".
function _M.close(uri)
  local store = assert(resv.open { uri = uri, timeout_ms = 3000 })
  local t = assert(store:type("shop", "nb"))
  local threads = {}
  for i = 1, 8 do
    threads[i] = ngx.thread.spawn(function()
      return t:reserve({ namespace = "email", key = "k" .. i }, { id = "o" }, "a", 60000)
    end)
  end
  ngx.sleep(0.2) -- every call is on the dispatcher now
  ngx.update_time()
  local t0 = ngx.now()
  store:close()
  local took = ms_since(t0)
  local answers = {}
  for i = 1, 8 do
    local _, r, err = ngx.thread.wait(threads[i])
    answers[i] = r and r.status or tostring(err):match("^%a+")
  end
  ngx.say(took, " ", table.concat(answers, ","))
end

return _M
"""


class NeverBlocks(unittest.TestCase):
    """A host that must not block is never blocked: not by a writer frozen
    inside a commit, not by store:close()."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix='resv-nb-')
        os.chmod(self.dir, 0o777)  # workers may run as nobody
        self.gateway_dir = tempfile.mkdtemp(prefix='resv-nb-gw-')
        self.lua_dir = os.path.join(self.dir, 'lua')
        os.makedirs(self.lua_dir)
        os.chmod(self.lua_dir, 0o755)
        with open(os.path.join(self.lua_dir, 'never_blocks.lua'), 'w') as f:
            f.write(NONBLOCKING_LUA)
        os.chmod(os.path.join(self.lua_dir, 'never_blocks.lua'), 0o644)
        self.module = 'never_blocks'
        self.store = os.path.join(self.dir, 'store')

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.gateway_dir, ignore_errors=True)

    def gateway(self, workers, port=0):
        # Its own server, on a port every worker listens on (reuseport),
        # so that connections spread over all the workers.
        server = r"""
  server {
    listen 127.0.0.1:%d reuseport;
    location = /nb { content_by_lua_block { require("%s").call("%s") } }
    location = /nb/close {
      content_by_lua_block { require("%s").close(ngx.var.arg_uri) }
    }
  }
""" % (port, self.module, self.store, self.module)
        return Gateway(path=self.gateway_dir, workers=workers, extra_http=server,
                       extra_lua_path=os.path.join(self.lua_dir, '?.lua'))

    def nb(self, port, path, timeout=10.0):
        t0 = time.monotonic()
        conn = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
        try:
            conn.request('GET', path)
            resp = conn.getresponse()
            body = resp.read().decode().strip()
        finally:
            conn.close()
        return resp.status, body, (time.monotonic() - t0) * 1000

    def test_a_committer_frozen_for_3_s_blocks_no_worker(self):
        port = gateway_free_port()
        os.makedirs(self.store)
        os.chmod(self.store, 0o777)
        with self.gateway(4, port) as gw:
            workers = set(gw.worker_pids())
            self.assertEqual(4, len(workers))
            for i in range(40):  # every worker opens the store
                self.assertEqual(200, self.nb(port, '/nb?op=reserve&k=warm%d' % i)[0])
            tool = os.path.join(REPO, os.environ.get('RESV_BUILD', 'build'), 'resv_freeze')
            frozen = subprocess.Popen([tool, self.store], stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual('held', frozen.stdout.readline().split()[0])
                _, status = os.waitpid(frozen.pid, os.WUNTRACED)
                self.assertTrue(os.WIFSTOPPED(status))
                t0 = time.monotonic()
                answers = []

                def client(n):
                    got = []
                    while time.monotonic() - t0 < 3.0:
                        op = 'reserve' if len(got) % 2 == 0 else 'get'
                        got.append(self.nb(port, '/nb?op=%s&k=%s' % (op, fresh('f%d' % n))))
                    return got

                with concurrent.futures.ThreadPoolExecutor(8) as pool:
                    for f in [pool.submit(client, n) for n in range(8)]:
                        answers += f.result()
            finally:
                os.kill(frozen.pid, signal.SIGCONT)
                frozen.wait(10)
                frozen.stdout.close()
            served = set()
            slowest = 0.0
            for status, body, ms in answers:
                self.assertEqual(200, status, body)
                pid, _, answer = body.split(' ', 2)
                served.add(int(pid))
                slowest = max(slowest, ms)
                # A write waits for the frozen writer until its deadline;
                # a read answers from its snapshot.
                self.assertIn(answer.split(':')[0], ('absent', 'timeout'), body)
            sys.stderr.write('  a committer frozen 3 s: %d calls by %d workers, slowest '
                             '%.0f ms\n' % (len(answers), len(served), slowest))
            self.assertEqual(workers, served)
            # timeout_ms 1000, the grace (250 ms) and room for a loaded machine.
            self.assertLess(slowest, 1000 + 250 + 500)
            self.assertIn('absent', [b.split(' ', 2)[2] for _, b, _ in answers])
            status, body, _ = self.nb(port, '/nb?op=reserve&k=' + fresh('after'))
            self.assertEqual('reserved', body.split(' ', 2)[2])

    def test_close_with_calls_in_flight_to_a_blackholed_server_returns_at_once(self):
        # A server that takes connections and never answers.
        hole = socket.socket()
        hole.bind(('127.0.0.1', 0))
        hole.listen(64)
        uri = 'mongodb://127.0.0.1:%d/?serverSelectionTimeoutMS=10000' % hole.getsockname()[1]
        port = gateway_free_port()
        try:
            with self.gateway(1, port) as gw:
                status, body, _ = self.nb(port, '/nb/close?uri=' + uri.replace('&', '%26'))
                self.assertEqual(200, status, body)
                took, answers = body.split(' ', 1)
                sys.stderr.write('  store:close() with 8 calls in flight to a blackholed '
                                 'server: %s ms\n' % took)
                self.assertLess(int(took), 250, body)
                self.assertNotIn('reserved', answers)
                self.assertEqual(200, gw.get('/health')[0])
        finally:
            hole.close()


class Counting(unittest.TextTestResult):
    pass


def main():
    """Every test, or those named as arguments (Class or Class.test_name)."""
    module = sys.modules[__name__]
    if sys.argv[1:]:
        suite = unittest.defaultTestLoader.loadTestsFromNames(sys.argv[1:], module)
    else:
        suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    result = unittest.TextTestRunner(verbosity=2, resultclass=Counting).run(suite)
    failed = len(result.failures) + len(result.errors)
    passed = result.testsRun - failed - len(result.skipped)
    print('%d passed, %d failed' % (passed, failed))
    return 1 if failed or not result.wasSuccessful() else 0


if __name__ == '__main__':
    sys.exit(main())
