"""Antler's built-in middleware plugins, one sub-package each."""
