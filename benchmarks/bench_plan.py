"""What leaving broken optional plugins out costs `plan_chain`.

Run from the repository root: `python -m benchmarks.bench_plan`.

The planner resolves the chain, leaves out the optional plugins the resolver
names at fault, and resolves again, so K broken plugins cost up to K extra
resolutions. This plans the built-in lead chain (every optional plugin on) with
K third-party plugins that each name a misspelt neighbour, for K = 0, 1, 5 and
20, and prints each best-of-N CPU time as a ratio to K = 0 measured in the same
process. Discovery and config parsing are done once, outside the timing.

The target: 20 broken plugins cost at most 30x a healthy plan (about one
resolution each, plus the bookkeeping of their problems).
"""

from __future__ import annotations

import argparse
import time

from antler.chain import plan_chain
from antler.chain.config import OperatorConfig
from antler.plugin_api.registry import PluginRegistry, PluginSource, discover
from antler.plugin_api.spec import PluginSpec, Provenance
from antler.runtime.demo import all_optional_config

TARGET_RATIO_AT_20 = 30.0
BROKEN_COUNTS = (0, 1, 5, 20)


def with_broken(registry: PluginRegistry, count: int) -> PluginRegistry:
    """A copy of `registry` plus `count` optional plugins with a misspelt `after:`."""
    copy = PluginRegistry(specs=dict(registry.specs), points=registry.points,
                          slots=registry.slots, default_slot=registry.default_slot,
                          sources=dict(registry.sources))
    for index in range(count):
        name = f"bench_broken_{index}"
        copy.add_spec(PluginSpec(
            name=name, factory="bench_missing.middleware:Thing", order={"after": ["titel"]},
            rank=100_000 + index,
            provenance=Provenance(source="bench-manifest.yaml", line=index + 1,
                                  distribution="bench-antler")),
            PluginSource(name, "bench-antler", "1.0"))
    return copy


def best_cpu_seconds(registry: PluginRegistry, config: OperatorConfig, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        plan = plan_chain(config, "lead", registry=registry)
        best = min(best, time.process_time() - start)
    broken = sum(1 for ex in plan.excluded.values() if ex.kind == "broken")
    expected = len([n for n in registry.specs if n.startswith("bench_broken_")])
    if broken != expected:
        raise SystemExit(f"expected {expected} plugins excluded as broken, got {broken}")
    return best


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_plan",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--repeats", type=int, default=30, help="timed plans per K")
    options = parser.parse_args(args)
    registry = discover()
    config = all_optional_config(registry)
    print(f"plan_chain of the built-in lead chain ({len(registry.specs)} plugins, every "
          f"optional one on) with K broken optional plugins; best of {options.repeats}, "
          "CPU time\n")
    print(f"{'K':>3}  {'seconds':>9}  {'x K=0':>7}")
    baseline = 0.0
    ratio = 0.0
    for count in BROKEN_COUNTS:
        seconds = best_cpu_seconds(with_broken(registry, count), config, options.repeats)
        baseline = baseline or seconds
        ratio = seconds / baseline
        print(f"{count:>3}  {seconds:>9.5f}  {ratio:>7.1f}")
    verdict = "ok" if ratio <= TARGET_RATIO_AT_20 else "MISSED"
    print(f"\ntarget: K=20 at most {TARGET_RATIO_AT_20:.0f}x K=0: {ratio:.1f}x, {verdict}")
    return 0 if ratio <= TARGET_RATIO_AT_20 else 1


if __name__ == "__main__":
    raise SystemExit(main())
