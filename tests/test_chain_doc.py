"""docs/chain.md stays true: every plugin has its section, every citation of it resolves,
its order table is the order the resolver produces, and nothing cites the documents the
chain was first described in, which the repository does not hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from antler.plugin_api.registry import discover
from tests.chain.test_builtin_order import order

ROOT = Path(__file__).resolve().parent.parent
CHAIN_DOC = ROOT / "docs" / "chain.md"
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
CITATION = re.compile(r"docs/chain\.md#([A-Za-z0-9_-]+)")
EXTERNAL_CITATION = re.compile(
    r"\bseeds? ?0\d\d\b|\bseed #\d|\b000 #\d"
    r"|\bseed.s (?:list|layer|linear|chain|sentences|exec|timeline|semantics|#)"
    r"|\bthe seeds? (?:states?|orders?|fixes|glosses|says)|as (?:in )?the seed\b",
    re.IGNORECASE)
"""How the chain's first descriptions were cited ("seed 000 #3", "seed 003, 6.11"); random
seeds ("the seed of the random order", `seed=0`) do not match."""
TABLE_ROW = re.compile(r"^\| (\d+) \| `(\w+)` \| [^|]+ \| ([a-z, ]+) \|", re.MULTILINE)


@pytest.fixture(scope="module")
def registry():
    return discover()


def anchors() -> set[str]:
    return set(ANCHOR.findall(CHAIN_DOC.read_text(encoding="utf-8")))


def test_every_plugin_antler_ships_has_its_section(registry):
    missing = sorted(set(registry.specs) - anchors())
    assert not missing, f"docs/chain.md has no <a id=...> section for {missing}"


def test_every_citation_of_the_chain_doc_names_an_anchor():
    known = anchors()
    bad = []
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for tree in ("core", "plugins", "contrib", "tests"):
        sources += sorted((ROOT / tree).rglob("*.py")) + sorted((ROOT / tree).rglob("*.yaml"))
    sources.append(ROOT / "plugin-manifest.yaml")
    for path in sources:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for anchor in CITATION.findall(line):
                if anchor not in known:
                    bad.append(f"{path.relative_to(ROOT)}:{number}: docs/chain.md#{anchor}")
    in_doc = re.findall(r"\]\(#([A-Za-z0-9_-]+)\)", CHAIN_DOC.read_text(encoding="utf-8"))
    bad += [f"docs/chain.md: link (#{anchor})" for anchor in in_doc if anchor not in known]
    assert not bad, "citations of anchors docs/chain.md does not have:\n" + "\n".join(bad)


def _prose_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "plugin-manifest.yaml", ROOT / "pyproject.toml",
             *sorted((ROOT / "docs").glob("*.md"))]
    for tree in ("core", "plugins", "contrib", "tests", "benchmarks", "examples"):
        for suffix in ("*.py", "*.md", "*.yaml"):
            files += [path for path in sorted((ROOT / tree).rglob(suffix))
                      if not path.is_symlink() and path != Path(__file__).resolve()]
    return files


def test_nothing_cites_documents_the_repository_does_not_hold():
    bad = []
    for path in _prose_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if EXTERNAL_CITATION.search(line):
                bad.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bad, (
        "these lines cite a document outside the repository; cite docs/chain.md instead "
        "(\"seed 000 #N\" -> \"position N (docs/chain.md#<plugin>)\"; \"seed 003, 6.11\" -> "
        "docs/chain.md#layer-dependencies; \"seed 003, 6.12\" -> docs/chain.md#turn-timeline), "
        "or drop the citation where the sentence stands alone:\n" + "\n".join(bad))


def resolved_order(registry, chain: str) -> list[str]:
    """The chain with every plugin Antler ships switched on, as the resolver orders it."""
    return order(registry, chain, frozenset(registry.specs), None)


@pytest.mark.parametrize("chain", ["lead", "subagent"])
def test_the_order_table_is_the_resolved_order(registry, chain):
    rows = TABLE_ROW.findall(CHAIN_DOC.read_text(encoding="utf-8"))
    assert [int(number) for number, _, _ in rows] == list(range(1, len(rows) + 1))
    documented = [name for _, name, chains in rows if chain in chains.split(", ")]
    assert documented == resolved_order(registry, chain)
    for _, name, chains in rows:
        assert set(chains.split(", ")) == set(registry.specs[name].chains), name
