"""The tool-result pipeline end to end: a 5 MB command output saved whole and read back in
pages, a raising tool and a denied tool, a run that ends normally, and checkpoints that hold
the synopsis rather than the output - on both chains, fused and unfused, sync and async."""

from __future__ import annotations

import re
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool

from antler.contracts.toolmeta import TOOL_META_KEY
from antler.contracts.tooloutput import TOOL_OUTPUT_KEY
from antler.plugin_api.paths import PathLayout
from tests.plugins.guard_support import ainvoke, call, make_agent, tool_results

LINES = 50_000
LINE_CHARS = 100  # 99 characters and the newline: 5,000,000 characters in all
COMMAND = (f"python3 -c \"import sys; sys.stdout.write(''.join('%08d ' % i + 'v' * 90 + "
           f"chr(10) for i in range({LINES})))\"")
CONFIG = ("tool_progress: {enabled: true}\n"
          "authorization:\n  enabled: true\n  default_role: user\n  provider_options:\n"
          "    roles:\n      user: [bash, read_file, flaky]\n")
READ_CALL = re.compile(r'read_file\(path="([^"]+)", start_line=1, end_line=(\d+)\)')


def flaky_tool() -> StructuredTool:
    def flaky(query: str) -> str:
        """Looks something up; the service is down."""
        raise ConnectionError(f"connection refused while looking up {query!r}")

    async def aflaky(query: str) -> str:
        return flaky(query)

    return StructuredTool.from_function(func=flaky, coroutine=aflaky, name="flaky")


def launch_tool() -> StructuredTool:
    def launch() -> str:
        """Launches; the caller's role may not."""
        return "launched"

    return StructuredTool.from_function(func=launch, name="launch")


class Reader:
    """The scripted model's paging: follows the read_file call the synopsis names."""

    def __init__(self) -> None:
        self.path = ""
        self.page = 0

    def first(self, messages: list[Any]) -> dict[str, Any]:
        match = READ_CALL.search(str(messages[-1].content))
        assert match, messages[-1].content[:500]
        self.path, self.page = match.group(1), int(match.group(2))
        return call("read_file", path=self.path, start_line=1, end_line=self.page)

    def next(self, messages: list[Any]) -> dict[str, Any]:
        return call("read_file", path=self.path, start_line=self.page + 1,
                    end_line=2 * self.page)

    def last(self, messages: list[Any]) -> dict[str, Any]:
        return call("read_file", path=self.path, start_line=LINES - 1, end_line=LINES + 5)


def expected_line(number: int) -> str:
    return f"{number - 1:08d} " + "v" * 90


@pytest.mark.parametrize(("chain", "fuse", "mode"), [
    ("lead", True, "sync"), ("lead", False, "async"),
    ("subagent", False, "sync"), ("subagent", True, "async")])
def test_five_megabytes_of_output_errors_and_refusals_in_one_run(tmp_path, chain, fuse, mode):
    home = tmp_path / "home"
    reader = Reader()
    script = [call("bash", command=COMMAND), reader.first, reader.next, reader.last,
              call("flaky", query="a"), call("flaky", query="b"), call("flaky", query="c"),
              call("launch"), call("launch"), "All done."]
    agent, model = make_agent(home, script, CONFIG, tools=[flaky_tool(), launch_tool()],
                              chain=chain, fuse=fuse)
    with agent:
        if mode == "async":
            # Ten model calls through the unfused graph, where every model hook is a
            # superstep of its own, take more than the default 100.
            state = ainvoke(agent, "go", thread_id="t1", recursion_limit=200)
        else:
            state = agent.invoke("go", thread_id="t1")
        history = list(agent.graph.get_state_history(agent.run_config("t1")))

    assert state["messages"][-1].content == "All done."
    bash, first, second, last, *failures = tool_results(state)

    # The whole output is in the file; the model has a synopsis and read it in pages.
    saved = bash.additional_kwargs[TOOL_OUTPUT_KEY]
    output = "\n".join(expected_line(n) for n in range(1, LINES + 1))  # bash drops the last \n
    assert saved["chars"] == len(output) == LINES * LINE_CHARS - 1 and saved["kind"] == "log"
    host = PathLayout(home).thread("default", "t1").mapper.to_host(saved["path"])
    assert host.read_text() == output
    assert len(bash.content) < 5_000 and bash.content.startswith("[Tool output saved")
    page = reader.page
    assert first.content.splitlines() == [expected_line(n) for n in range(1, page + 1)]
    assert second.content.splitlines() == [expected_line(n)
                                           for n in range(page + 1, 2 * page + 1)]
    assert last.content.splitlines() == [expected_line(LINES - 1), expected_line(LINES)]

    # Three failures answered as errors, two refusals; the run went on.
    flaky = [m for m in failures if m.name == "flaky"]
    launch = [m for m in failures if m.name == "launch"]
    assert [m.additional_kwargs[TOOL_META_KEY]["error_type"] for m in flaky] == \
        ["transient"] * 3
    assert [m.additional_kwargs[TOOL_META_KEY]["error_type"] for m in launch] == ["denied"] * 2
    # The third failure warned the model (in its request, not in state).
    warned = [m for m in model.calls[7] if getattr(m, "name", None) == "progress_hint"]
    assert len(warned) == 1 and "'flaky' is not making progress" in warned[0].content

    # No checkpoint holds the 5 MB: every ToolMessage there is the synopsis or a page.
    assert history
    for snapshot in history:
        for message in snapshot.values.get("messages", []):
            if isinstance(message, ToolMessage):
                assert len(str(message.content)) < 70_000
            assert getattr(message, "name", None) != "progress_hint"
