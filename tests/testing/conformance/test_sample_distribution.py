"""A sample third-party distribution runs the battery exactly as its authors would.

`sample_site/` holds an installed-looking distribution (`acme-conformance`: a
package and its `.dist-info` with an `antler.plugins` entry point). The class
below is the three lines its authors write, plus putting the site on the path.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from antler.testing import PluginConformance, isolate_entry_points

SITE = str(Path(__file__).parent / "sample_site")


class TestAcmeNotesConformance(PluginConformance):
    plugin = "acme_notes"

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _installed(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
        """The distribution on `sys.path` for this class only, found through its entry point."""
        with pytest.MonkeyPatch.context() as patch:
            isolate_entry_points(patch, tmp_path_factory.mktemp("entry-point-cache"))
            patch.syspath_prepend(SITE)
            yield
        for module in [name for name in sys.modules if name.startswith("acme_conformance")]:
            del sys.modules[module]
        importlib.invalidate_caches()
