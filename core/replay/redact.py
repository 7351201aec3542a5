"""Redaction: what a recording must never hold, replaced by ``[REDACTED]`` on write.

A recording is meant to be shared (attached to a change, kept in CI), so the
recorder redacts every string it writes, wherever it occurs (inputs, replies,
tool arguments and results, error messages):

* API keys in the shapes providers issue (``sk-...``, ``sk-ant-...``, ``AKIA...``,
  ``ghp_...``, ``xox?-...``, ``AIza...``), and ``api_key=...``/``"api_key": "..."``
  assignments;
* the value of an ``Authorization`` (or ``Proxy-Authorization``, ``X-Api-Key``)
  header, and any ``Bearer``/``Basic`` credential;
* the values of this process's environment variables whose names say they hold
  a secret (``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD``), wherever they
  appear verbatim;
* whatever the operator's `record.redact` patterns match.

A mapping entry whose key names a secret (``api_key``, ``authorization``,
``password``, ``token``, ``secret``) has its whole value redacted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["REDACTED", "Redactor"]

REDACTED = "[REDACTED]"

_KEY_SHAPES = (
    r"sk-ant-[A-Za-z0-9_\-]{8,}",
    r"sk-(?:proj-|live-|test-)?[A-Za-z0-9_\-]{16,}",
    r"\bAKIA[0-9A-Z]{16}\b",
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",
    r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",
    r"\bAIza[0-9A-Za-z_\-]{30,}",
)
_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key)(\"?\s*[:=]\s*\"?)([^\"\r\n,}]+)")
_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}")
_ASSIGNMENT = re.compile(
    r"(?i)\b([A-Za-z_]*(?:api[_-]?key|secret|password|access[_-]?token))(\"?\s*[:=]\s*\"?)"
    r"([^\s\"',}]{4,})")
_SECRET_ENV = re.compile(r"(?i)(_API_KEY|_TOKEN|_SECRET|_PASSWORD|_ACCESS_KEY)$|^API_KEY$")
_SECRET_KEY = re.compile(r"(?i)^(api[_-]?key|authorization|proxy-authorization|password|"
                         r"secret|token|access[_-]?token|x-api-key)$")
_MIN_ENV_SECRET = 6
"""Shorter environment values are not searched for: they would redact ordinary words."""


class Redactor:
    """Replaces secrets in strings and nested data (see the module docstring)."""

    def __init__(self, patterns: Iterable[str] = (), *,
                 environ: Mapping[str, str] | None = None) -> None:
        self.patterns = list(patterns)
        environ = os.environ if environ is None else environ
        secrets = sorted({value for name, value in environ.items()
                          if _SECRET_ENV.search(name) and len(value) >= _MIN_ENV_SECRET},
                         key=len, reverse=True)
        literal = [re.escape(secret) for secret in secrets]
        self._any = re.compile("|".join([*_KEY_SHAPES, *literal, *self.patterns]))

    def text(self, value: str) -> str:
        """`value` with every secret replaced."""
        if not value:
            return value
        value = _HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", value)
        value = _CREDENTIAL.sub(lambda m: f"{m.group(1)} {REDACTED}", value)
        value = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", value)
        return self._any.sub(REDACTED, value)

    def data(self, value: Any) -> Any:
        """`value` (strings, lists and mappings, nested) with every secret replaced."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {key: REDACTED if isinstance(key, str) and _SECRET_KEY.match(key)
                    and isinstance(item, str) and item else self.data(item)
                    for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(item) for item in value]
        return value
