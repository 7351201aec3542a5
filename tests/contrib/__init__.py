"""Tests of antler.contrib."""
