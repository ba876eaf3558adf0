"""Tests of the emulator: one per MongoDB behaviour it must reproduce."""
