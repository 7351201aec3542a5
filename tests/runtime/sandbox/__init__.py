"""Tests of antler.runtime.sandbox."""
