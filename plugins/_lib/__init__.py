"""Libraries shared by several built-in plugins, and by no part of the core.

`tagguard` (reserved framework tags, for the sanitization plugins), `memory`
(the per-user fact store and its update queue) and `skillproof` (how
skill_activation proves an activation to skill_tool_policy). Built-in plugins
may import these; plugins never import each other. What a third-party plugin
needs as well lives on the SDK, `antler.plugin_api` (the provider interfaces,
`HistoryFold`, `MessageMemo`); `authz` and `historyfold` here are deprecated
stubs pointing there.
"""
