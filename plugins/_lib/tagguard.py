"""Neutralizing forged framework tags in untrusted text.

Plugins write framework context into messages as tags (``<uploaded_files>``,
``<system_reminder>``, ...) and models treat text inside such tags as coming
from the platform. Text a user typed or a tool fetched from the web must not be
able to forge them. Two plugins share this mechanism: ``input_sanitization``
(the user's message) and ``tool_result_sanitization`` (remote tool output).

What is reserved
    `ReservedTags`: the tags every plugin of the chain declares in its
    manifest (``emits_tags``) plus `BUILTIN_RESERVED_TAGS`, the common
    injection tags and chat-template tokens (``system``, ``instruction``,
    ``<|im_start|>``, ...). Names are compared in a normalized form
    (`normalize_tag_name`): case-folded, NFKC-folded (fullwidth and
    mathematical letters become ASCII), Cyrillic/Greek look-alike letters
    mapped to Latin, zero-width and combining characters dropped, and the
    separators ``- _ . : | / \\`` and whitespace removed. So ``system-reminder``
    covers ``system_reminder``, ``SYSTEM REMINDER``, ``System.Reminder``,
    ``<sys\\u200btem-reminder>`` (zero-width space) and ``<\\u0455ystem-reminder>``
    (Cyrillic dze for ``s``).

What counts as a tag
    An opener - ``<`` or a look-alike (`TAG_OPENERS`: fullwidth, small, angle
    quotation marks and brackets, arrowheads) - then any
    whitespace, ``/``, ``!`` or ``?``, then up to `MAX_NAME_WORDS`
    whitespace-separated words. It is reserved when the first word, or the
    concatenation of the first few words (``< system reminder >``), or the
    local part of a namespaced first word (``<x:system>``), normalizes to a
    reserved name. Character references inside the name are decoded first
    (``<&#115;ystem>``). Attributes, newlines, a missing ``>`` (unclosed
    tags) and nesting do not matter: only the opener and the name decide.

What neutralizing does
    The opener of a reserved tag becomes ``&lt;`` and its closer (the first
    ``>`` or look-alike before the next opener) becomes ``&gt;``; openers or
    closers doubled around it (``<<SYS>>``) are escaped with it. Nothing else
    changes: the user's words stay, and the text reads as a literal tag.

Character references are inert
    ``&lt;system&gt;``, ``&#60;system&#62;`` and ``&#x3c;system>`` are left as
    they are: they are exactly the form this module produces, so a model sees
    a forged entity-encoded tag and a neutralized real one identically, as
    literal text. Treating references as openers too would leave no escaped
    form that is not itself an opener. Nothing in Antler decodes references
    between sanitization and the model; a component that HTML-decodes text
    before showing it to a model must neutralize again after decoding.

Boundary markers
    `USER_INPUT_BEGIN` / `USER_INPUT_END` are plain text, not tags. Forged
    copies (any case, spacing, separators, zero-width characters, look-alike
    brackets such as fullwidth ``\\uff3b`` or ``\\u3010``, closed or not) have their brackets
    replaced by parentheses: ``[END USER INPUT]`` reads ``(END USER INPUT)``.

Cost
    Linear in the length of the text: no backtracking regular expression. A
    candidate opener's look-ahead stops at the next opener, so no character is
    scanned on behalf of more than one opener of each kind.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, NamedTuple

from pydantic import AfterValidator

__all__ = [
    "BOUNDARY_MARKERS",
    "BUILTIN_RESERVED_TAGS",
    "MAX_NAME_WORDS",
    "USER_INPUT_BEGIN",
    "USER_INPUT_END",
    "ExtraTagNames",
    "Finding",
    "Neutralized",
    "ReservedTags",
    "find_reserved",
    "neutralize",
    "normalize_tag_name",
]

INJECTION_VOCABULARY: tuple[str, ...] = (
    "ignore", "ignore_previous_instructions", "ignore_all_previous_instructions",
    "disregard", "forget", "new_instructions", "updated_instructions", "jailbreak",
    "developer_mode", "dan", "root", "sudo", "priority", "urgent", "policy", "rules",
    "security", "secret", "confidential", "hidden", "internal", "trusted", "authority",
)
"""Words prompt-injection attacks use as tags to make text look authoritative."""

BUILTIN_RESERVED_TAGS: tuple[str, ...] = (
    # roles and instructions
    "system", "system_reminder", "system_message", "system_prompt", "sys", "developer",
    "instruction", "instructions", "role", "assistant", "user", "human", "ai", "model",
    "context", "important", "admin", "override", "prompt",
    # tool and function calling
    "tool", "tools", "tool_call", "tool_calls", "tool_result", "tool_results",
    "tool_response", "tool_output", "tool_use", "function", "functions", "function_call",
    "function_calls", "function_result", "function_results", "invoke",
    # reasoning blocks
    "think", "thinking", "reasoning",
    # chat-template special tokens (ChatML, Llama, Gemma): a self-hosted model may
    # read them from plain text as the real token
    "im_start", "im_end", "im_sep", "endoftext", "eot_id", "eom_id", "begin_of_text",
    "start_header_id", "end_header_id", "start_of_turn", "end_of_turn", "s", "inst",
    # Antler's own boundary markers, spelled as tags
    "begin_user_input", "end_user_input",
    # tags harness layers write into the conversation (memory, todo lists, durable
    # context, dates, skills, deferred tools), whether or not a plugin of this chain
    # declares them: text crosses chains and harnesses
    "memory", "memories", "user_memory", "todo_list", "todo_list_system", "todos",
    "durable_context", "durable_context_data", "current_date", "date", "skill",
    "skills", "skill_content", "slash_skill_activation", "user_request",
    "available_deferred_tools", "mcp_routing_hints", "human_input", "clarification",
    "summary", "previous_summary", "conversation", "messages", "content",
    # the prompts LangChain's built-in middlewares and the title plugin send
    "primary_objective", "objective_information", "user_message", "assistant_reply",
    # the injection vocabulary: words attacks wrap instructions in
    *INJECTION_VOCABULARY,
)
"""Reserved in every chain, in addition to the tags the chain's plugins declare."""

USER_INPUT_BEGIN = "[BEGIN USER INPUT]"
USER_INPUT_END = "[END USER INPUT]"
BOUNDARY_MARKERS: tuple[str, ...] = (USER_INPUT_BEGIN, USER_INPUT_END)
"""Plain-text markers around the user's own words in the model-bound request."""

MAX_NAME_WORDS = 6
"""How many words of a tag head are joined when looking for a spaced-out name."""

TAG_OPENERS = "<\uff1c\ufe64\u2039\u3008\u2329\u27e8\u02c2\u1438\u276e\u276c\u29fc"
TAG_CLOSERS = ">\uff1e\ufe65\u203a\u3009\u232a\u27e9\u02c3\u1433\u276f\u276d\u29fd"
MARKER_OPENERS = "[\uff3b\u3010\u3014\u27e6\u3016\u301a\u2045"
MARKER_CLOSERS = "]\uff3d\u3011\u3015\u27e7\u3017\u301b\u2046"

_TAG_ESCAPE = ("&lt;", "&gt;")
_MARKER_ESCAPE = ("(", ")")

# Characters removed when normalizing a name (NFKC has already folded the
# fullwidth forms of most of them).
_SEPARATORS = frozenset(
    "-_.:|/\\!?\u00b7\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u2043\ufe58\ufe63\u30fb"
)
# Latin look-alikes from Cyrillic and Greek (lower case: applied after casefold).
_CONFUSABLES = str.maketrans({
    "\u0430": "a", "\u0435": "e", "\u043e": "o", "\u0440": "p", "\u0441": "c",
    "\u0443": "y", "\u0445": "x", "\u0456": "i", "\u0458": "j", "\u0455": "s",
    "\u0501": "d", "\u04bb": "h", "\u04cf": "l", "\u051b": "q", "\u051d": "w",
    "\u0475": "v", "\u0491": "r", "\u03b1": "a", "\u03bf": "o", "\u03b9": "i",
    "\u03ba": "k", "\u03bd": "v", "\u03c1": "p", "\u03c5": "u", "\u03c7": "x",
    "\u03b5": "e", "\u03c4": "t", "\u0131": "i", "\u0261": "g",
})
_ASCII_DROP = str.maketrans("", "", "-_.:|/\\!?")
_ASCII_CONTROLS = str.maketrans("", "", "".join(map(chr, [*range(32), 127])))
_DROPPED_CATEGORIES = frozenset({"Cf", "Mn", "Me", "Zs", "Zl", "Zp", "Cc"})

_TAG_OPENER_SET = frozenset(TAG_OPENERS)
_TAG_CLOSER_SET = frozenset(TAG_CLOSERS)
_MARKER_OPENER_SET = frozenset(MARKER_OPENERS)
_MARKER_CLOSER_SET = frozenset(MARKER_CLOSERS)
_TAG_LEAD = frozenset("/!?\uff0f")
_TAG_WORD_STOP = frozenset("/=\"'`\uff0f") | _TAG_OPENER_SET | _TAG_CLOSER_SET
_MARKER_WORD_STOP = _MARKER_OPENER_SET | _MARKER_CLOSER_SET

# A candidate is an opener followed by something that could start a name. The
# pattern has no quantifier, so it cannot backtrack.
_CANDIDATES = re.compile(
    "[" + re.escape(TAG_OPENERS + MARKER_OPENERS) + "]"
    "(?=[^" + re.escape(TAG_OPENERS + TAG_CLOSERS + MARKER_OPENERS + MARKER_CLOSERS) + "])"
)
_MARKER_NAMES = frozenset({"beginuserinput", "enduserinput"})


def normalize_tag_name(name: str) -> str:
    """The form in which tag names are compared (see the module docstring)."""
    return _normalize(html.unescape(name) if "&" in name else name)


def _names_not_blank(names: list[str]) -> list[str]:
    for name in names:
        if not normalize_tag_name(name):
            raise ValueError(f"tag name {name!r} is empty once case and separators are "
                             "ignored; give a name with letters or digits")
    return names


ExtraTagNames = Annotated[list[str], AfterValidator(_names_not_blank)]
"""The type of a sanitizer config's `extra_tags`: each name has a letter or digit once
normalized (a name that normalizes to nothing would reserve nothing)."""


def _normalize(name: str) -> str:
    """`normalize_tag_name` of a name whose character references are already decoded."""
    if name.isascii():
        # Control characters (a NUL inside `<sys\0tem>`) are dropped like separators.
        return "".join(name.lower().translate(_ASCII_DROP).split()).translate(_ASCII_CONTROLS)
    text = unicodedata.normalize("NFKC", name).casefold().translate(_CONFUSABLES)
    return "".join(
        ch for ch in text
        if ch not in _SEPARATORS and not ch.isspace()
        and unicodedata.category(ch) not in _DROPPED_CATEGORIES
    )


class ReservedTags:
    """A set of reserved tag names, matched in normalized form.

    `ReservedTags.for_chain` is what the sanitizing plugins use: the built-in
    list plus every ``emits_tags`` of the given plugin specs, so a plugin that
    starts emitting a new tag is covered as soon as it declares it.
    """

    __slots__ = ("_keys", "_names", "_prefixes")

    def __init__(self, names: Iterable[str] = (), *, builtin: bool = True) -> None:
        keys: dict[str, str] = {}
        for name in [*(BUILTIN_RESERVED_TAGS if builtin else ()), *names]:
            if not isinstance(name, str):
                raise TypeError(f"a reserved tag name must be a string, got {type(name).__name__}")
            key = normalize_tag_name(name)
            if not key:
                raise ValueError(f"reserved tag name {name!r} is empty once normalized")
            keys.setdefault(key, name)
        self._keys = keys
        self._names = tuple(sorted(set(keys.values())))
        self._prefixes = frozenset(key[:i] for key in keys for i in range(1, len(key) + 1))

    @classmethod
    def for_chain(cls, specs: Iterable[Any], extra: Iterable[str] = ()) -> ReservedTags:
        """Built-ins, every ``emits_tags`` of `specs` (plugin specs), and `extra`."""
        declared = [tag for spec in specs for tag in getattr(spec, "emits_tags", None) or ()]
        return cls([*declared, *extra])

    @classmethod
    def for_build(cls, context: Any, extra: Iterable[str] = ()) -> ReservedTags:
        """What a sanitizing plugin covers, from its `antler.plugin_api.BuildContext`.

        The tags of every plugin in the chain being built (`chain_specs()`) and,
        when the build has a registry, of every installed plugin: text crosses
        chains (a subagent's answer quoting a fetched page becomes a tool result
        of the lead, whose chain has plugins, like uploads, the subagent's has
        not), and reserving a tag nobody emits costs nothing.
        """
        specs = list(context.chain_specs())
        registry = getattr(getattr(context, "plan", None), "registry", None)
        if registry is not None:
            specs += list(registry.specs.values())
        return cls.for_chain(specs, extra)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and normalize_tag_name(name) in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"ReservedTags({len(self._keys)} names)"

    @property
    def names(self) -> tuple[str, ...]:
        """The names as declared (one spelling per normalized name), sorted."""
        return self._names

    def union(self, names: Iterable[str]) -> ReservedTags:
        return ReservedTags([*self._keys.values(), *names], builtin=False)

    def _match(self, words: list[str]) -> str | None:
        """The reserved key the head `words` spell, if any."""
        words = _decoded(words)
        if not words:
            return None
        joined, found = "", None
        for word in words:
            joined += _normalize(word)
            if joined in self._keys:
                found = joined  # keep going: report the longest name spelled
            if joined not in self._prefixes:
                break
        if found is not None:
            return found
        first = words[0]
        for colon in (":", "\uff1a"):
            if colon in first:
                local = _normalize(first.rsplit(colon, 1)[1])
                if local in self._keys:
                    return local
        return None


class Finding(NamedTuple):
    """One forged tag or boundary marker found in a text."""

    kind: str
    """``"tag"`` or ``"marker"``."""
    name: str
    """The normalized name that matched (``"systemreminder"``, ``"enduserinput"``)."""
    offset: int
    """Index of its opener in the original text."""


class Neutralized(NamedTuple):
    """The result of `neutralize`: the safe text and what was found in the original."""

    text: str
    findings: tuple[Finding, ...]

    @property
    def changed(self) -> bool:
        return bool(self.findings)

    def names(self) -> list[str]:
        """The distinct normalized names found, sorted (for audit records)."""
        return sorted({finding.name for finding in self.findings})


def _decoded(words: list[str]) -> list[str]:
    """`words` with character references decoded and split again where they decode to a
    space or a character that ends a name (``<system&gt;``, ``<system&#32;reminder>``)."""
    if not any("&" in word for word in words):
        return words
    decoded = html.unescape(" ".join(words))
    start = 0
    while start < len(decoded) and (decoded[start].isspace() or decoded[start] in _TAG_LEAD
                                    or unicodedata.category(decoded[start]) == "Cf"):
        start += 1
    end = start
    while end < len(decoded) and decoded[end] not in _TAG_WORD_STOP:
        end += 1
    return decoded[start:end].split()[:MAX_NAME_WORDS]


def _skip(text: str, j: int, n: int, lead: frozenset[str]) -> int:
    while j < n:
        ch = text[j]
        if ch.isspace() or ch in lead or unicodedata.category(ch) == "Cf":
            j += 1
        else:
            break
    return j


def _words(text: str, j: int, n: int, stop: frozenset[str]) -> tuple[list[str], int]:
    """Up to `MAX_NAME_WORDS` whitespace-separated words from `j`, and where they end."""
    words: list[str] = []
    while j < n and len(words) < MAX_NAME_WORDS:
        start = j
        while j < n and text[j] not in stop and not text[j].isspace():
            j += 1
        if j == start:
            break
        words.append(text[start:j])
        k = j
        while k < n and text[k].isspace():
            k += 1
        if k == j:
            break
        j = k
    return words, j


def _find_closer(text: str, j: int, n: int, closers: frozenset[str],
                 openers: frozenset[str]) -> int | None:
    while j < n:
        ch = text[j]
        if ch in closers:
            return j
        if ch in openers:
            return None
        j += 1
    return None


class _CodeReading:
    """Tells code from tags in remote content, in one pass over the candidates.

    Fetched pages and files hold code whose angle brackets are not tags:
    comparisons and shifts (``if n < context``, ``x << tool``) and include lines
    (``#include <memory>``). A tag is ``<`` directly followed by its name, as a
    tag is written; so an ASCII ``<`` is read as code, and left alone, only when:

    * it is the header of an include line: the first ``<`` after ``#include`` or
      ``#import`` at the start of a line (the rest of the line is not exempt);
    * it is a spaced comparison or shift: ``<`` or ``<<`` with whitespace on
      both sides, after an operand (an identifier character, a digit or a
      closing bracket), and the reserved name is ended by code punctuation
      (``if n < model:``) or, after its last word, neither closed
      (``a < system >``, ``a < system/>``, ``a < system reminder >``, across
      newlines too) nor followed by an attribute (``a < system trust="full">``).
      So words that only spell a name together stay code when they do not
      close as a tag: ``x < user`` ending one line and ``memory = 2`` starting
      the next.

    Everything else is a tag, closed or not, whatever precedes it: ``x<system>``,
    ``if a <b: <system>``, a generic whose type is a reserved name
    (``List<Model>`` reads ``List&lt;Model&gt;``). A closing tag (``</system>``)
    is never code. Look-alike openers are never code either: nobody writes
    fullwidth brackets in a program. Each look stops after 64 characters or at
    the next opener, so the reading stays linear.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.scanned = 0
        self.line_start = 0

    def is_code(self, i: int, name: str, words: list[str], first_word_end: int) -> bool:
        text = self.text
        if text[i] != "<" or i + 1 >= len(text):
            return False
        newline = text.rfind("\n", self.scanned, i)
        if newline != -1:
            self.line_start = newline + 1
        self.scanned = i
        if i - self.line_start <= _LOOK and \
                text[self.line_start:i].strip(" \t") in _INCLUDE_DIRECTIVES:
            return True
        if text[i + 1] not in " \t":
            return False    # `<` directly followed by the name: a tag
        operator = i - 1 if i and text[i - 1] == "<" else i
        if not operator or text[operator - 1] not in " \t":
            return False
        operand = text[max(0, operator - _LOOK):operator].rstrip(" \t")[-1:]
        if not operand or not (operand.isalnum() or operand in "_)]}\"'"):
            return False
        if not text[first_word_end - 1].isalnum():
            return True     # code punctuation ends the word: `if n < model:`
        name_end = first_word_end
        if _normalize(text[i + 1:first_word_end]) != name:
            # A name spelled over several words (`< system reminder >`) is read like a
            # one-word name, from where its last word ends: a tag when closed as a tag,
            # code when not (`x < user` then `memory = n < memory` on the next line) or
            # when code punctuation stands between the words (`a < user ? memory : user`).
            joined, name_end = "", first_word_end - len(words[0])
            for word in words:
                if not word.isalnum():
                    return True
                name_end = text.index(word, name_end) + len(word)
                joined += _normalize(word)
                if joined == name:
                    break
            else:
                return False    # spelled only once references are decoded: a tag
        bracket = _TAG_BRACKET.search(text, name_end)
        if bracket is None or bracket.group() in _TAG_OPENER_SET:
            return True     # never closed before the next opener: `if n < context:`
        return not _tag_head(text[name_end:bracket.start()])


def _tag_head(head: str) -> bool:
    """Whether `head`, the text between a tag's name and its `>`, reads as a tag's: nothing
    (`< system >`), a `/` (`< system />`), or attributes with at least one `name=value`
    (`< system trust="full">`). `a < model and b > c` has words, but no value."""
    rest = head.strip()
    if rest.endswith("/"):
        rest = rest[:-1].rstrip()
    if not rest:
        return True
    valued = False
    position = 0
    while position < len(rest):
        match = _ATTRIBUTE.match(rest, position)
        if match is None:
            return False
        valued = valued or match.group("value") is not None
        position = match.end()
    return valued


_ATTRIBUTE = re.compile(r"""[ \t\r\n]*[A-Za-z_][-\w:.]*"""
                        r"""(?P<value>[ \t\r\n]*=[ \t\r\n]*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?""")
"""One attribute of a tag head, `name` or `name=value`."""

_TAG_BRACKET = re.compile("[" + re.escape(TAG_OPENERS + TAG_CLOSERS) + "]")
"""The next tag opener or closer (one class: the search cannot backtrack)."""

_LOOK = 64
"""Characters `_CodeReading` looks at around a candidate opener."""

_INCLUDE_DIRECTIVES = frozenset({"#include", "#import", "# include", "# import"})


def _scan(text: str, tags: ReservedTags,
          code_aware: bool = False) -> tuple[list[Finding], dict[int, str]]:
    """Findings, and the replacement for every character index to rewrite."""
    findings: list[Finding] = []
    edits: dict[int, str] = {}
    n = len(text)
    code = _CodeReading(text) if code_aware and "<" in text else None
    for match in _CANDIDATES.finditer(text):
        i = match.start()
        if text[i] in _TAG_OPENER_SET:
            kind, openers, closers = "tag", _TAG_OPENER_SET, _TAG_CLOSER_SET
            escape = _TAG_ESCAPE
            j = _skip(text, i + 1, n, _TAG_LEAD)
            words, end = _words(text, j, n, _TAG_WORD_STOP)
            name = tags._match(words) if words else None
            if name is not None and code is not None and code.is_code(
                    i, name, words, j + len(words[0])):
                continue
        else:
            kind, openers, closers = "marker", _MARKER_OPENER_SET, _MARKER_CLOSER_SET
            escape = _MARKER_ESCAPE
            j = _skip(text, i + 1, n, frozenset())
            words, end = _words(text, j, n, _MARKER_WORD_STOP)
            name = None
            joined = ""
            for word in words:
                joined += normalize_tag_name(word)
                if joined in _MARKER_NAMES:
                    name = joined
                    break
        if name is None:
            continue
        findings.append(Finding(kind, name, i))
        k = i
        while k >= 0 and text[k] in openers and k not in edits:
            edits[k] = escape[0]
            k -= 1
        closer = _find_closer(text, end, n, closers, openers)
        while closer is not None and closer < n and text[closer] in closers:
            edits[closer] = escape[1]
            closer += 1
    return findings, edits


def find_reserved(text: str, tags: ReservedTags) -> list[Finding]:
    """Every forged reserved tag and boundary marker in `text` (nothing is changed)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    return _scan(text, tags)[0]


def neutralize(text: str, tags: ReservedTags, *, code_aware: bool = False) -> Neutralized:
    """`text` with every reserved tag and boundary marker made literal, and the findings.

    With `code_aware` (remote content), angle brackets that read as code are
    left alone (`_CodeReading`). Text without findings is returned as the
    same string object.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    findings, edits = _scan(text, tags, code_aware)
    if not edits:
        return Neutralized(text, tuple(findings))
    parts: list[str] = []
    last = 0
    for index in sorted(edits):
        parts.append(text[last:index])
        parts.append(edits[index])
        last = index + 1
    parts.append(text[last:])
    return Neutralized("".join(parts), tuple(findings))


def neutralize_blocks(blocks: list[Any], tags: ReservedTags, *,
                      code_aware: bool = False) -> tuple[list[Any], list[Finding]]:
    """Message content blocks with the text of each string and text block neutralized.

    Non-text blocks (images, tool-use payloads) pass through untouched.
    """
    findings: list[Finding] = []
    clean = []
    for block in blocks:
        if isinstance(block, str):
            result = neutralize(block, tags, code_aware=code_aware)
            findings += result.findings
            block = result.text
        elif (isinstance(block, dict) and block.get("type") == "text"
              and isinstance(block.get("text"), str)):
            result = neutralize(block["text"], tags, code_aware=code_aware)
            findings += result.findings
            block = {**block, "text": result.text}
        clean.append(block)
    return clean, findings
