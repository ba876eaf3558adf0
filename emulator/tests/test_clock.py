"""The server's clock: hello's localTime is the server's wall clock
(a BSON date), which drivers and the store compare with their own. A test
puts a server's clock off with {emulatorControl: "clock", ms: N} on admin,
in plain mode too, so the store's skew measurement has something to find.
"""

import datetime
import time

from .support import EmulatorTest, emulator, raw_command


def local_time_offset_ms():
    """hello's localTime minus this host's clock, in ms."""
    before = time.time()
    reply = raw_command(emulator().address, 'admin', {'hello': 1})
    after = time.time()
    local = reply['localTime'].replace(tzinfo=datetime.timezone.utc).timestamp()
    return (local - (before + after) / 2) * 1000


class ClockTest(EmulatorTest):

    def tearDown(self):
        raw_command(emulator().address, 'admin', {'emulatorControl': 'clock', 'ms': 0})

    def test_local_time_is_the_host_clock_by_default(self):
        self.assertLess(abs(local_time_offset_ms()), 1000)

    def test_clock_control_skews_local_time(self):
        reply = raw_command(emulator().address, 'admin',
                            {'emulatorControl': 'clock', 'ms': 600000})
        self.assertEqual(reply['ok'], 1)
        self.assertLess(abs(local_time_offset_ms() - 600000), 1000)
        raw_command(emulator().address, 'admin', {'emulatorControl': 'clock', 'ms': -5000})
        self.assertLess(abs(local_time_offset_ms() + 5000), 1000)

    def test_clock_control_needs_a_number(self):
        reply = raw_command(emulator().address, 'admin',
                            {'emulatorControl': 'clock', 'ms': 'soon'})
        self.assertEqual((reply['ok'], reply['code']), (0, 2))
