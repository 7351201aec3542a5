"""The plugin SDK: typed config, one way to a run's paths, runtime services by name,
and each built-in loaded from its own manifest through its entry point."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from pydantic import BaseModel

from antler.plugin_api import (
    MODEL_CATALOG,
    SANDBOX_LOADER,
    STORE_OPENER,
    TITLE_MODEL,
    MissingThreadIdError,
    PathLayout,
    RunContext,
    Services,
    ThreadPaths,
    resolve_model,
)
from antler.plugin_api.manifest import builtin_manifest, package_manifest_of
from antler.plugin_api.registry import discover
from antler.runtime.models import ScriptedChatModel

ROOT = Path(__file__).resolve().parents[2]


# -- ctx.plugin_config ----------------------------------------------------------------------


def _title_middleware(config):
    """The title plugin's factory on a build context holding `config` as its section."""
    from antler.plugin_api import BuildContext, ChainSecrets, RuntimeOptions
    from antler.plugin_api.manifest import builtin_plugins_manifest
    from antler.plugins.title.middleware import build

    context = BuildContext(chain="lead", spec=builtin_plugins_manifest().plugin("title"),
                           config=config, runtime=RuntimeOptions(),
                           services=Services({TITLE_MODEL: ScriptedChatModel(["a title"])}),
                           secrets=ChainSecrets())
    return build(context)


def test_plugin_config_is_the_operator_section():
    from antler.plugins.title.config import TitleConfig

    assert _title_middleware(TitleConfig(max_chars=17)).max_chars == 17


def test_plugin_config_is_the_defaults_without_a_section():
    from antler.plugins.title.config import TitleConfig

    assert _title_middleware(None).max_chars == TitleConfig().max_chars


def test_plugin_config_validates_a_section_of_another_class():
    from antler.plugin_api import BuildContext

    class Settings(BaseModel):
        level: str = "info"

    class Section(BaseModel):
        enabled: bool = True
        level: str = "debug"

    def context(config):
        return BuildContext(chain="lead", spec=None, config=config, runtime=None,  # type: ignore[arg-type]
                            services=Services(), secrets=None)  # type: ignore[arg-type]

    assert context(Section()).plugin_config(Settings) == Settings(level="debug")
    assert context(None).plugin_config(Settings) == Settings()
    own = Settings(level="warn")
    assert context(own).plugin_config(Settings) is own
    with pytest.raises(ValueError, match="level"):
        context({"level": 3}).plugin_config(Settings)


# -- Services.typed / Services.shared ------------------------------------------------------


def test_typed_is_the_service_checked_to_be_its_kind(tmp_path):
    layout = PathLayout(tmp_path)
    assert Services({"paths": layout}).typed("paths", PathLayout) is layout
    with pytest.raises(TypeError, match=r"service 'paths' must be an instance of PathLayout, "
                                        r"got str"):
        Services({"paths": "/tmp"}).typed("paths", PathLayout)
    with pytest.raises(KeyError, match="not provided"):
        Services().typed("paths", PathLayout)


def test_shared_makes_the_service_once_and_keeps_a_provided_one(tmp_path):
    made: list[PathLayout] = []

    def make() -> PathLayout:
        made.append(PathLayout(tmp_path))
        return made[-1]

    services = Services()
    first = services.shared("paths", PathLayout, make)
    assert services.shared("paths", PathLayout, make) is first
    assert made == [first] and services.items["paths"] is first

    provided = PathLayout(tmp_path / "own")
    assert Services({"paths": provided}).shared("paths", PathLayout, make) is provided
    assert len(made) == 1
    with pytest.raises(TypeError, match="must be an instance of PathLayout, got int"):
        Services().shared("paths", PathLayout, lambda: 3)


# -- ThreadPaths.for_run --------------------------------------------------------------------


def test_for_run_is_the_run_users_thread(tmp_path):
    layout = PathLayout(tmp_path)
    runtime = SimpleNamespace(context=RunContext(thread_id="t1", user_id="alice"))
    paths = ThreadPaths.for_run(layout, runtime)
    assert (paths.user_id, paths.thread_id) == ("alice", "t1")
    assert paths == layout.for_run(runtime) == layout.thread("alice", "t1")


def test_for_run_without_a_thread_says_how_to_pass_one(tmp_path):
    with pytest.raises(MissingThreadIdError, match="thread_id='t1'"):
        ThreadPaths.for_run(PathLayout(tmp_path), SimpleNamespace(context=RunContext()))


def test_the_thread_plugins_find_the_same_paths(tmp_path):
    """thread_data and the sandbox both go through `for_run` (they used to compute it apart)."""
    from antler.plugins.sandbox.middleware import SandboxThreadError, thread_paths
    from antler.plugins.thread_data.middleware import thread_paths_for

    layout = PathLayout(tmp_path)
    runtime = SimpleNamespace(context=RunContext(thread_id="t9", user_id="bob"))
    assert thread_paths(layout, runtime) == thread_paths_for(layout, runtime)
    with pytest.raises(SandboxThreadError, match="no sandbox"):
        thread_paths(layout, SimpleNamespace(context=RunContext()))


# -- runtime services by name ----------------------------------------------------------------


def test_every_build_has_the_runtime_defaults_and_its_own_win(tmp_path):
    services = Services()
    assert callable(services.get(SANDBOX_LOADER)) and callable(services.get(STORE_OPENER))
    assert SANDBOX_LOADER in services.items  # made once, then kept
    own = object()
    assert Services({SANDBOX_LOADER: own}).get(SANDBOX_LOADER) is own
    assert Services().find("no_such_service") is None
    with pytest.raises(KeyError, match="'no_such_service' is not provided"):
        Services().get("no_such_service")


def test_resolve_model_goes_through_the_builds_catalog(tmp_path):
    script = tmp_path / "script.yaml"
    script.write_text("- hello\n")
    model = resolve_model(Services(), f"scripted:{script}")
    assert type(model).__name__ == "ScriptedChatModel"

    class Catalog:
        def resolve(self, reference):
            return ("resolved", reference)

    assert resolve_model({MODEL_CATALOG: Catalog()}, "small") == ("resolved", "small")
    assert resolve_model(Services(), model) is model


def test_the_sdk_imports_no_langchain_until_asked():
    code = ("import sys, antler.plugin_api as sdk, antler.plugin_api.registry\n"
            "heavy = [m for m in sys.modules if m.startswith(('langchain', 'langgraph'))]\n"
            "assert not heavy, heavy\n"
            "sdk.HistoryFold, sdk.BuildContext, sdk.ThreadPaths\n"
            "print('ok')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.stdout.strip() == "ok", result.stderr


# -- each built-in's own manifest -------------------------------------------------------------


def test_the_central_manifest_keeps_only_points_and_slots():
    data = yaml.safe_load((ROOT / "plugin-manifest.yaml").read_text(encoding="utf-8"))
    assert set(data) == {"api_version", "points", "slots", "default_slot"}
    platform = builtin_manifest()
    assert platform.plugins == [] and platform.points and platform.slots


def _builtin_entry_points():
    return sorted((ep for ep in importlib.metadata.distribution("antler").entry_points
                   if ep.group == "antler.plugins" and ep.module.startswith("antler.plugins.")),
                  key=lambda ep: ep.name)


def test_every_builtin_is_its_folder_and_one_entry_point():
    """A built-in's spec comes from the manifest in its own folder, through its own entry
    point, and every manifest in plugins/ is reached by an entry point."""
    registry = discover()
    found = {}
    for ep in _builtin_entry_points():
        folder = ep.module.split(".")[2]
        assert package_manifest_of(ep.module) == f"antler.plugins.{folder}"
        specs = [spec for spec in registry.specs.values()
                 if spec.provenance.entry_point == ep.name]
        assert len(specs) == 1, (ep.name, specs)
        spec = specs[0]
        assert spec.provenance.source == f"antler.plugins.{folder}/plugin-manifest.yaml"
        assert spec.provenance.distribution == "antler"
        found.setdefault(folder, set()).add(spec.name)
    for manifest in sorted((ROOT / "plugins").glob("*/plugin-manifest.yaml")):
        names = {entry["name"] for entry in yaml.safe_load(manifest.read_text())["plugins"]}
        assert found.get(manifest.parent.name) == names, manifest


def test_a_build_through_antler_testing_has_the_runtime_defaults():
    """A third party's test that builds with `antler.testing` gets the services a plugin asks
    for by name, without importing the runtime itself."""
    code = ("from antler.plugin_api import SANDBOX_LOADER, Services\n"
            "from antler.testing import make_chain, make_registry\n"
            "before = SANDBOX_LOADER in Services()\n"
            "make_chain(make_registry())\n"
            "print(before, callable(Services().get(SANDBOX_LOADER)))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.stdout.split() == ["False", "True"], result.stderr
