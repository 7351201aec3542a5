"""Tests of antler.plugin_api."""
