"""The runtime: what a built chain runs with.

The agent factory (`agent`), the server-owned run context (`runcontext`),
delegation to subagents (`delegation`), hook tracing (`tracing`), thread paths
and uploads (`paths`, `uploads`), sandbox providers (`sandbox`), chat models
(`models`), where threads and shared data are kept (`storage`) and the demo
scenario (`demo`).
"""
