"""The chain: operator config, resolver, plan and build.

A chain goes through this layer in order: the operator config
(`antler.chain.config`) says which plugins are on, the resolver
(`antler.chain.resolver`) orders the participants by their declared
constraints, `plan_chain` (`antler.chain.chainplan`) records who takes part and why
the others do not, and `build_chain` (`antler.chain.build`) instantiates the
middlewares for `create_agent`.
"""

from .build import (
    BuiltChain,
    ChainEntry,
    build_chain,
    factory_import_failures,
    hook_signature_problems,
    implemented_hooks,
    middleware_name_problem,
    prompt_sections,
    select_tools,
)
from .chainplan import (
    EXCLUSION_KINDS,
    ChainPlan,
    Exclusion,
    Problem,
    constructor_problems,
    participation,
    plan_chain,
)

__all__ = [
    "EXCLUSION_KINDS",
    "BuiltChain",
    "ChainEntry",
    "ChainPlan",
    "Exclusion",
    "Problem",
    "build_chain",
    "constructor_problems",
    "factory_import_failures",
    "hook_signature_problems",
    "implemented_hooks",
    "middleware_name_problem",
    "participation",
    "plan_chain",
    "prompt_sections",
    "select_tools",
]
