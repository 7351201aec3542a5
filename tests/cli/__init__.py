"""Tests of antler.cli."""
