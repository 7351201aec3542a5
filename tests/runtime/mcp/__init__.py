"""Tests of antler.runtime.mcp."""
