"""What the bounded YAML loader costs an ordinary config, next to PyYAML's own loaders.

Run from the repository root: `python -m benchmarks.bench_config_load`.

Times (best of N) three ways of turning the example operator config (and a larger
one of a hundred model entries, the size of a busy deployment) into the
located document `antler config check` validates:

- baseline: `yaml.safe_load` (PyYAML's pure-Python safe loader; no locations);
- unbounded: `yaml.compose` with `SafeLoader` and the same conversion to a located
  document, which is how configs were read before the parse limits;
- bounded: `load_yaml` (libyaml's events where installed, composed here with the
  depth, value and alias counts, then converted).

Each is printed as a ratio to the baseline timed in the same process.
"""

from __future__ import annotations

import argparse
from importlib import resources
from typing import Any

import yaml

from antler.plugin_api.yamlsource import YamlDocument, _convert, load_yaml
from benchmarks.clock import best_of


def unbounded(text: str) -> YamlDocument:
    """The located document as read before the parse limits: PyYAML composes it."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    doc = YamlDocument(data=None, source="<bench>")
    loader = yaml.SafeLoader("")
    try:
        doc.data = _convert(node, (), doc, loader)
    finally:
        loader.dispose()
    return doc


def busy_config(models: int = 100) -> str:
    """A config naming `models` models, each with a few settings, plus the example's."""
    entries = "".join(f"    m{index}: {{use: 'openai:gpt-4o', temperature: 0.{index % 10}, "
                      f"supports_vision: {str(index % 2 == 0).lower()}, "
                      f"max_tokens: {1000 + index}}}\n" for index in range(models))
    return "models:\n  named:\n" + entries


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=200, help="timed runs per case")
    args = parser.parse_args(argv)
    example = resources.files("antler").joinpath("examples/all-optional.yaml").read_text()
    cases = {"examples/all-optional.yaml": example, "100 named models": busy_config()}
    print(f"{'config':<28} {'bytes':>7} {'safe_load':>10} {'unbounded':>10} {'bounded':>10}")
    for name, text in cases.items():
        assert load_yaml(text).data == unbounded(text).data == yaml.safe_load(text)
        times: dict[str, Any] = {}
        for _ in range(3):  # interleaved, the best of each kept
            for label, func in (("safe_load", yaml.safe_load), ("unbounded", unbounded),
                                ("bounded", load_yaml)):
                best = best_of(args.runs, lambda f=func, t=text: f(t))  # type: ignore[misc]
                times[label] = min(times.get(label, best), best)
        base = times["safe_load"]
        print(f"{name:<28} {len(text):>7} {base * 1e3:8.2f}ms "
              f"{times['unbounded'] / base:9.2f}x {times['bounded'] / base:9.2f}x")


if __name__ == "__main__":
    main()
