"""`PluginConformance`: the rules every Antler middleware follows, run against one plugin.

A third party subclasses it in their own test suite, naming the installed plugin::

    from antler.testing import PluginConformance

    class TestAcmeAuditConformance(PluginConformance):
        plugin = "acme_audit"

pytest then runs one test per check (`CHECKS`), each through real agent graphs
of the installed plugins (`antler.agent.create_agent` over a scripted chat
model): the plugin in its place among Antler's own, in the lead chain and, when
it joins it, the subagent chain. A failure names the rule, links to its section
of `docs/plugins.md` and shows what differed. A check that does not apply to a
plugin is skipped by name, with the reason: `skip_checks = {"non_blocking":
"waits on a lock the provider holds; tracked in #12"}`.

What a subclass may set (all optional but `plugin`): `config` (the plugin's
section, applied to every section it reads), `operator_config` (other
sections), `scenario` (the model's turns; by default a call of the battery's
own `conformance_lookup` tool, then an answer), `tools` (extra tools the
scenario calls), `message` (the user's message), `runtime` (RuntimeOptions
fields; by default every runtime condition the plugin's `when:` names, and
plan mode, vision and subagents on), `extra_plugins` ((name, object) pairs
registered as in-process entry points) and `skip_checks`.

Runs are shared: classes whose settings build the same graphs (Antler's
built-ins under the default config, say) reuse one recorded run per way of
running it. Every hook of every plugin is recorded (node-hook updates, the
request a wrap hook hands on and what it returns), so each class compares
only what its own plugin did.

`run_conformance(cls)` runs the battery without pytest and returns each
check's outcome, for testing the battery itself.

The package's modules import one way, each only from those before it:
`rules`, `plain`, `recording`, `plugin` (the battery's own entry point),
`scenario`, `statekeys`, `blocking`, `worker` (the process that resumes runs),
`runs`, `checks` and `suite` (the pytest base class).
"""

from __future__ import annotations

from .rules import CHECKS, ConformanceFailure, Rule
from .suite import PluginConformance, run_conformance

__all__ = [
    "CHECKS",
    "ConformanceFailure",
    "PluginConformance",
    "Rule",
    "run_conformance",
]
