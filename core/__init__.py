"""Antler: the middleware chain of an agent harness, as a plugin platform."""

__version__ = "0.1.0"
