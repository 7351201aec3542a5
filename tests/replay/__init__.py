"""Tests of antler.replay."""
