"""Tests of antler.chain."""
