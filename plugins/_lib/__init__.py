"""Libraries shared by several built-in plugins, and by no part of the core.

`tagguard` (reserved framework tags, for the sanitization plugins), `authz`
(principals, decisions and provider protocols, for authorization and
guardrail), `memory` (the per-user fact store and its update queue),
and `messagememo` (per-message results kept by id). A plugin may import
these; plugins never import each other.
"""
