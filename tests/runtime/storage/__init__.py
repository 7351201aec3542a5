"""Tests of antler.runtime.storage."""
