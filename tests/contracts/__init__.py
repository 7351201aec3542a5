"""Tests of antler.contracts."""
