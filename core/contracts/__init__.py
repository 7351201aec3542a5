"""Contracts: what plugins agree on without importing each other.

Each module is one agreement between plugins that never import each other:

- `toolmeta`: the structured metadata every tool result carries
  (`additional_kwargs["antler_tool_meta"]`), its schema, validator and the
  error classifier (`result_meta` for a result that carries none);
- `tooloutput`: where oversized tool output is kept (``.tool-results`` in the
  thread's outputs) and the marker on a result that stands for such a file;
- `stop_reason`: the per-run channel a guard writes when it ends a run early,
  read by `antler run` and by the `task` tool's result;
- `fallback`: the marker on synthetic assistant replies that stand in for a
  failed model call;
- `runstore`: bounded stores keyed by (thread, run) for state a middleware
  keeps between hooks of one run, and the retry-safe pending queue for
  one-shot injections;
- `messages`: reading and editing messages the same way everywhere (the
  latest genuine user message, server-injected hidden messages, removing tool
  calls from an assistant reply);
- `usage`: a reply's token usage read one way, and the run's usage totals
  the token_usage plugin records and `antler run` prints;
- `serverkeys`: the ``additional_kwargs`` keys only the server may write (the
  core's, merged with every plugin's ``server_owned_keys``), stripped from
  caller input, and the channel recording which messages a run received;
- `durable`: the thread's record of `task` delegations and loaded skills,
  kept outside `messages` by durable_context, read by subagent_limit;
- `storenames`: the namespaces Antler keeps in the shared store and whose
  items each holds (what an auth handler scopes store access by).
"""
