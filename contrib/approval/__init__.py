"""Human approval of tool calls, as a guardrail provider (`antler.contrib.approval`).

`ApprovalGuardrail` is registered as ``approval`` in the
``antler.guardrail_providers`` entry-point group. It is a provider, not a
plugin: the built-in ``guardrail`` plugin asks it about every tool call.
"""
