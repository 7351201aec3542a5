"""Tests of antler.compiler."""
