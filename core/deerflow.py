"""`antler config migrate`: a DeerFlow `config.yaml` rewritten as an Antler operator config.

Every key of the DeerFlow file ends in exactly one of three outcomes, each
reported with its line:

* **mapped**: the setting has an Antler key of the same meaning (same name or a
  renamed one, sometimes reshaped: `provider: {use, config}` becomes
  `provider` + `provider_options`, a model list becomes `models.named`);
* **dropped**: the setting configures something outside the middleware chain
  (the web UI, IM channels, the gateway's run store) or something Antler does
  differently, and the note says how;
* **unmapped**: the setting matters to the chain but Antler has no equivalent
  yet, or it names DeerFlow's own code; the note says what to do by hand.

Sections whose plugin is not installed here are reported as unmapped rather
than written, so the result always passes `antler config check` with the
installed plugins. The table below states facts about DeerFlow's keys; the
mapping is Antler's own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from pydantic import BaseModel

from antler import jsonsource
from antler.contracts.toolgroups import SANDBOX_TOOLS, TOOL_GROUPS
from antler.plugin_api.yamlsource import Location, YamlDocument, load_yaml

__all__ = ["DEERFLOW_KEYS", "Migration", "MigrationNote", "Outcome", "carry_comments",
           "deerflow_hint", "deerflow_signs", "load_extensions", "migrate_deerflow"]

Outcome = Literal["mapped", "dropped", "unmapped"]


# A record of its own, shaped like the registry's `LoadDiagnostic` only because both are
# a few named strings.
@dataclass(frozen=True)
class MigrationNote:
    """What happened to one DeerFlow key."""

    where: str
    source: str
    outcome: Outcome
    target: str | None = None
    why: str = ""

    def render(self) -> str:
        if self.outcome == "mapped":
            text = f"{self.where}: {self.source} -> {self.target}"
            return text + (f" ({self.why})" if self.why else "")
        return f"{self.where}: {self.source}: {self.outcome}: {self.why}"

    def as_dict(self) -> dict[str, Any]:
        return {"where": self.where, "source": self.source, "outcome": self.outcome,
                "target": self.target, "why": self.why}


@dataclass
class Migration:
    """The Antler config built from a DeerFlow config, and a note per DeerFlow key."""

    config: dict[str, Any] = field(default_factory=dict)
    notes: list[MigrationNote] = field(default_factory=list)

    def count(self, outcome: Outcome) -> int:
        return sum(1 for note in self.notes if note.outcome == outcome)


# Whole DeerFlow sections outside the middleware chain, with the reason.
_OUTSIDE = {
    "config_version": "DeerFlow's own schema version; Antler validates every key instead",
    "log_level": "logging is configured by the embedding application (Python logging)",
    "logging": "logging is configured by the embedding application (Python logging)",
    "max_recursion_limit": "a gateway clamp on client input; Antler derives each run's "
                           "step limit from `agent.max_model_calls`",
    "suggestions": "a web UI feature (follow-up suggestions)",
    "input_polish": "a web UI feature (draft rewriting)",
    "acp_agents": "ACP agents are DeerFlow tools; Antler has no ACP tool",
    "skill_scan": "skill installation scanning belongs to DeerFlow's skill store",
    "skill_evolution": "agent-written skills belong to DeerFlow's skill store",
    "agents_api": "a gateway HTTP API",
    "run_events": "DeerFlow's run-event store; Antler's runs are LangGraph checkpoints "
                  "(`antler threads`)",
    "agent_storage": "custom agent definitions are a DeerFlow gateway feature",
    "scheduler": "scheduled runs are a gateway feature",
    "mcp_tasks": "long-running MCP tasks are a gateway feature",
    "run_ownership": "multi-worker run leases are a gateway feature",
    "stream_bridge": "the gateway's streaming transport",
    "channels": "IM channels are a gateway feature",
    "channel_connections": "IM channels are a gateway feature",
    "auth": "login and SSO belong to the deployment (see the LangGraph Server auth handler)",
    "dedupe_storage": "IM webhook de-duplication is a gateway feature",
    "tool_groups": "Antler's tool groups are built in: `file:read` (ls, read_file, glob, "
                   "grep), `file:write` (write_file, str_replace) and `bash`, which "
                   "`authorization` roles, `guardrails` lists and a skill's `allowed-tools` "
                   "can name; list other tools by name or glob",
    "uploads": "upload limits are enforced by whatever receives the files; the `uploads` "
               "plugin only tells the model about them",
}

# (section, key) pairs with a meaning Antler does not have, and what Antler does instead.
_KEY_NOTES: dict[tuple[str, str], tuple[Outcome, str]] = {
    ("loop_detection", "max_tracked_threads"):
        ("dropped", "Antler keeps loop counts in each thread's own state, not in the process"),
    ("title", "max_words"): ("dropped", "Antler bounds titles by `title.max_chars`"),
    ("sandbox", "read_file_output_max_chars"):
        ("dropped", "the `tool_output` budget caps every tool's result, read_file's included"),
    ("sandbox", "ls_output_max_chars"):
        ("dropped", "the `tool_output` budget caps every tool's result, ls's included"),
    ("sandbox", "mounts"):
        ("unmapped", "Antler's providers mount only the thread's directories and skills; "
                     "copy the files into the workspace or write a provider"),
    ("skills", "deferred_discovery"):
        ("unmapped", "Antler always lists enabled skills in the system prompt"),
    ("subagents", "timeout_seconds"):
        ("unmapped", "Antler bounds a subagent by its token budget "
                     "(`subagent_token_budget`), not by wall time"),
    ("subagents", "max_turns"):
        ("unmapped", "Antler bounds every run, a subagent task's included, by "
                     "`agent.max_model_calls` (model calls, one setting for both chains); "
                     "set it there if this limit was the tighter one"),
    ("subagents", "agents"): ("unmapped", "Antler has one built-in subagent type"),
    ("subagents", "custom_agents"): ("unmapped", "Antler has one built-in subagent type"),
    ("memory", "manager_class"):
        ("dropped", "Antler has one memory store (facts per user under the base directory)"),
    ("memory", "storage_path"):
        ("dropped", "Antler keeps each user's facts in the shared store (`storage.store`), "
                    "not in a file of its own"),
    ("memory", "shutdown_flush_timeout_seconds"):
        ("dropped", "`antler run` flushes pending memory updates before it exits"),
    ("memory", "mode"):
        ("unmapped", "Antler's memory runs as middleware only; there are no memory tools"),
}

# Keys an operator coming from DeerFlow may write into an Antler config by habit:
# (section, DeerFlow key) -> the Antler key. Used by the config loader's hints.
DEERFLOW_KEYS: dict[tuple[str, str], str] = {
    ("sandbox", "bash_command_timeout"): "command_timeout",
    ("sandbox", "bash_output_max_chars"): "max_output_bytes",
    ("sandbox", "use"): "provider",
    ("sandbox", "allow_host_bash"): "require_isolation (`true` where host bash was off)",
    ("title", "model_name"): "model",
    ("summarization", "model_name"): "model",
    ("skills", "path"): "paths",
    ("memory", "injection_enabled"): "dynamic_context.memory (another section)",
}


def deerflow_hint(section: str, key: str) -> str | None:
    """A hint for a DeerFlow key written in an Antler config section, if it is one."""
    if (section, key) in DEERFLOW_KEYS:
        return (f"`{section}.{key}` is DeerFlow's name; Antler's is "
                f"`{DEERFLOW_KEYS[section, key]}` (`antler config migrate` converts a DeerFlow "
                "config)")
    note = _KEY_NOTES.get((section, key))
    if note is not None:
        return f"`{section}.{key}` is a DeerFlow setting: {note[1]}"
    return None


def deerflow_signs(data: Any) -> list[str]:
    """What marks `data` (a parsed config) as DeerFlow's `config.yaml`; empty when nothing
    does. `antler config check` then points at `antler config migrate` instead of listing
    every DeerFlow key as an error."""
    if not isinstance(data, Mapping):
        return []
    signs = []
    if "config_version" in data:
        signs.append("`config_version`")
    if isinstance(data.get("models"), list) or ("models" in data and data["models"] is None):
        signs.append("`models:` as a list")
    for key in ("tool_groups", "max_recursion_limit", "checkpointer", "circuit_breaker",
                "llm_call", "channels"):
        if key in data:
            signs.append(f"`{key}`")
    sandbox = data.get("sandbox")
    if isinstance(sandbox, Mapping) and ("use" in sandbox or "allow_host_bash" in sandbox):
        signs.append("`sandbox.use`" if "use" in sandbox else "`sandbox.allow_host_bash`")
    if "deerflow." in json.dumps(data, default=str):
        signs.append("`deerflow.` class paths")
    # one stray key is a typo in an Antler config; two marks are a DeerFlow file
    return signs if len(signs) >= 2 else []


# DeerFlow's own classes that have a plain LangChain equivalent.
_MODEL_CLASSES = {
    "deerflow.models.patched_openai:PatchedChatOpenAI": "langchain_openai:ChatOpenAI",
    "deerflow.models.patched_deepseek:PatchedChatDeepSeek": "langchain_deepseek:ChatDeepSeek",
}
_MODEL_FIELDS = ("model", "api_key", "base_url", "max_tokens", "temperature", "timeout",
                 "max_retries", "supports_vision")
_MODEL_RENAMES = {"api_base": "base_url", "request_timeout": "timeout",
                  "default_request_timeout": "timeout"}
_MODEL_DROPPED = {
    "name": "becomes the key under `models.named`",
    "display_name": "a web UI label",
    "context_window": "a web UI indicator",
    "pricing": "a web UI cost display",
    "supports_thinking": "thinking modes are not switched by Antler; put the provider's "
                         "thinking settings under `kwargs`",
    "supports_reasoning_effort": "thinking modes are not switched by Antler",
    "when_thinking_enabled": "thinking modes are not switched by Antler",
    "when_thinking_disabled": "thinking modes are not switched by Antler",
}
_SANDBOX_PROVIDERS = {"deerflow.sandbox.local:LocalSandboxProvider"}
_GUARDRAIL_PROVIDERS = {"deerflow.guardrails.builtin:AllowlistProvider": "allowlist"}
_AUTHZ_PROVIDERS = {"deerflow.authz.rbac:RbacAuthorizationProvider": "rbac"}
# The built-in providers' option names where Antler's differ.
_ALLOW_ALL_BY_DEFAULT = {"deerflow.guardrails.builtin:AllowlistProvider"}
"""DeerFlow guardrail providers that allow every tool when `allowed_tools` is not set."""

_PROVIDER_OPTIONS = {
    "deerflow.guardrails.builtin:AllowlistProvider": {"allowed_tools": "allow",
                                                      "denied_tools": "deny"},
}


class _Migrator:
    def __init__(self, doc: YamlDocument, sections: Mapping[str, type[BaseModel] | None]):
        self.doc = doc
        self.sections = sections
        self.out: dict[str, Any] = {}
        self.notes: list[MigrationNote] = []
        self.model_references: list[tuple[str, str, tuple[Any, ...]]] = []

    # -- recording -------------------------------------------------------------------
    def where(self, path: tuple[Any, ...]) -> str:
        location = self.doc.locate(path)
        return str(location) if isinstance(location, Location) else self.doc.source

    def note(self, path: tuple[Any, ...], outcome: Outcome, target: str | None = None,
             why: str = "") -> None:
        self.notes.append(MigrationNote(self.where(path), _dotted(path), outcome, target, why))

    def put(self, target: str | tuple[str, ...], value: Any, path: tuple[Any, ...],
            why: str = "") -> None:
        """Write `value` at `target`: a dotted path of Antler keys, or a tuple of parts
        when a part is data (a model or server name may hold dots: `gpt-4.1`)."""
        parts = tuple(target.split(".")) if isinstance(target, str) else target
        node = self.out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
        self.note(path, "mapped", _target_text(parts), why)

    def drop(self, path: tuple[Any, ...], why: str) -> None:
        self.note(path, "dropped", why=why)

    def unmapped(self, path: tuple[Any, ...], why: str) -> None:
        self.note(path, "unmapped", why=why)

    # -- generic shapes --------------------------------------------------------------
    def same(self, section: str, value: Any, *, target: str | None = None,
             renames: Mapping[str, str] | None = None,
             special: Mapping[str, Callable[[Any, tuple[Any, ...]], None]] | None = None,
             base: tuple[Any, ...] | None = None) -> None:
        """Copy `section`'s keys to `target` (same name) where Antler's section has them."""
        path = base if base is not None else (section,)
        target = target or section
        if not isinstance(value, Mapping):
            if value is None:
                self.drop(path, "empty section")
            else:
                self.unmapped(path, f"expected a mapping, found {type(value).__name__}")
            return
        model = self.sections.get(target.split(".")[0])
        fields = _fields_at(model, target.split(".")[1:])
        for key, item in value.items():
            here = (*path, key)
            if special and key in special:
                special[key](item, here)
            elif (section, key) in _KEY_NOTES:
                outcome, why = _KEY_NOTES[section, key]
                self.note(here, outcome, why=why)
            elif renames and key in renames:
                self.put(f"{target}.{renames[key]}", item, here)
            elif fields is None or key in fields:
                self.put(f"{target}.{key}", item, here)
            else:
                self.unmapped(here, f"Antler's `{target}` has no `{key}` "
                                    f"(its keys: {', '.join(sorted(fields))})")

    def provider(self, section: str, value: Any, known: Mapping[str, str],
                 extra: Iterable[str] = ()) -> None:
        """`{enabled, provider: {use, config}, ...}` -> `{enabled, provider, provider_options}`."""
        def reshape(item: Any, path: tuple[Any, ...]) -> None:
            if not isinstance(item, Mapping) or "use" not in item:
                self.unmapped(path, "expected `provider: {use, config}`")
                return
            use = str(item["use"])
            if use in known:
                self.put(f"{section}.provider", known[use], (*path, "use"),
                         "DeerFlow's built-in provider of the same behaviour")
            elif use.startswith("deerflow."):
                self.unmapped((*path, "use"), f"{use} is DeerFlow's own class; register an "
                              f"Antler provider in `antler.{section}_providers` instead")
                return
            else:
                self.put(f"{section}.provider", use, (*path, "use"),
                         "name an entry point of the provider group, or register this class "
                         "under one")
            options = dict(item.get("config") or {})
            notes = []
            if use in _ALLOW_ALL_BY_DEFAULT and options.get("allowed_tools") is None \
                    and options.get("allow") is None:
                # DeerFlow allows every tool its deny list does not name; Antler's
                # allowlist allows only what `allow` names.
                options["allowed_tools"] = ["*"]
                notes.append("no allowed_tools: every tool not denied may run, as in "
                             "DeerFlow (allow: ['*'])")
            if options:
                renames = _PROVIDER_OPTIONS.get(use, {})
                options = {renames.get(key, key): value for key, value in options.items()}
                notes[:0] = [f"{a} -> {b}" for a, b in renames.items()
                             if a in (item.get("config") or {})]
                self.put(f"{section}.provider_options", options, (*path, "config"),
                         "; ".join(notes))

        self.same(section, value, special={"provider": reshape,
                                           **{key: self._skip for key in extra}})

    def _skip(self, item: Any, path: tuple[Any, ...]) -> None:
        self.drop(path, "handled with its section")

    # -- the whole document ----------------------------------------------------------
    def run(self, data: Mapping[str, Any]) -> None:
        handlers: dict[str, Callable[[Any], None]] = {
            "models": self.models, "tools": self.tools, "sandbox": self.sandbox,
            "subagents": self.subagents, "skills": self.skills, "title": self.title,
            "summarization": self.summarization, "memory": self.memory,
            "checkpointer": self.checkpointer, "database": self.database,
            "guardrails": lambda v: self.provider("guardrails", v, _GUARDRAIL_PROVIDERS),
            "authorization": lambda v: self.provider("authorization", v, _AUTHZ_PROVIDERS),
            "circuit_breaker": lambda v: self.same(
                "circuit_breaker", v, target="llm_error_handling.circuit_breaker"),
            "llm_call": lambda v: self.same("llm_call", v, target="llm_error_handling"),
            "safety_finish_reason": self.safety,
            "extensions": lambda v: self.same("extensions", v),
            "plugins": self.plugins,
        }
        for key, value in data.items():
            path = (key,)
            if key in handlers:
                handlers[key](value)
            elif key in _OUTSIDE:
                self.drop(path, _OUTSIDE[key])
            elif key in self.sections:
                self.same(key, value)
            else:
                self.unmapped(path, "no Antler plugin installed here provides this section")

    def models(self, value: Any) -> None:
        if value is None or value == []:
            self.drop(("models",), "no model is configured (every entry is commented out): "
                      "the migrated config runs the offline `scripted` model until you name "
                      "one under `models.named` and set `models.default`")
            return
        if not isinstance(value, list):
            self.unmapped(("models",), "expected DeerFlow's list of models, found "
                          f"{type(value).__name__}")
            return
        first: str | None = None
        for index, entry in enumerate(value):
            path = ("models", index)
            if not isinstance(entry, Mapping) or not entry.get("name") or not entry.get("use"):
                self.unmapped(path, "a model entry needs `name` and `use`")
                continue
            name = str(entry["name"])
            use = str(entry["use"])
            use = _MODEL_CLASSES.get(use, use)
            if use.startswith("deerflow."):
                self.unmapped((*path, "use"), f"{use} is DeerFlow's own model class; use the "
                              "provider's LangChain class ('module:Class') or an "
                              "init_chat_model spec")
                continue
            first = first or name
            self.put(("models", "named", name, "use"), use, (*path, "use"))
            kwargs: dict[str, Any] = {}
            for key, item in entry.items():
                here = (*path, key)
                if key == "use":
                    continue
                if key in _MODEL_DROPPED:
                    self.drop(here, _MODEL_DROPPED[key])
                elif key in _MODEL_FIELDS or key in _MODEL_RENAMES:
                    self.put(("models", "named", name, _MODEL_RENAMES.get(key, str(key))),
                             item, here)
                else:
                    kwargs[key] = item
                    self.note(here, "mapped",
                              _target_text(("models", "named", name, "kwargs", key)),
                              "passed to the model class unchanged")
            if kwargs:
                self.out["models"]["named"][name]["kwargs"] = kwargs
        if first is not None:
            self.out.setdefault("models", {})["default"] = first
            self.notes.append(MigrationNote(self.where(("models",)), "models", "mapped",
                                            "models.default",
                                            f"DeerFlow's first model, {first!r}"))

    def tools(self, value: Any) -> None:
        if not isinstance(value, list):
            self.unmapped(("tools",), "expected DeerFlow's list of tools")
            return
        for index, entry in enumerate(value):
            path = ("tools", index)
            use = str(entry.get("use", "")) if isinstance(entry, Mapping) else ""
            name = entry.get("name", use) if isinstance(entry, Mapping) else entry
            if use.startswith("deerflow.sandbox.tools:"):
                self.sandbox_tool(path, name, use)
            elif use.startswith("deerflow."):
                self.unmapped(path, f"`{name}` is DeerFlow's own tool ({use}); port it as a "
                              "LangChain tool and list it under `tools:`")
            elif use and "tools" in self.sections:
                options = {k: v for k, v in entry.items() if k not in ("name", "use", "group")}
                item: dict[str, Any] = {"use": use}
                if options:
                    item["config"] = options
                self.out.setdefault("tools", []).append(item)
                self.note(path, "mapped", f"tools[{len(self.out['tools']) - 1}]")
            else:
                self.unmapped(path, f"tool `{name}`: Antler loads tools through `tools:` "
                              "entries, which this installation does not provide")

    def sandbox_tool(self, path: tuple[Any, ...], name: Any, use: str) -> None:
        """A DeerFlow sandbox tool: dropped when Antler's sandbox plugin has it, else unmapped."""
        tool = use.rpartition(":")[2].removesuffix("_tool")
        group = next((g for g, tools in TOOL_GROUPS.items() if tool in tools), None)
        if tool in SANDBOX_TOOLS:
            self.drop(path, f"`{tool}` is built into Antler's sandbox plugin (tool group "
                            f"`{group}`)")
        else:
            self.unmapped(path, f"`{name}` ({use}) has no counterpart in Antler's sandbox, "
                                f"whose tools are {', '.join(SANDBOX_TOOLS)}")

    def sandbox(self, value: Any) -> None:
        def use(item: Any, path: tuple[Any, ...]) -> None:
            if str(item) in _SANDBOX_PROVIDERS:
                self.drop(path, "Antler chooses its provider (`auto`: the isolating bwrap "
                                "provider when it can run, else local); write "
                                "`sandbox.provider: local` to keep commands on the host")
            else:
                self.unmapped(path, f"no Antler sandbox provider replaces {item}; providers "
                              "register in `antler.sandbox_providers`")

        def output(item: Any, path: tuple[Any, ...]) -> None:
            if isinstance(item, int) and item > 0:
                self.put("sandbox.max_output_bytes", max(item, 1024), path,
                         "characters taken as bytes; Antler's floor is 1024")
            else:
                self.drop(path, "Antler always caps output; 0 (no cap) has no equivalent")

        def host_bash(item: Any, path: tuple[Any, ...]) -> None:
            if item is True:
                self.drop(path, "host bash was allowed; Antler's `auto` provider runs bash "
                                "isolated under bwrap when it can, else on the host with a "
                                "warning")
            else:
                self.put("sandbox.require_isolation", True, path,
                         "host bash off: Antler refuses to run commands unless they are "
                         "isolated (bwrap), instead of falling back to the host")

        self.same("sandbox", value, renames={"bash_command_timeout": "command_timeout"},
                  special={"use": use, "bash_output_max_chars": output,
                           "allow_host_bash": host_bash})
        if isinstance(value, Mapping) and "allow_host_bash" not in value:
            # DeerFlow's default is host bash off; a DeerFlow provider other than the local
            # one isolates commands in a container. Either way commands never ran on the host.
            self.out.setdefault("sandbox", {})["require_isolation"] = True
            self.notes.append(MigrationNote(
                self.where(("sandbox",)), "sandbox", "mapped", "sandbox.require_isolation",
                "DeerFlow never runs bash on the host unless `allow_host_bash: true`; Antler "
                "keeps that by refusing unisolated commands"))

    def subagents(self, value: Any) -> None:
        def budget(item: Any, path: tuple[Any, ...]) -> None:
            self.same("subagents", item, target="subagent_token_budget", base=path)

        self.same("subagents", value, special={"token_budget": budget})

    def skills(self, value: Any) -> None:
        def path_(item: Any, path: tuple[Any, ...]) -> None:
            self.put("skills.paths", [item], path, "a list of skill roots in Antler")

        def container(item: Any, path: tuple[Any, ...]) -> None:
            if str(item).rstrip("/") == "/mnt/skills":
                self.drop(path, "Antler always shows skills at /mnt/skills")
            else:
                self.unmapped(path, "Antler shows skills at /mnt/skills only")

        self.same("skills", value, special={"path": path_, "container_path": container})

    def _model_name(self, section: str) -> Callable[[Any, tuple[Any, ...]], None]:
        def model(item: Any, path: tuple[Any, ...]) -> None:
            if item is None:
                self.drop(path, "null: the default applies")
            else:
                self.put(f"{section}.model", item, path, "a name under `models.named`")
                self.model_references.append((section, str(item), path))
        return model

    def withhold_unmigrated_models(self) -> None:
        """A section's `model` naming a DeerFlow model that was not migrated is withheld
        (the default applies) rather than written to fail at run time."""
        named = self.out.get("models", {}).get("named", {})
        for section, name, path in self.model_references:
            if name in named or section not in self.out:
                continue
            del self.out[section]["model"]
            source = _dotted(path)
            self.notes = [note for note in self.notes if note.source != source]
            self.unmapped(path, f"model {name!r} was not migrated (see `models`), so the "
                                "agent's model applies; name a model under `models.named` "
                                f"and set `{section}.model`")

    def title(self, value: Any) -> None:
        self.same("title", value, special={"model_name": self._model_name("title")})

    def summarization(self, value: Any) -> None:
        def read_tools(item: Any, path: tuple[Any, ...]) -> None:
            if "durable_context" in self.sections:
                self.put("durable_context.skill_read_tools", item, path,
                         "Antler's durable_context records the skill files these tools read")
            else:
                self.unmapped(path, "the durable_context plugin is not installed")

        self.same("summarization", value,
                  special={"model_name": self._model_name("summarization"),
                           "skill_file_read_tool_names": read_tools})

    def memory(self, value: Any) -> None:
        def injection(item: Any, path: tuple[Any, ...]) -> None:
            if "dynamic_context" in self.sections:
                self.put("dynamic_context.memory", item, path,
                         "Antler's dynamic_context injects memory next to the user message")
            else:
                self.unmapped(path, "the dynamic_context plugin is not installed")

        def mode(item: Any, path: tuple[Any, ...]) -> None:
            if item == "middleware":
                self.drop(path, "Antler's memory always runs as middleware")
            else:
                self.unmapped(path, "Antler's memory runs as middleware only; there are no "
                                    "memory tools")

        def backend(item: Any, path: tuple[Any, ...]) -> None:
            if not isinstance(item, Mapping):
                return
            for key, setting in item.items():
                here = (*path, key)
                if key in ("debounce_seconds", "max_facts"):
                    self.put(f"memory.{key}", setting, here)
                elif key == "model" and isinstance(setting, Mapping):
                    self.memory_model(setting, here)
                else:
                    self.drop(here, "a setting of DeerFlow's memory backend")

        self.same("memory", value, special={"injection_enabled": injection, "mode": mode,
                                            "backend_config": backend,
                                            "model_name": self._model_name("memory")})

    def memory_model(self, setting: Mapping[str, Any], path: tuple[Any, ...]) -> None:
        if not setting.get("provider") or not setting.get("model"):
            self.drop(path, "no model given: DeerFlow extracts nothing; Antler uses the "
                            "agent's model")
            return
        entry = {"use": f"{setting['provider']}:{setting['model']}",
                 **{k: v for k, v in setting.items()
                    if k in ("api_key", "base_url", "temperature") and v is not None}}
        self.out.setdefault("models", {}).setdefault("named", {})["memory"] = entry
        self.out["models"]["memory"] = "memory"
        self.note(path, "mapped", "models.named.memory", "and `models.memory: memory`")

    def checkpointer(self, value: Any) -> None:
        if not isinstance(value, Mapping):
            self.unmapped(("checkpointer",), "expected a mapping")
            return
        kind = value.get("type")
        if kind in ("sqlite", "memory"):
            self.put("storage.checkpointer", kind, ("checkpointer", "type"))
            if "connection_string" in value:
                self.drop(("checkpointer", "connection_string"),
                          "Antler keeps its SQLite file under `storage.base_dir`")
        elif kind == "postgres" and value.get("connection_string"):
            self.put("storage.checkpointer", value["connection_string"],
                     ("checkpointer", "connection_string"))
        else:
            self.unmapped(("checkpointer",), f"checkpointer type {kind!r} has no equivalent")
        for key in value:
            if key not in ("type", "connection_string"):
                self.drop(("checkpointer", key), "a DeerFlow storage detail")

    def database(self, value: Any) -> None:
        if not isinstance(value, Mapping):
            self.unmapped(("database",), "expected a mapping")
            return
        backend = value.get("backend")
        for key, item in value.items():
            path = ("database", key)
            if key == "backend":
                if backend in ("sqlite", "memory"):
                    self.put("storage.checkpointer", backend, path)
                elif backend != "postgres":
                    self.unmapped(path, f"database backend {backend!r} has no equivalent")
                else:
                    self.drop(path, "given by `postgres_url`")
            elif key == "postgres_url" and backend == "postgres":
                self.put("storage.checkpointer", item, path)
            elif key == "checkpoint_channel_mode":
                self.put("storage.messages_channel", item, path)
            elif key == "checkpoint_delta" and isinstance(item, Mapping) \
                    and "snapshot_frequency" in item:
                self.put("storage.snapshot_every", item["snapshot_frequency"],
                         (*path, "snapshot_frequency"))
            else:
                self.drop(path, "a DeerFlow storage detail (Antler keeps its files under "
                                "`storage.base_dir`)")

    def safety(self, value: Any) -> None:
        def detectors(item: Any, path: tuple[Any, ...]) -> None:
            if not isinstance(item, list):
                self.unmapped(path, "expected a list of {use, config}")
            elif any(str(d.get("use", "")).startswith("deerflow.") for d in item
                     if isinstance(d, Mapping)):
                self.unmapped(path, "DeerFlow's detector classes: Antler's built-ins cover "
                              "OpenAI content_filter, Anthropic refusal and Gemini safety stops; "
                              "leave `detectors` out, or name Antler's classes")
            else:
                self.put("safety_finish_reason.detectors", item, path)

        self.same("safety_finish_reason", value, special={"detectors": detectors})

    def plugins(self, value: Any) -> None:
        """DeerFlow's plugin list: packages of DeerFlow code, with no Antler counterpart."""
        if value is None or value == [] or value == {}:
            self.drop(("plugins",), "no plugin is configured")
            return
        entries = (list(enumerate(value)) if isinstance(value, list)
                   else list(value.items()) if isinstance(value, Mapping) else None)
        if entries is None:
            self.unmapped(("plugins",), f"expected a list of plugins, found "
                          f"{type(value).__name__}")
            return
        for key, entry in entries:
            path = ("plugins", key)
            name = key if isinstance(key, str) else _entry_name(entry)
            if isinstance(entry, Mapping) and entry.get("enabled") is False:
                self.drop(path, f"plugin {name} is switched off")
            else:
                self.unmapped(path, f"DeerFlow plugin {name} is DeerFlow code; Antler plugins "
                              "are Python distributions registered under the `antler.plugins` "
                              "entry point group (`antler plugins list` shows them): port it "
                              "as one, or list its middleware under `extensions.middlewares`")

    def mcp_servers(self, servers: Mapping[str, Any], path: tuple[Any, ...]) -> None:
        if "mcp_servers" not in self.sections:
            self.unmapped(path, "MCP servers: this installation has no `mcp_servers` section")
            return
        for name, server in servers.items():
            here = (*path, name)
            if not isinstance(server, Mapping):
                self.unmapped(here, "expected a mapping")
                continue
            self.mcp_server(str(name), server, here)

    def mcp_server(self, name: str, server: Mapping[str, Any], path: tuple[Any, ...]) -> None:
        """One DeerFlow MCP server, key by key, onto `mcp_servers.<name>`."""
        if server.get("enabled") is False and not (server.get("command") or server.get("url")):
            # a switched-off placeholder (DeerFlow's example has `url: ""`): nothing to start
            self.drop(path, "switched off and names nothing to start")
            return
        out: dict[str, Any] = {}
        self.out.setdefault("mcp_servers", {})[name] = out
        target = ("mcp_servers", name)
        kind = str(server.get("type") or server.get("transport") or
                   ("http" if server.get("url") else "stdio"))
        for key, item in server.items():
            here = (*path, key)
            if key == "enabled" and kind == "sse":
                self.drop(here, "written as `enabled: false` (see `type`)")
            elif key in ("enabled", "command", "args", "cwd"):
                self.put((*target, key), item, here)
            elif key in ("env", "headers") and isinstance(item, Mapping):
                self.put((*target, key), {k: _env_reference(v) for k, v in item.items()}, here,
                         "`$VAR` written as Antler's `${VAR}`"
                         if any(_env_reference(v) != v for v in item.values()) else "")
            elif key == "url":
                if item:
                    self.put((*target, key), item, here)
                else:
                    self.drop(here, "empty URL")
            elif key in ("type", "transport"):
                if kind == "sse":
                    out["enabled"] = False
                    self.unmapped(here, "Antler speaks stdio and streamable HTTP, not the "
                                  "older SSE transport: the server is written switched off; "
                                  "point `url` at its streamable-HTTP endpoint, if it has "
                                  "one, and set `enabled: true`")
                else:
                    self.drop(here, "Antler takes the transport from `command` or `url`")
            elif key == "tool_name_prefix":
                if item is True:
                    self.put((*target, key), f"{name}_", here,
                             "DeerFlow's `true` prefixes the server name and '_'")
                elif isinstance(item, str) and item:
                    self.put((*target, key), item, here)
                else:
                    self.drop(here, "no prefix")
            elif key == "session_init_timeout":
                self.timeout(item, (*target, "start_timeout"), here)
            elif key == "tool_call_timeout":
                self.timeout(item, (*target, "call_timeout"), here)
            elif key == "routing":
                routing = _routing(item)
                if routing is None:
                    self.unmapped(here, "expected {mode, priority, keywords}")
                else:
                    self.put((*target, key), routing, here)
            elif key == "tools" and isinstance(item, Mapping):
                self.mcp_tools(item, target, here)
            elif key == "description":
                self.drop(here, "a label; Antler shows each tool's own description")
            elif key == "oauth":
                self.unmapped(here, "Antler has no OAuth token exchange for MCP servers: fetch "
                              "the token outside and pass it in `headers` as "
                              "`Authorization: Bearer ${TOKEN}`")
            else:
                self.unmapped(here, f"Antler's MCP servers have no `{key}`")
        if "tool_name_prefix" not in server:
            # DeerFlow prefixes by default: keep the names guardrail and authorization
            # rules (and the model's habits) know
            out["tool_name_prefix"] = f"{name}_"
            self.notes.append(MigrationNote(
                self.where(path), _dotted((*path, "tool_name_prefix")), "mapped",
                _target_text((*target, "tool_name_prefix")),
                f"not set: DeerFlow's default `true` names the tools `{name}_<tool>`; kept"))

    def timeout(self, item: Any, target: tuple[str, ...], path: tuple[Any, ...]) -> None:
        if isinstance(item, (int, float)) and not isinstance(item, bool) and item > 0:
            self.put(target, float(item), path)
        else:
            self.drop(path, f"no limit given; Antler's `{target[-1]}` default applies "
                            "(it always bounds the wait)")

    def mcp_tools(self, tools: Mapping[str, Any], target: tuple[str, ...],
                  path: tuple[Any, ...]) -> None:
        for tool, settings in tools.items():
            here = (*path, tool)
            if not isinstance(settings, Mapping):
                self.unmapped(here, "expected a mapping")
                continue
            for key, item in settings.items():
                routing = _routing(item) if key == "routing" else None
                if routing is not None:
                    self.put((*target, "tools", str(tool), "routing"), routing, (*here, key))
                else:
                    self.unmapped((*here, key), f"Antler's per-tool MCP settings have only "
                                  f"`routing`, not `{key}`")


def migrate_deerflow(doc: YamlDocument, sections: Mapping[str, type[BaseModel] | None],
                     *, extensions: Mapping[str, Any] | YamlDocument | None = None,
                     extensions_source: str = "extensions_config.json") -> Migration:
    """Map a DeerFlow config (`doc`) onto the Antler `sections` installed here.

    `sections` maps each Antler config section to its pydantic model (None for a
    section whose keys are not checked here). `extensions` is DeerFlow's
    `extensions_config.json`, whose `mcpServers` and `skills` are mapped too.
    Sections written for plugins that are not installed are moved to the notes.
    """
    migrator = _Migrator(doc, sections)
    data = doc.data if isinstance(doc.data, Mapping) else {}
    migrator.run(data)
    migrator.withhold_unmigrated_models()
    content: Mapping[str, Any] = {}
    if isinstance(extensions, YamlDocument):  # parsed with its lines
        json_doc = extensions
        content = extensions.data if isinstance(extensions.data, Mapping) else {}
    elif extensions:
        json_doc = YamlDocument(data=dict(extensions), source=extensions_source)
        content = extensions
    if content:
        json_migrator = _Migrator(json_doc, sections)
        json_migrator.out = migrator.out
        for key, value in content.items():
            if key == "mcpServers" and isinstance(value, Mapping):
                json_migrator.mcp_servers(value, (key,))
            elif key == "skills" and isinstance(value, Mapping):
                off = [name for name, state in value.items()
                       if isinstance(state, Mapping) and state.get("enabled") is False]
                if off:
                    json_migrator.put("skills.disabled", off, (key,))
                else:
                    json_migrator.drop((key,), "every skill is enabled: nothing to turn off")
            else:
                json_migrator.unmapped((key,), "not a section Antler reads")
        migrator.notes.extend(json_migrator.notes)
    migration = Migration(config=migrator.out, notes=migrator.notes)
    _withhold_unknown_sections(migration, sections)
    migration.notes.sort(key=_position)
    return migration


def carry_comments(output: str, source_text: str, doc: YamlDocument,
                   notes: Iterable[MigrationNote]) -> str:
    """`output` (the migrated YAML) with the source's comments kept: the comment lines
    written directly above a mapped key (and a comment at the end of its line) go above
    its Antler key, and those above a section that keeps its name above that section.

    Operators document their configs in comments; this keeps them where a setting maps
    over. The data is unchanged (checked: `output` is returned as it was otherwise).
    """
    lines = source_text.splitlines()
    target_doc = load_yaml(output, "<migrated>")
    above: dict[int, tuple[int, list[str]]] = {}

    def comments_at(line: int) -> list[str]:
        block: list[str] = []
        index = line - 2
        while index >= 0 and lines[index].strip().startswith("#"):
            block.insert(0, lines[index].strip())
            index -= 1
        own = lines[line - 1] if 0 < line <= len(lines) else ""
        if " #" in own and own.count('"') % 2 == 0 and own.count("'") % 2 == 0:
            block.append(own[own.index(" #") + 1:].strip())
        return block

    def place(target: tuple[Any, ...], source_line: int) -> None:
        found = target_doc.marks.get(target)
        block = comments_at(source_line)
        if found is not None and block and found.line not in above:
            above[found.line] = (found.column - 1, block)

    for note in notes:
        source, line, _ = _position(note)
        if note.outcome != "mapped" or not note.target or "[" in note.target \
                or source != doc.source or not line:
            continue
        parts = tuple(part.strip('"') for part in re.findall(r'"[^"]*"|[^.]+', note.target))
        place(parts, line)
        section = re.split(r"[.\[]", note.source)[0]
        if section == parts[0] and (section,) in doc.marks:
            place((section,), doc.marks[(section,)].line)
    text = output.splitlines()
    for line in sorted(above, reverse=True):
        indent, block = above[line]
        text[line - 1:line - 1] = [" " * indent + comment for comment in block]
    kept = "\n".join(text) + "\n"
    try:
        return kept if yaml.safe_load(kept) == yaml.safe_load(output) else output
    except yaml.YAMLError:
        return output


def _position(note: MigrationNote) -> tuple[str, int, int]:
    source, _, rest = note.where.rpartition(":")
    source, _, line = source.rpartition(":")
    try:
        return (source, int(line), int(rest))
    except ValueError:
        return (note.where, 0, 0)


def _withhold_unknown_sections(migration: Migration,
                               sections: Mapping[str, type[BaseModel] | None]) -> None:
    """Move what was mapped to sections nobody here provides into the notes."""
    for key in [k for k in migration.config if k not in sections]:
        del migration.config[key]
        migration.notes = [
            MigrationNote(note.where, note.source, "unmapped",
                          why=f"Antler's `{key}` section comes with a plugin that is not "
                              "installed here; install it and migrate again")
            if note.outcome == "mapped" and (note.target or "").split(".")[0]
            .split("[")[0] == key else note
            for note in migration.notes
        ]


def _fields_at(model: type[BaseModel] | None, path: list[str]) -> set[str] | None:
    for part in path:
        if model is None:
            return None
        field_info = model.model_fields.get(part)
        annotation = field_info.annotation if field_info is not None else None
        model = annotation if isinstance(annotation, type) and issubclass(
            annotation, BaseModel) else None
    return set(model.model_fields) if model is not None else None


def _target_text(parts: Iterable[str]) -> str:
    """Antler key parts as one dotted path; a part holding a dot is quoted."""
    return ".".join(f'"{part}"' if "." in part else part for part in parts)


def _entry_name(entry: Any) -> str:
    if isinstance(entry, Mapping):
        return f"`{entry.get('name') or entry.get('use') or '?'}`"
    return f"`{entry}`"


_BARE_REFERENCE = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")


def _env_reference(value: Any) -> Any:
    """DeerFlow's whole-value `$VAR` as Antler's `${VAR}`; anything else unchanged."""
    if isinstance(value, str) and (match := _BARE_REFERENCE.match(value)):
        return f"${{{match.group(1)}}}"
    return value


def _routing(value: Any) -> dict[str, Any] | None:
    """DeerFlow's `routing:` (same keys as Antler's), or None when it is not one."""
    if not isinstance(value, Mapping) or set(value) - {"mode", "priority", "keywords"}:
        return None
    # DeerFlow's default priority is 0, Antler's 50: written out so the ranking is kept
    return {"priority": 0, **value} if value.get("mode") == "prefer" else dict(value)


def _dotted(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_extensions(text: str, source: str) -> dict[str, Any]:
    """DeerFlow's `extensions_config.json`, parsed; a clear error when it is not JSON."""
    try:
        data = jsonsource.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") \
            from None
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a JSON object")
    return data
