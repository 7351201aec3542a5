"""tool_output_budget: oversized results saved to the thread's outputs with a typed synopsis and
the read_file call to page through them; the fallback cut when saving fails; exempt tools,
multimodal results, history shown shortened - through real graphs, fused and unfused, sync
and async, on both chains."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool

from antler.contracts.toolmeta import TOOL_META_KEY
from antler.contracts.tooloutput import TOOL_OUTPUT_KEY, TOOL_RESULTS_DIRNAME
from antler.errors import ConfigError
from antler.plugin_api.paths import PathLayout
from antler.plugins.tool_output_budget.config import ToolOutputConfig
from antler.plugins.tool_output_budget.middleware import ToolOutputBudgetMiddleware
from antler.plugins.tool_output_budget.synopsis import (
    PARSE_LIMIT,
    cut,
    describe,
    head_and_tail,
)
from antler.testing import assert_before
from tests.plugins.guard_support import ainvoke, call, calls, make_agent, tool_results

MODES = [pytest.param(fuse, mode, id=f"{'fused' if fuse else 'unfused'}-{mode}")
         for fuse in (True, False) for mode in ("sync", "async")]
SMALL = "tool_output: {tool_overrides: {echo: 100}}\n"
"""The `echo` test tool is budgeted above 100 characters (the default is 12,000)."""
READ_CALL = re.compile(r'read_file\(path="([^"]+)", start_line=(\d+), end_line=(\d+)\)')


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def echo_tool(name: str = "echo") -> StructuredTool:
    def run(text: str) -> str:
        return text

    return StructuredTool.from_function(func=run, coroutine=_async_echo, name=name,
                                        description="Returns its text.")


async def _async_echo(text: str) -> str:
    return text


def blocks_tool() -> StructuredTool:
    def run(kind: str) -> Any:
        if kind == "image":
            return [{"type": "text", "text": "y" * 500},
                    {"type": "image", "base64": "AAAA", "mime_type": "image/png"}]
        return [{"type": "text", "text": "a" * 300}, {"type": "text", "text": "b" * 300}]

    return StructuredTool.from_function(func=run, name="blocks", description="Content blocks.")


def outputs(home: Path, thread: str = "t1") -> Path:
    return PathLayout(home).thread("default", thread).outputs


def host_of(home: Path, virtual: str, thread: str = "t1") -> Path:
    return PathLayout(home).thread("default", thread).mapper.to_host(virtual)


def invoke(agent: Any, mode: str, message: Any = "go", thread: str = "t1") -> dict[str, Any]:
    with agent:
        if mode == "async":
            return ainvoke(agent, message, thread_id=thread)
        return agent.invoke(message, thread_id=thread)


def record(message: ToolMessage) -> dict[str, Any]:
    return dict(message.additional_kwargs[TOOL_OUTPUT_KEY])


# -- placement and configuration -----------------------------------------------------------------


@pytest.mark.parametrize("chain", ["lead", "subagent"])
def test_on_by_default_as_the_outermost_tool_wrapper(home, chain):
    agent, _ = make_agent(home, ["hi"], chain=chain)
    names = agent.chain.names
    assert names.index("tool_output_budget") == 1  # right after input_sanitization
    assert_before(agent.chain, "tool_output_budget", "tool_result_sanitization")
    agent, _ = make_agent(home, ["hi"], "tool_output: {enabled: false}\n", chain=chain)
    assert "tool_output_budget" not in agent.chain.names


@pytest.mark.parametrize(("section", "expected"), [
    ("{storage_subdir: ../escape}", "one folder name"),
    ("{storage_subdir: /abs}", "one folder name"),
    ("{storage_subdir: ..}", "one folder name"),
    ("{tool_overrides: {bash: -1}}", "0 or more"),
    ("{fallback_max_chars: 100}", "exceed fallback_max_chars"),
    ("{externalise_min_chars: 5}", "externalize_min_chars"),
])
def test_bad_config_is_refused_with_what_to_change(home, section, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        make_agent(home, ["hi"], f"tool_output: {section}\n")


# -- saving --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fuse", "mode"), MODES)
def test_a_result_over_the_threshold_is_saved_and_replaced_by_a_synopsis(home, fuse, mode):
    exact, over = "x" * 100, "\n".join(f"row {i} of the report" for i in range(40))
    script = [calls(("echo", {"text": exact}), ("echo", {"text": over}),
                    ("echo", {"text": exact + "y"})), "done"]
    agent, model = make_agent(home, script, SMALL, tools=[echo_tool()], fuse=fuse)
    state = invoke(agent, mode)
    kept, saved, one_over = tool_results(state)
    assert kept.content == exact and TOOL_OUTPUT_KEY not in kept.additional_kwargs
    assert host_of(home, record(one_over)["path"]).read_text() == exact + "y"
    path = record(saved)["path"]
    assert re.fullmatch(rf"/mnt/user-data/outputs/{re.escape(TOOL_RESULTS_DIRNAME)}/"
                        r"echo-[0-9a-f]{12}\.txt", path)
    assert host_of(home, path).read_text() == over
    assert record(saved) == {"path": path, "chars": len(over), "kind": "text",
                             "externalized": True}
    assert f'read_file(path="{path}", start_line=1, end_line=' in saved.content
    assert saved.content.count("row 0 of the report") == 1
    assert "row 39 of the report" in saved.content
    assert saved.additional_kwargs[TOOL_META_KEY]["status"] == "success"  # other keys kept
    assert saved in model.calls[-1]


def test_json_tables_and_logs_are_described_by_their_kind(home):
    document = json.dumps({"items": [{"id": i} for i in range(30)], "total": 30,
                           "next": None})
    table = "name,size\n" + "\n".join(f"file{i}.txt,{i * 10}" for i in range(30))
    script = [calls(("echo", {"text": document}), ("echo", {"text": table})),
              call("bash", command="for i in $(seq 1 60); do echo \"step $i\"; done; "
                                   "echo 'ERROR: disk full'"),
              "done"]
    config = "tool_output: {tool_overrides: {echo: 100, bash: 100}}\n"
    agent, _ = make_agent(home, script, config, tools=[echo_tool()])
    as_json, as_table, as_log = tool_results(invoke(agent, "sync"))
    assert record(as_json)["kind"] == "json" and record(as_json)["path"].endswith(".json")
    assert "3 top-level keys: items (array of 30), total (number), next (null)" \
        in as_json.content
    assert record(as_table)["kind"] == "csv"
    assert "CSV, 2 columns, about 30 rows" in as_table.content and "name, size" \
        in as_table.content
    assert record(as_log)["kind"] == "log" and record(as_log)["path"].endswith(".log")
    assert "1 lines mention an error or failure (first at lines 61)" in as_log.content


@pytest.mark.parametrize(("fuse", "mode"), MODES)
def test_yaml_xml_code_and_tsv_are_described_by_their_kind(home, fuse, mode):
    documents = {
        "yaml": "name: app\nversion: 2\nservices:\n"
                + "".join(f"  svc{i}:\n    image: img{i}\n" for i in range(20)),
        "xml": '<?xml version="1.0"?>\n<catalog>\n'
               + "".join(f'  <book id="{i}"><title>T{i}</title></book>\n' for i in range(20))
               + "</catalog>\n",
        "code": "import os\n\n" + "".join(f"def step_{i}(x):\n    y = x + {i}\n    return y\n\n"
                                            for i in range(20)),
        "tsv": "name\tsize\n" + "".join(f"file{i}\t{i}\n" for i in range(40)),
    }
    script = [calls(*(("echo", {"text": text}) for text in documents.values())), "done"]
    config = "tool_output: {tool_overrides: {echo: 100}}\n"
    agent, _ = make_agent(home, script, config, tools=[echo_tool()], fuse=fuse)
    results = tool_results(invoke(agent, mode))
    assert [record(result)["kind"] for result in results] == list(documents)
    as_yaml, as_xml, as_code, as_tsv = results
    assert "mapping with 3 top-level keys: name, version, services" in as_yaml.content
    assert "root element <catalog>" in as_xml.content
    assert "kind: code" in as_code.content
    assert "TSV, 2 columns, about 40 rows" in as_tsv.content


def test_prose_and_logs_are_not_taken_for_yaml_or_code():
    prose = "The quick brown fox jumps.\nNote: it was sunny, mostly.\nThen it rained.\n"
    log = "".join(f"2024-01-01 10:0{i} INFO key: value {i}\n" for i in range(9))
    assert describe(prose).kind == "text"
    assert describe(log).kind == "log"
    assert describe("import os\nx = 1;\n" * 10, "bash").kind == "log"


def test_a_result_of_long_lines_is_read_back_in_character_ranges(home):
    document = json.dumps({"items": [{"id": i, "name": f"item {i}"} for i in range(2000)]})

    def read_range(messages: list[Any]) -> dict[str, Any]:
        command = re.search(r'bash\(command="([^"]+)"\)', messages[-1].content).group(1)
        return call("bash", command=command.replace("+1 ", "+8001 "))

    agent, _ = make_agent(home, [call("echo", text=document), read_range, "done"], SMALL,
                          tools=[echo_tool()])
    saved, second_range = tool_results(invoke(agent, "sync"))
    assert record(saved)["kind"] == "json"
    assert second_range.content == document[8000:16000]


def test_the_saved_file_is_read_back_in_pages_without_being_budgeted_again(home):
    text = "\n".join(f"line {i:04d} " + "z" * 60 for i in range(1, 501))

    def read_back(messages: list[Any]) -> dict[str, Any]:
        path, first, last = READ_CALL.search(messages[-1].content).groups()  # type: ignore
        return call("read_file", path=path, start_line=int(first), end_line=int(last) + 400)

    agent, _ = make_agent(home, [call("echo", text=text), read_back, "done"], SMALL,
                          tools=[echo_tool()])
    saved, page = tool_results(invoke(agent, "sync"))
    assert record(saved)["externalized"]
    assert TOOL_OUTPUT_KEY not in page.additional_kwargs
    assert page.content.startswith("line 0001 ") and len(page.content) > 12_000
    assert page.content.splitlines() == text.splitlines()[:len(page.content.splitlines())]


def test_tool_names_cannot_leave_the_results_folder_and_cjk_is_kept(home):
    text = "中文内容完整保存" * 50
    agent, _ = make_agent(home, [call("../../evil", text=text), "done"],
                          "tool_output: {tool_overrides: {../../evil: 100}}\n",
                          tools=[echo_tool("../../evil")])
    [saved] = tool_results(invoke(agent, "sync"))
    path = record(saved)["path"]
    assert path.startswith(f"/mnt/user-data/outputs/{TOOL_RESULTS_DIRNAME}/evil-")
    assert host_of(home, path).read_text(encoding="utf-8") == text


def test_per_tool_overrides_and_exempt_tools(home):
    long = "w " * 200
    config = "tool_output: {tool_overrides: {echo: 0, other: 100}, exempt_tools: [third]}\n"
    tools = [echo_tool(), echo_tool("other"), echo_tool("third")]
    script = [calls(("echo", {"text": long}), ("other", {"text": long}),
                    ("third", {"text": long})), "done"]
    agent, _ = make_agent(home, script, config, tools=tools)
    never, saved, exempt = tool_results(invoke(agent, "sync"))
    assert never.content == long and exempt.content == long
    assert record(saved)["externalized"]


def test_a_failed_write_falls_back_to_head_and_tail_within_the_maximum(home):
    outputs(home).mkdir(parents=True)
    (outputs(home) / TOOL_RESULTS_DIRNAME).write_text("a file where the folder should be")
    text = "".join(f"{i:05d}\n" for i in range(5000))
    config = ("tool_output: {tool_overrides: {echo: 100}, fallback_max_chars: 1000, "
              "fallback_head_chars: 300, fallback_tail_chars: 200}\n")
    agent, _ = make_agent(home, [call("echo", text=text), "done"], config, tools=[echo_tool()])
    [cut_result] = tool_results(invoke(agent, "sync"))
    assert record(cut_result) == {"path": None, "chars": len(text), "kind": "text",
                                  "externalized": False}
    assert len(cut_result.content) <= 1000
    assert cut_result.content.startswith("00000\n") and cut_result.content.endswith("04999\n")
    assert "characters omitted: the full output could not be saved" in cut_result.content


def test_multimodal_results_pass_and_text_blocks_are_budgeted(home):
    config = "tool_output: {tool_overrides: {blocks: 100}}\n"
    script = [calls(("blocks", {"kind": "image"}), ("blocks", {"kind": "text"})), "done"]
    agent, _ = make_agent(home, script, config, tools=[blocks_tool()])
    image, text = tool_results(invoke(agent, "sync"))
    assert isinstance(image.content, list) and TOOL_OUTPUT_KEY not in image.additional_kwargs
    assert host_of(home, record(text)["path"]).read_text() == "a" * 300 + "\n" + "b" * 300


@pytest.mark.parametrize("fuse", [True, False])
def test_oversized_history_is_shown_shortened_in_the_request_only(home, fuse):
    big = "\n".join(f"old line {i}" for i in range(3000))
    history = [HumanMessage("earlier"),
               AIMessage("", tool_calls=[{"name": "echo", "args": {}, "id": "old1"}]),
               ToolMessage(big, tool_call_id="old1", name="echo"),
               AIMessage("noted"), HumanMessage("now?")]
    agent, model = make_agent(home, ["fine"], fuse=fuse)
    with agent:
        # The server seeds the earlier exchange; callers send only human messages.
        agent.graph.update_state(agent.run_config("t1"), {"messages": history[:-1]})
        state = agent.graph.invoke({"messages": history[-1:]}, config=agent.run_config("t1"),
                                   context=agent.context("t1"))
    [sent] = [m for m in model.calls[0] if isinstance(m, ToolMessage)]
    assert sent.content.startswith("[Earlier tool output shown shortened: ")
    assert len(sent.content) < 12_000 and "old line 2999" in sent.content
    [stored] = tool_results(state)
    assert stored.content == big


def test_ls_does_not_list_saved_results_as_the_agents_files(home):
    script = [call("echo", text="q" * 500), call("ls", path="/mnt/user-data/outputs"),
              call("ls", path=f"/mnt/user-data/outputs/{TOOL_RESULTS_DIRNAME}"), "done"]
    agent, _ = make_agent(home, script, SMALL, tools=[echo_tool()])
    saved, listing, inside = tool_results(invoke(agent, "sync"))
    assert TOOL_RESULTS_DIRNAME not in listing.content
    assert record(saved)["path"] in inside.content


def test_without_the_budget_bash_keeps_its_own_cap(home):
    script = [call("bash", command="head -c 200000 /dev/zero | tr '\\0' y"), "done"]
    agent, _ = make_agent(home, script, "tool_output: {enabled: false}\n")
    [result] = tool_results(invoke(agent, "sync"))
    assert result.content.startswith("y" * 1000)
    assert "[output truncated: showing the first 65536 of 200000 characters]" in result.content


def test_output_past_the_sandbox_capture_is_saved_with_the_sandboxs_own_note(home):
    script = [call("bash", command="head -c 300000 /dev/zero | tr '\\0' k"), "done"]
    agent, _ = make_agent(home, script, "sandbox: {command_capture_bytes: 100000}\n")
    [result] = tool_results(invoke(agent, "sync"))
    text = host_of(home, record(result)["path"]).read_text()
    assert text == "k" * 100_000 + "\n[output truncated: 200000 more bytes not shown]"
    assert "[output truncated: 200000 more bytes not shown]" in result.content
    assert result.additional_kwargs[TOOL_META_KEY]["status"] == "partial_success"


# -- the synopsis --------------------------------------------------------------------------------


def test_log_lines_and_tab_indented_output_are_not_tables():
    log = "\n".join(f"2024-05-01 12:00:{i:02d} INFO worker, shard {i}, ok" for i in range(40))
    assert describe(log).kind == "log"
    indented = "\n".join(f"\tcase {i}:\treturn {i}" for i in range(40))
    assert describe(indented, "echo").kind == "text"


def test_csv_with_a_quoted_first_row_is_a_table():
    table = '"name, full","size"\n' + "\n".join(f'"n{i}, x",{i}' for i in range(10))
    shape = describe(table)
    assert shape.kind == "csv" and "first row: name, full, size" in shape.details


def test_very_large_input_is_not_parsed():
    huge = "[" + ",".join(["1"] * (PARSE_LIMIT // 2 + 10)) + "]"
    assert len(huge) > PARSE_LIMIT and describe(huge).kind == "text"


def test_head_and_tail_never_exceed_what_was_asked_and_never_overlap():
    text = "".join(f"{i:03d} abcdefgh\n" for i in range(200))
    head, tail = head_and_tail(text, 100, 50)
    assert len(head) <= 100 and len(tail) <= 50
    assert head.endswith("\n") and text.endswith(tail) and tail[:1] != "\n"
    assert text.index(tail) >= len(head)
    for limit in (60, 100, 1000):
        assert len(cut(text, limit, 40, 30, "x")) <= limit


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 30), st.dictionaries(st.sampled_from(["bash", "ls"]), st.integers(0, 30),
                                           max_size=2),
       st.sampled_from([0, 12, 40]), st.sampled_from(["bash", "ls", "read_file", None]),
       st.integers(0, 45), st.booleans())
def test_the_size_pre_check_never_changes_which_results_are_over(
        threshold, overrides, fallback, name, size, budgeted):
    """Results no longer than every threshold skip the rules; the answer stays the rules'."""
    config = ToolOutputConfig(externalize_min_chars=threshold, tool_overrides=overrides,
                              fallback_max_chars=fallback, fallback_head_chars=0,
                              fallback_tail_chars=0)
    message = ToolMessage("x" * size, tool_call_id="c", name=name, additional_kwargs=(
        {TOOL_OUTPUT_KEY: {"chars": size}} if budgeted else {}))
    limit = overrides.get(name or "", threshold)
    expected = name not in config.exempt_tools and not budgeted and (
        size > limit if limit else bool(fallback) and size > fallback)
    assert ToolOutputBudgetMiddleware(None, config)._over(message) is expected
