"""The runtime: what a built chain runs with.

The agent factory (`agent`), the server-owned run context (`runcontext`),
delegation to subagents (`delegation`), hook tracing (`tracing`), thread paths
and uploads (`paths`, `uploads`), sandbox providers (`sandbox`), chat models
(`models`) and the demo scenario (`demo`).
"""
