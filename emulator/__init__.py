"""A small MongoDB emulator for resv's integration tests (docs/design.md section 11).

It speaks the real wire protocol through mockupdb and borrows query, update
and aggregation semantics from mongomock, fixing the places where those
differ from MongoDB 6.0 in ways the reservation store depends on. Start it
with ``emulator/run.py`` or ``emulator.server.Emulator``.
"""
