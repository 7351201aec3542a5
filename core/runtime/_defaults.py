"""The services every build has unless it passes its own (`provide_default_service`).

A plugin asks for these by name (`ctx.services.get(...)`); each is made on first
use, so a build that never asks imports nothing here:

- `model_catalog`: a catalog without named models, which resolves model specs;
- `sandbox_loader`: the provider a `sandbox:` section chooses (`auto`: bwrap if usable);
- `skills_loader`: the skills registry of a `skills:` section;
- `store_opener`: the shared store of a kind ('sqlite', 'memory', a Postgres URL)
  under a base directory.
"""

from __future__ import annotations

from typing import Any

from antler.plugin_api.context import (
    MODEL_CATALOG,
    SANDBOX_LOADER,
    SKILLS_LOADER,
    STORE_OPENER,
    provide_default_service,
)


def _model_catalog() -> Any:
    from .models import ModelCatalog

    return ModelCatalog()


def _sandbox_loader() -> Any:
    from .sandbox.choice import load_configured_provider

    return load_configured_provider


def _skills_loader() -> Any:
    from .skills import SkillsRegistry

    return SkillsRegistry.from_settings


def _store_opener() -> Any:
    from .storage import open_store

    return open_store


provide_default_service(MODEL_CATALOG, _model_catalog)
provide_default_service(SANDBOX_LOADER, _sandbox_loader)
provide_default_service(SKILLS_LOADER, _skills_loader)
provide_default_service(STORE_OPENER, _store_opener)
