"""Libraries shared by several built-in plugins, and by no part of the core.

`tagguard` (reserved framework tags, for the sanitization plugins), `memory` (the
per-user fact store and its update queue), `skillproof` (how skill_activation proves an
activation to skill_tool_policy), `providergate` (the settings authorization and
guardrails configure alike), `jsontext` (a JSON list or object written as text),
`inputrecord` and `inputledger` (the record of the user's own messages
input_sanitization and input_provenance both write), `datereminder` (the date reminder
of dynamic_context and subagent_date_context), `requestcopy` (a model request with some
fields changed, without `dataclasses.replace`) and `sidecall` (a title's or memory's
call to a chat model, without the callback bookkeeping nothing observes). Built-in
plugins may import these; plugins never import each other. What a third-party plugin
needs as well lives on the SDK, `antler.plugin_api` (the provider interfaces,
`HistoryFold`, `MessageMemo`); `authz` and `historyfold` here are deprecated stubs
pointing there.
"""
