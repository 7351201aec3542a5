"""The battery itself: each broken sample fails exactly the check aimed at it.

The samples (`samples/`) each break one rule of docs/plugins.md section 4 and
keep every other; their conformance classes live in `broken_plugins.py`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from antler.testing.conformance import CHECKS, ConformanceFailure, run_conformance
from tests.testing.conformance.broken_plugins import BROKEN

Mismatched = BROKEN["sync_async"]

DOCS = Path(__file__).parents[3] / "docs" / "plugins.md"


# What each failure says, besides the rule: enough to find the fault without the source.
SAYS: dict[str, list[str]] = {
    "non_blocking": ["blocking_hook.abefore_model: Blocking call to time.sleep"],
    "sync_async": ['"sync"', '"async"'],
    "retry_injection": ["Remember to cite the dictionary."],
    "manifest": ["declared but not implemented: ['after_model']"],
    "resume": ["forgetful_counter_calls"],
    "hooks_run": ["wrap_model_call raised LookupError: the policy table acme.rules was not "
                  "found"],
    "request_mutation": ['"content": "Answer briefly."',
                         "changed the request it was given in place"],
    "state_writes": ["plugin 'title_writer' wrote state key 'title' (owned by plugin 'title') "
                     "in before_model"],
    "state_keys": ["state key 'thread_data' has two owners: plugin 'thread_data'"],
}
SAYS_PATTERN = {"history_work": r"wrap_model_call: [0-9.]+ ms per turn with 50 earlier "
                                r"messages, [0-9.]+ ms with 2000"}


EXHAUSTIVE_CHECKS = ("sync_async", "chains", "resume", "history_work")
"""The checks that run a sample's agents most (every compile mode in each chain, sync and
async; a resume in another process; threads of 2,000 messages): `make test` runs them over
the sample aimed at them, `make test-slow` over every sample."""


@pytest.mark.parametrize("aimed", list(BROKEN))
def test_a_broken_sample_fails_the_check_aimed_at_it_and_no_quicker_one(aimed: str) -> None:
    """The battery over one broken sample, but for the exhaustive checks not aimed at it:
    only the aimed check fails, and its message names the rule, the guide's section and
    what went wrong."""
    only_the_aimed_check_fails(aimed, [check for check in CHECKS
                                       if check == aimed or check not in EXHAUSTIVE_CHECKS])


@pytest.mark.slow
@pytest.mark.parametrize("aimed", list(BROKEN))
def test_a_broken_sample_fails_only_the_check_aimed_at_it(aimed: str) -> None:
    """The whole battery over one broken sample: only the aimed check fails."""
    only_the_aimed_check_fails(aimed, list(CHECKS))


def only_the_aimed_check_fails(aimed: str, checks: list[str]) -> None:
    outcomes = run_conformance(BROKEN[aimed], checks)

    assert set(outcomes) == set(checks)
    assert {check for check, (outcome, _) in outcomes.items() if outcome == "failed"} == \
        {aimed}, {check: message for check, (_, message) in outcomes.items() if message}
    # A chain that does not build (two owners of a state key), or hooks that raise, leave
    # nothing for the checks that compare runs: they skip, naming the check that reports it.
    reporter = {"state_keys": "the state_keys check", "hooks_run": "the hooks_run check"}
    assert all(outcome == "passed" or (outcome == "skipped" and aimed in reporter
                                       and reporter[aimed] in message)
               for check, (outcome, message) in outcomes.items() if check != aimed), outcomes
    message = outcomes[aimed][1]
    assert message.startswith(f"[{aimed}] rule: {CHECKS[aimed].title}.")
    assert f"see docs/plugins.md#{CHECKS[aimed].anchor}" in message
    for said in SAYS.get(aimed, []):
        assert said in message, (said, message)
    if aimed in SAYS_PATTERN:
        assert re.search(SAYS_PATTERN[aimed], message), message


def test_every_broken_sample_has_what_its_failure_says() -> None:
    assert set(SAYS) | set(SAYS_PATTERN) == set(BROKEN)


def test_every_rule_has_its_anchor_in_the_plugin_guide() -> None:
    anchors = set(re.findall(r'<a id="([a-z0-9-]+)"></a>', DOCS.read_text(encoding="utf-8")))

    assert {rule.anchor for rule in CHECKS.values()} <= anchors


def test_a_check_fails_as_a_plain_pytest_failure_and_a_skip_keeps_its_reason() -> None:
    class Skipping(Mismatched):
        skip_checks = {"sync_async": "the async form is being rewritten (ACME-7)"}

    with pytest.raises(pytest.fail.Exception) as failed:
        Mismatched().test_sync_async()
    with pytest.raises(pytest.skip.Exception) as skipped:
        Skipping().test_sync_async()

    assert str(failed.value).startswith("[sync_async] rule:")
    assert "the async form is being rewritten (ACME-7)" in str(skipped.value)


def test_a_misspelt_check_name_is_a_clear_error() -> None:
    class Misspelt(Mismatched):
        skip_checks = {"non_blockin": "typo"}

    with pytest.raises(Exception, match=r"unknown checks \['non_blockin'\].*non_blocking"):
        Misspelt.battery()


def test_a_plugin_that_is_not_installed_fails_the_manifest_check() -> None:
    class Missing(Mismatched):
        plugin = "mismatched_hok"

    with pytest.raises(ConformanceFailure,
                       match=r"no installed plugin is named 'mismatched_hok'.*mismatched_hook"):
        Missing.battery()
