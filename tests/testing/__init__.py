"""Tests of antler.testing."""
