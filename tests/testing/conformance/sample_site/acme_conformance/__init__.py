"""Acme's notes: a sample third-party Antler plugin distribution that follows every rule."""
