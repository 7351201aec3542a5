"""The example distribution's own tests: placement, build, a real run, and conformance.

Run them with the distribution installed (`pip install -e '.[test]'`, then `pytest`):
Antler's pytest plugin (`antler.testing`) provides the fixtures, no conftest needed.
"""

from __future__ import annotations

from antler.agent import create_agent
from antler.models import ScriptedChatModel
from antler.testing import PluginConformance, assert_in_slot

ON = "acme_notes: {enabled: true, prefix: Note}"


def test_it_joins_both_chains_in_the_extension_slot(antler_plan):
    for chain in ("lead", "subagent"):
        plan = antler_plan(ON, chain=chain)  # planned from specs: nothing imported
        assert_in_slot(plan, "acme_notes", "extensions")


def test_it_is_off_until_the_operator_turns_it_on(antler_plan):
    plan = antler_plan()

    assert "acme_notes" not in plan.order
    assert plan.explain("acme_notes").startswith("acme_notes is not in the lead chain")


def test_it_builds_from_its_config_section(antler_discover, antler_build):
    registry = antler_discover(builtins=False)  # just this distribution's plugins
    built = antler_build(ON, registry=registry)

    [entry] = built.entries
    assert entry.middleware.prefix == "Note"
    assert entry.state.owns.keys() == {"acme_notes_seen"}  # what it may write


def test_the_model_reads_the_note_and_the_state_keeps_the_count(tmp_path, antler_registry):
    from antler.testing import load_test_config

    model = ScriptedChatModel([
        {"content": "", "tool_calls": [{"name": "ls", "args": {"path": "/mnt/user-data"}}]},
        "There is nothing there yet.",
    ])
    config = load_test_config(ON, antler_registry)
    with create_agent(config, model=model, registry=antler_registry, base_dir=tmp_path,
                      checkpointer="memory") as agent:
        state = agent.invoke("What is in my folder?", thread_id="t1")
        assert "acme_notes" in agent.chain.names  # the built chain the agent runs

    first, second = model.requests  # every request the model got, in order
    assert first.messages[-1].content == "Note: 0 tool result(s) this turn."
    assert second.messages[-1].content == "Note: 1 tool result(s) this turn."
    assert "ls" in first.tool_names
    assert state["acme_notes_seen"] == len(state["messages"]) - 1  # all but the answer
    assert state["messages"][-1].content == "There is nothing there yet."


class TestAcmeNotesConformance(PluginConformance):
    """Every rule of Antler's plugin guide, through real graphs (docs/plugins.md)."""

    plugin = "acme_notes"
    config = {"prefix": "Note"}
