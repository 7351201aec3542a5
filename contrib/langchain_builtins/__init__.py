"""LangChain's own middlewares as Antler plugins: placed, configured, documented.

LangChain ships middlewares an operator often wants beside Antler's chain: a
model retry and fallback, call limits, a tool retry, PII redaction, human
approval, context editing and an LLM tool selector. Each is a plugin here, off
by default, with its place from docs/chain.md#contrib (retry and fallback inside
`llm_error_handling`, the limits beside the model guards, human approval
before `clarification`) and a config section that is checked like any other.
Switch one on in the operator config::

    model_retry:
      enabled: true
      max_retries: 3
    human_in_the_loop:
      enabled: true
      interrupt_on: {bash: true, write_file: true}

The package is built like a third party's: its own manifest next to this file
and its own entry point.
"""

from antler.plugin_api import Manifest, hookimpl, load_package_manifest


@hookimpl
def antler_plugin_specs() -> Manifest:
    return load_package_manifest(__name__)
