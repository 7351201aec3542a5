"""Tests of antler.runtime."""
