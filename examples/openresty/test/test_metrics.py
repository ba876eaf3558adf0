"""resv.ngx's helpers in a real nginx with several workers: every worker's
counters at one GET /metrics (resv.ngx.serve_metrics, through the
lua_shared_dict resv_metrics of examples/openresty/nginx.conf.in), a worker
nginx starts again after one was killed, the text checked by Prometheus's
promtool, and the 503 of resv.ngx.unavailable. Run through
`make test-nginx`, or:

    /usr/bin/python3 examples/openresty/test/test_metrics.py [Class[.test] ...]

The file store, shared by the workers: no server needed.
"""

import concurrent.futures
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from gateway import Gateway  # noqa: E402

# n gets of absent keys through the worker's type; answers the worker's id
# and pid.
WORK = r"""
    location = /work {
      content_by_lua_block {
        local resv_ngx = require "resv.ngx"
        local users, err = resv_ngx.type("shop", "user")
        if not users then return resv_ngx.unavailable(err) end
        for i = 1, tonumber(ngx.var.arg_n) do
          local r, gerr = users:get({ namespace = "work", key = tostring(i) })
          if not r then return resv_ngx.unavailable(gerr, "get") end
        end
        ngx.say(ngx.worker.id(), " ", ngx.worker.pid())
      }
    }
"""


def samples(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith('#'):
            name, value = line.rsplit(' ', 1)
            out[name] = float(value)
    return out


def gets(samples_, worker):
    return samples_.get('resv_calls_total{worker="%s",op="get",status="absent"}' % worker, 0)


class Metrics(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix='resv-metrics-store-')

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def work(self, gw, n):
        status, body = gw.get('/work?n=%d' % n)
        self.assertEqual(200, status, body)
        worker, pid = str(body).split()
        return worker, int(pid)

    def metrics(self, gw):
        status, text = gw.get('/metrics')
        self.assertEqual(200, status, text)
        return text

    def settled(self, gw, done):
        """The samples of /metrics once done(samples) holds, or after 5 s
        (each worker publishes every second: a loaded machine runs a
        worker's timer late)."""
        deadline = time.monotonic() + 5
        while True:
            text = self.metrics(gw)
            got = samples(text)
            if done(got) or time.monotonic() > deadline:
                return text, got
            time.sleep(0.2)

    def spread(self, gw, requests, n):
        """requests calls of /work?n=n at once: the calls each worker made."""
        made = {}
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for worker, _ in pool.map(lambda _: self.work(gw, n), range(requests)):
                made[worker] = made.get(worker, 0) + n
        return made

    def test_every_workers_counters_add_up_to_the_calls_made(self):
        with Gateway(path=self.dir, workers=3, extra_locations=WORK) as gw:
            made = self.spread(gw, 60, 3)
            text, got = self.settled(
                gw, lambda got: all(gets(got, w) == made.get(w, 0) for w in '012'))
        listed = {re.search(r'worker="(\d+)"', n).group(1) for n in got}
        self.assertEqual({'0', '1', '2'}, listed)
        for worker in listed:
            self.assertEqual(made.get(worker, 0), gets(got, worker), (worker, made))
        self.assertEqual(180, sum(gets(got, w) for w in listed))
        self.assertEqual(1, text.count('# TYPE resv_calls_total counter\n'))

    @unittest.skipUnless(shutil.which('promtool'), 'no promtool (make test-deps installs prometheus)')
    def test_promtool_accepts_the_text(self):
        with Gateway(path=self.dir, workers=2, extra_locations=WORK) as gw:
            self.spread(gw, 10, 2)
            gw.signup('pat@example.com', 'pat')
            time.sleep(1.5)  # each worker has published since
            text = self.metrics(gw)
        p = subprocess.run(['promtool', 'check', 'metrics'], input=text, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.assertEqual(0, p.returncode, p.stdout)
        self.assertIn('resv_calls_total{worker="', text)

    def test_a_worker_started_again_is_listed_once_with_its_own_counters(self):
        with Gateway(path=self.dir, workers=2, extra_locations=WORK) as gw:
            pids = {}
            made = {}
            deadline = time.monotonic() + 10
            while len(pids) < 2 and time.monotonic() < deadline:
                worker, pid = self.work(gw, 2)
                pids[worker] = pid
                made[worker] = made.get(worker, 0) + 2
            self.assertEqual({'0', '1'}, set(pids), 'both workers answered')
            _, before = self.settled(gw, lambda got: gets(got, '1') == made['1'])
            self.assertEqual(made['1'], gets(before, '1'))
            os.kill(pids['1'], signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                now = gw.worker_pids()
                if len(now) == 2 and pids['1'] not in now:
                    break
                time.sleep(0.05)
            else:
                self.fail('nginx did not start a worker in place of the killed one')
            # The new worker 1 published at init_worker: its counters, from 0,
            # replace the dead one's; worker 0's stay.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                text = self.metrics(gw)
                after = samples(text)
                if gets(after, '1') == 0:
                    break
                time.sleep(0.1)
            self.assertEqual(0, gets(after, '1'), text)
            self.assertEqual(1, text.count('\nresv_jobs_waiting{worker="1"} '))
            self.assertEqual(made['0'], gets(after, '0'))

    def test_a_store_that_did_not_open_answers_503_naming_why(self):
        # The memory store with two workers does not open (per_process).
        with Gateway(workers=2, extra_locations=WORK) as gw:
            status, body = gw.get('/work?n=1')
            metrics_status, _ = gw.get('/metrics')
        self.assertEqual(503, status, body)
        self.assertEqual('store unavailable', body['error'])
        self.assertIn('per_process', body['detail'])
        self.assertEqual(200, metrics_status)


if __name__ == '__main__':
    unittest.main(verbosity=2)
