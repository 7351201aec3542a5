"""Tests of antler.runtime.models."""
