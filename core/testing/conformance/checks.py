"""The checks of the battery, one `check_<name>` method per rule of `CHECKS`.

Each check runs the scenario (`Runs`) as its rule needs and compares what the
plugin's hooks did; a broken rule raises `ConformanceFailure` naming the rule,
its section of docs/plugins.md and what differed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pytest

from .blocking import plugin_packages
from .plain import as_json, first_difference, plain
from .plugin import RETRY_PLUGIN
from .recording import NODE_HOOKS
from .rules import ConformanceFailure, ConformanceTransientError
from .runs import Run, Runs
from .scenario import (
    DEFAULT_MODE,
    HISTORY_LENGTHS,
    HISTORY_NOISE_MS,
    HISTORY_RATIO,
    HISTORY_TURNS,
    MODES,
)
from .statekeys import builtin_state_keys, is_private_key, key_origins, own_state_keys

__all__ = ["Battery"]


class Battery(Runs):
    """The checks for one conformance class: `check(name)` runs one of `CHECKS`."""

    def check(self, name: str) -> None:
        __tracebackhide__ = True
        reason = self.owner.skip_checks.get(name)
        if reason is not None:
            pytest.skip(f"{name} skipped by {self.owner.__name__}: {reason}")
        getattr(self, f"check_{name}")()

    def fail(self, check: str, detail: str) -> None:
        __tracebackhide__ = True
        raise ConformanceFailure(check, detail)

    def checked_run(self, check: str, **kwargs: Any) -> Run:
        """A run that must include the plugin and end without an error."""
        __tracebackhide__ = True
        run = self.run(**kwargs)
        chain, mode = kwargs.get("chain") or self.primary, kwargs.get("mode", DEFAULT_MODE)
        where = f"{chain} chain, {mode}, {'async' if kwargs.get('use_async') else 'sync'}"
        if _is_ownership_conflict(run.error) and check != "state_keys":
            pytest.skip("the chain does not build because of a state-key conflict, which the "
                        "state_keys check reports")
        if self.name not in run.names:
            why = run.exclusions.get(self.name, "it is not in the chain")
            self.fail(check, f"  {self.name!r} did not take part in the {where} run: {why}")
        if run.error is not None:
            self.fail(check, f"  the {where} run failed: {type(run.error).__name__}: "
                             f"{run.error}")
        return run

    def middleware_class(self) -> type:
        run = self.checked_run("manifest")
        return run.classes[self.name]

    def _compare(self, check: str, runs: Mapping[str, Run], what: str) -> None:
        __tracebackhide__ = True
        (first_label, first), *others = runs.items()
        base = [record.key() for record in first.records(self.name)]
        base_state = self.own_state(first)
        for label, run in others:
            seen = [record.key() for record in run.records(self.name)]
            if seen != base:
                self.fail(check, f"  {what}: its hooks did different things {first_label} and "
                                 f"{label}:\n{first_difference(base, seen)}")
            state = self.own_state(run)
            if state != base_state:
                self.fail(check, f"  {what}: its state differs {first_label} and {label}:\n"
                                 f"    {first_label}: {base_state}\n    {label}: {state}")

    def own_state(self, run: Run) -> dict[str, Any]:
        """The plugin's own state keys at the end of `run`, each normalized on its own."""
        keys = own_state_keys(run.classes.get(self.name))
        return {key: plain(value, run.recording.home)
                for key, value in (run.state or {}).items() if key in keys}

    def _own_failures(self, run: Run) -> list[str]:
        """What the plugin's hooks raised in `run` (the battery's injected faults aside)."""
        return list(dict.fromkeys(
            f"{'a' if r.is_async else ''}{r.hook} raised {r.error}: {r.message}"
            for r in run.records(self.name) if r.error is not None and r.error not in _INJECTED))

    def _skip_if_hooks_raise(self, check: str) -> None:
        """A check that compares what the hooks did says nothing of hooks that raise (or of
        a chain that does not build for a state-key conflict)."""
        run = self.run()
        if _is_ownership_conflict(run.error):
            pytest.skip("the chain does not build because of a state-key conflict, which the "
                        "state_keys check reports")
        if self._own_failures(run):
            pytest.skip(f"{check}: the plugin's hooks raise on the standard scenario, which the "
                        "hooks_run check reports")

    def _require_activity(self, check: str, runs: Mapping[str, Run]) -> None:
        run = next(iter(runs.values()))
        if not run.records(self.name):
            self.fail(check, f"  none of {self.name!r}'s hooks ran in the scenario, so "
                             "nothing could be compared; give the class a `scenario` "
                             "(and `tools`) that makes them run")

    def _owners(self, chain: str) -> dict[str, list[str]]:
        built = self.built(chain, DEFAULT_MODE, False)
        return dict(built.agent.chain.state_owners) if built.agent is not None else {}

    def check_manifest(self) -> None:
        from antler.chain.build import implemented_hooks

        spec = self.spec
        problems = [str(d) for d in self.registry.diagnostics
                    if d.plugin == self.name or d.entry_point == spec.provenance.entry_point]
        if problems:
            self.fail("manifest", "  " + "\n  ".join(problems))
        cls = self.middleware_class()
        implemented = implemented_hooks(cls)
        if spec.hooks is None:
            self.fail("manifest", f"  {self.name!r} [{spec.provenance}] declares no `hooks:`; "
                                  f"its class {cls.__qualname__} implements {implemented}: "
                                  f"add `hooks: {implemented}` to its manifest entry")
        declared = list(spec.hooks or [])
        if sorted(declared) != sorted(implemented):
            extra = sorted(set(declared) - set(implemented))
            missing = sorted(set(implemented) - set(declared))
            parts = []
            if extra:
                parts.append(f"declared but not implemented: {extra}")
            if missing:
                parts.append(f"implemented but not declared: {missing}")
            self.fail("manifest", f"  {self.name!r} [{spec.provenance}] declares hooks "
                                  f"{declared}, its class {cls.__qualname__} implements "
                                  f"{implemented} ({'; '.join(parts)}); make `hooks:` list "
                                  "exactly what the class implements")

    def check_config_schema(self) -> None:
        from pydantic import ValidationError

        from antler.chain.config import config_schema, section_model
        from antler.errors import ConfigError

        spec = self.spec
        try:
            model = section_model(spec)
        except ConfigError as exc:
            self.fail("config_schema", f"  {exc}")
        try:
            schema = json.dumps(model.model_json_schema())
        except Exception as exc:
            self.fail("config_schema", f"  {spec.config_model}: model_json_schema() raised "
                                       f"{type(exc).__name__}: {exc}; use field types pydantic "
                                       "can describe")
        try:
            defaults = model()
            model.model_validate(defaults.model_dump(mode="json"))
        except ValidationError as exc:
            self.fail("config_schema", f"  the defaults of {spec.config_model} do not "
                                       f"validate: {exc}\n  give every field a valid default")
        properties = config_schema(self.registry).get("properties", {})
        missing = [section for section in spec.sections() if section not in properties]
        if missing:
            self.fail("config_schema", f"  the operator config schema has no section "
                                       f"{missing} for {self.name!r} (schema of "
                                       f"{len(schema)} characters)")
        try:
            self.operator_config()
        except ConfigError as exc:
            self.fail("config_schema", f"  the class's `config` does not validate: {exc}")

    def check_hooks_run(self) -> None:
        for chain in self.chains():
            for use_async in (False, True):
                run = self.run(chain=chain, use_async=use_async)
                where = f"{chain} chain, {'async' if use_async else 'sync'}"
                raised = self._own_failures(run)
                if raised:
                    self.fail("hooks_run", f"  the hooks of {self.name!r} raised in the standard "
                              f"scenario ({where}):\n    " + "\n    ".join(raised)
                              + "\n  a hook that raises is "
                              "skipped under `on_error: skip` (the run goes on without it) "
                              "or stops the run under `fail`; fix the hook")
                self.checked_run("hooks_run", chain=chain, use_async=use_async)

    def check_request_mutation(self) -> None:
        for chain in self.chains():
            for use_async in (False, True):
                run = self.run(chain=chain, use_async=use_async)
                for record in run.records(self.name):
                    if record.mutated:
                        self.fail("request_mutation", f"  the "
                                  f"{'a' if record.is_async else ''}{record.hook} of "
                                  f"{self.name!r} changed the request it was given in place "
                                  f"({chain} chain):\n"
                                  f"{record.mutated}\n  the request is shared with the plugins "
                                  "around it and with retries: hand on "
                                  "`request.override(...)` instead")

    def check_state_writes(self) -> None:
        from antler.chain.stateowners import claim, describe_refusal, refused_keys

        cls = self.middleware_class()
        writable = claim(self.name, self.spec, cls).writable
        for chain in self.chains():
            for use_async in (False, True):
                run = self.run(chain=chain, use_async=use_async)
                owners = {}
                if run.error is None and self.name in run.names:
                    owners = self._owners(chain)
                for record in run.records(self.name):
                    if record.hook not in NODE_HOOKS or record.error is not None:
                        continue
                    update = record.data
                    if isinstance(update, dict) and set(update) == _COMMAND_FIELDS:
                        update = update["update"]
                    refused = refused_keys(update, writable)
                    if refused:
                        hook = f"{'a' if record.is_async else ''}{record.hook}"
                        self.fail("state_writes", "  " + describe_refusal(
                            self.name, hook, refused, owners) + f" ({chain} chain)\n  "
                            "declare a key of its own (namespaced, in its state_schema or "
                            "under `state: {owns: [...]}`), or leave the other plugin's key "
                            "to it")
                error = run.error
                if getattr(error, "keys", None) and getattr(error, "plugin", "") == self.name:
                    self.fail("state_writes", f"  {error}")

    def check_sync_async(self) -> None:
        cls = self.middleware_class()
        from antler.chain.build import implemented_hooks

        lonely = []
        from langchain.agents.middleware import AgentMiddleware

        for hook in implemented_hooks(cls):
            for variant in (hook, "a" + hook):
                if getattr(cls, variant) is getattr(AgentMiddleware, variant):
                    lonely.append(variant)
        if lonely:
            self.fail("sync_async", f"  {cls.__qualname__} lacks {lonely}: agents run with "
                                    "invoke and ainvoke, so implement both forms (share a "
                                    "private helper between them)")
        for chain in self.chains():
            for mode in MODES:
                runs = {f"with invoke ({chain}, {mode})":
                        self.checked_run("sync_async", chain=chain, mode=mode),
                        f"with ainvoke ({chain}, {mode})":
                        self.checked_run("sync_async", chain=chain, mode=mode, use_async=True)}
                self._compare("sync_async", runs, "sync and async forms differ")
                self._require_activity("sync_async", runs)

    def check_chains(self) -> None:
        for chain in self.chains():
            for use_async in (False, True):
                runs = {f"{mode} ({chain}, {'async' if use_async else 'sync'})":
                        self.checked_run("chains", chain=chain, mode=mode, use_async=use_async)
                        for mode in MODES}
                self._compare("chains", runs, "fused and unfused graphs differ")

    def check_non_blocking(self) -> None:
        try:
            import blockbuster  # noqa: F401
        except ImportError:
            self.fail("non_blocking", "  the blocking-call detector `blockbuster` is not "
                                      "installed: `pip install 'antler[test]'` (or skip the "
                                      "check by name, with the reason)")
        scan = plugin_packages(self.spec, self.middleware_class())
        for chain in self.chains():
            run = self.run(chain=chain, use_async=True, scan=scan)
            found = list(run.recording.blocking)
            for message in (run.state or {}).get("messages", []):
                text = str(getattr(message, "content", ""))
                if "Blocking call to" in text:
                    found.append(f"a tool result: {text[:200]}")
            if run.error is not None and "Blocking call to" in _causes(run.error):
                found.append(_causes(run.error))
            if found:
                self.fail("non_blocking", f"  blocking calls inside {self.name!r}'s async code "
                                          f"({chain} chain, scanned {scan}):\n    "
                                          + "\n    ".join(found)
                                          + "\n  use the async API of what it calls, or "
                                          "`await asyncio.to_thread(...)`")
            if run.error is not None:
                self.fail("non_blocking", f"  the async run failed: "
                                          f"{type(run.error).__name__}: {run.error}")

    def check_retry_injection(self) -> None:
        self._skip_if_hooks_raise("retry_injection")
        for use_async in (False, True):
            run = self.checked_run("retry_injection", retry=True, use_async=use_async)
            clean = self.checked_run("retry_injection", use_async=use_async)
            calls = [r for r in run.records(self.name) if r.hook == "wrap_model_call"]
            if not calls:
                continue  # no model wrapper: what it adds lives in state, which a retry keeps
            if RETRY_PLUGIN not in run.names:
                self.fail("retry_injection", "  the battery's retrier could not join the chain: "
                          f"{run.exclusions.get(RETRY_PLUGIN)}")
            if run.names.index(self.name) < run.names.index(RETRY_PLUGIN):
                continue  # it encloses the retrier: nothing it wraps is ever retried
            index = 0
            while index < len(calls):
                failed = calls[index]
                if failed.error != ConformanceTransientError.__name__:
                    index += 1
                    continue
                if index + 1 >= len(calls):
                    self.fail("retry_injection", "  the retried call never reached "
                                                 f"{self.name!r}'s wrap_model_call again")
                retried = calls[index + 1]
                if failed.data["in"] == retried.data["in"] and \
                        failed.data["out"] != retried.data["out"]:
                    self.fail("retry_injection", "  the first attempt and the retry got the "
                              "same request but the plugin handed on different ones; peek "
                              "before calling the handler and commit after it returned "
                              "(`call_then_commit`, `PendingQueue.deliver`):\n"
                              + first_difference(failed.data["out"], retried.data["out"]))
                index += 2
            for record in calls:  # a wrapper that retries on its own hands on one request
                if any(out != record.data["out"][0] for out in record.data["out"]):
                    self.fail("retry_injection", "  its own retries handed on different "
                              "requests:\n" + first_difference(record.data["out"][0],
                                                                 record.data["out"][-1]))
            clean_out = [r.data["out"][-1:] for r in clean.records(self.name)
                         if r.hook == "wrap_model_call"]
            retried_out = [r.data["out"][-1:] for r in calls if r.error is None]
            if clean_out != retried_out:
                self.fail("retry_injection", "  with a retry the plugin handed on other requests "
                          "than without one:\n" + first_difference(clean_out, retried_out))

    def check_state_keys(self) -> None:
        built = self.built(self.primary, DEFAULT_MODE, False)
        if _is_ownership_conflict(built.error):
            self.fail("state_keys", f"  the chain does not build: {built.error}")
        cls = self.middleware_class()
        keys = own_state_keys(cls)
        spec = self.spec
        prefixes = [spec.name]
        distribution = spec.provenance.distribution
        if distribution and not distribution.startswith("<"):
            prefixes.append(re.sub(r"[-.]+", "_", distribution).lower())
        origins = key_origins(getattr(cls, "state_schema", None))
        problems = []
        for key in sorted(keys):
            private = is_private_key(cls, key)
            namespaced = any(key == p or key.startswith(p + "_") for p in prefixes)
            contract = origins.get(key, object).__module__.startswith("antler.contracts")
            if not (private or namespaced or contract):
                problems.append(f"state key {key!r} is neither private (annotate it with "
                                f"PrivateStateAttr) nor namespaced (start it with "
                                f"{' or '.join(repr(p + '_') for p in prefixes)})")
        for key, (owner, origin) in builtin_state_keys().items():
            if key in keys and owner != self.name and origins.get(key) is not origin:
                problems.append(f"state key {key!r} is also declared by the built-in plugin "
                                f"{owner!r} ({origin.__module__}.{origin.__qualname__}); "
                                "rename it, or take it from the same contract schema")
        if problems:
            self.fail("state_keys", "  " + "\n  ".join(problems))

    def check_on_error(self) -> None:
        from antler.chain.policy import error_policy
        from antler.errors import PluginHookError

        clean = self.checked_run("on_error")
        hooks = list(dict.fromkeys(record.hook for record in clean.records(self.name)))
        if not hooks:
            self._require_activity("on_error", {"clean": clean})
        policy = error_policy(self.spec, self.operator_config().plugin_settings)
        if policy == "skip":
            run = self.run(faults={self.name: set(hooks)})
            if run.error is not None:
                self.fail("on_error", f"  policy skip: the run should go on without "
                                      f"{self.name!r}'s failing hooks {hooks}, but it failed: "
                                      f"{type(run.error).__name__}: {run.error}")
            for hook in hooks:
                if not any(f"plugin {self.name!r} failed in {hook}" in line
                           for line in run.logs):
                    self.fail("on_error", f"  policy skip: no warning on the "
                                          f"antler.audit.isolation logger names "
                                          f"{self.name!r} and {hook}; logged: {run.logs}")
            return
        for hook in hooks:
            run = self.run(faults={self.name: {hook}})
            error = run.error
            if not (isinstance(error, PluginHookError) and error.plugin == self.name
                    and error.hook == hook):
                got = "it went on" if error is None else f"{type(error).__name__}: {error}"
                self.fail("on_error", f"  policy fail: a {hook} that raises should stop the "
                                      f"run with PluginHookError naming {self.name!r} and "
                                      f"{hook}; {got}")

    def check_resume(self) -> None:
        clean = self.checked_run("resume")
        result = self.resumed()
        if result.get("error"):
            self.fail("resume", f"  resuming in a new process failed: {result['error']}")
        if self.name not in result["names"]:
            self.fail("resume", f"  {self.name!r} is not in the chain the new process built")
        resumed = [tuple(item) for item in result["records"].get(self.name, [])]
        expected = [tuple(as_json(list(record.key()))) for record in clean.records(self.name)]
        tail = expected[len(expected) - len(resumed):] if resumed else []
        if resumed != tail:
            self.fail("resume", "  after the resume its hooks did other things than in a run "
                                "that never stopped (state it kept in memory is gone in a new "
                                "process: keep it in the graph state):\n"
                      + first_difference(tail, resumed))
        keys = own_state_keys(clean.classes.get(self.name))
        state = {key: value for key, value in result["state"].items() if key in keys}
        if state != as_json(self.own_state(clean)):
            self.fail("resume", f"  its state after the resume differs:\n    without a stop: "
                                f"{self.own_state(clean)}\n    resumed: {state}")

    def check_history_work(self) -> None:
        self._skip_if_hooks_raise("history_work")
        timings = self.history_timings()
        if isinstance(timings, str):
            self.fail("history_work", f"  {timings}")
            return
        short, long = HISTORY_LENGTHS
        hooks = sorted({hook for times in timings.values() for plugin, hook in times
                        if plugin == self.name})
        if not hooks:
            self.fail("history_work", f"  none of {self.name!r}'s hooks ran in a turn on a "
                                      "thread with earlier turns; give the class a `scenario` "
                                      "that makes them run, or skip the check by name")
        grown = []
        for hook in hooks:
            before = timings[short].get((self.name, hook), 0.0)
            after = timings[long].get((self.name, hook), 0.0)
            if after - before > HISTORY_NOISE_MS and after > HISTORY_RATIO * before:
                grown.append(f"{hook}: {before:.3f} ms per turn with {short} earlier messages, "
                             f"{after:.3f} ms with {long}")
        if grown:
            self.fail("history_work", "  its work grows with the thread (medians of "
                      f"{HISTORY_TURNS} turns, CPU time of the hook itself):\n    "
                      + "\n    ".join(grown) + "\n  keep what a pass over the history finds "
                      "per thread or per message id, so a call looks only at the messages "
                      "added since the previous one: `antler.plugin_api.HistoryFold` folds "
                      "a value over the history, `antler.plugin_api.MessageMemo` keeps a "
                      "result per message")


_INJECTED = frozenset({"ConformanceFault", "ConformanceTransientError", "ConformanceCrash",
                       "GraphInterrupt", "BlockingError"})
"""Exceptions the battery injects (or LangGraph's interrupt): not a hook's own failure."""
_COMMAND_FIELDS = frozenset({"goto", "update", "resume", "graph"})
"""The fields of a normalized `Command` (`_Plain._Command`)."""


def _is_ownership_conflict(error: BaseException | None) -> bool:
    from antler.errors import StateOwnershipError

    return isinstance(error, StateOwnershipError)


def _causes(error: BaseException) -> str:
    parts = []
    seen: BaseException | None = error
    while seen is not None:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(parts)
