"""Run every emulator test and print "N passed, N failed" as the last line.

    /usr/bin/python3 emulator/tests/run.py [-v]

Exits non-zero when a test fails. `make test-emulator` calls this.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))


def main():
    verbosity = 2 if '-v' in sys.argv[1:] else 1
    suite = unittest.defaultTestLoader.discover(HERE, pattern='test_*.py',
                                                top_level_dir=os.path.dirname(os.path.dirname(HERE)))
    result = unittest.TextTestRunner(verbosity=verbosity, stream=sys.stderr).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped)
    sys.stdout.flush()
    print('%d passed, %d failed' % (passed, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
