"""Model references in plugin sections (`summarization.model`, `title.model`, ...).

`models.default`, `models.title` and the other `models:` references are checked
when the config loads. A plugin section's `model` key is free text to its own
config model, so a name that is neither under `models.named` nor a model spec
(`summarization.model: nosuchmodel`) would pass and fail only at run time, in a
LangChain error that names no key. `model_reference_problems` finds them first,
for `antler config check` and `antler run`.
"""

from __future__ import annotations

import os

from antler.chain.config import OperatorConfig, is_model_reference
from antler.chain.config.models import ENV_REFERENCE
from antler.plugin_api.diagnostics import did_you_mean

__all__ = ["model_reference_problems", "unset_environment_references"]


def model_reference_problems(config: OperatorConfig) -> list[str]:
    """One line per plugin section whose `model` names no configured model and no spec:
    'file:line:column: section.model: ...'."""
    named = config.models.named
    problems = []
    for key in sorted(config.sections):
        section = config.section(key)
        reference = getattr(section, "model", None)
        if not isinstance(reference, str) or is_model_reference(reference, named):
            continue
        names = ", ".join(sorted(named)) or "none"
        problems.append(
            f"{config.locate(key, 'model')}: {key}.model: {reference!r} is neither a model "
            f"named under `models.named` (named: {names}){did_you_mean(reference, named)} nor "
            "a model spec ('provider:model', a known model name such as 'gpt-4o', or "
            "'scripted:FILE'); name one under `models.named` or write a spec")
    return problems


def unset_environment_references(config: OperatorConfig) -> list[str]:
    """One line per environment reference of a named model that is not set here (a run
    that builds the model stops on it; a check may run where the secrets are not)."""
    found = []
    for name, entry in sorted(config.models.named.items()):
        values = {key: getattr(entry, key) for key in ("model", "api_key", "base_url")}
        values.update({f"kwargs.{key}": value for key, value in entry.kwargs.items()})
        for key, value in values.items():
            for braced, bare in ENV_REFERENCE.findall(value if isinstance(value, str) else ""):
                variable = braced or bare
                if variable not in os.environ:
                    where = config.locate("models", "named", name, *key.split("."))
                    found.append(f"{where}: models.named.{name}.{key} refers to ${variable}, "
                                 f"which is not set here; export {variable} where the agent "
                                 "runs")
    return found
