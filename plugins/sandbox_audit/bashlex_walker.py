"""The preferred front end: bashlex's real shell grammar, mapped onto `script.py`.

Where bashlex parses a command, its AST decides what is a command position:
compound commands, functions, process substitutions (`. <(curl u)`) and
nested quoting come out exactly as the grammar says. Where it cannot, the
classifier falls back to the tokenizer (`splitter.py`): `parse` raises
`Unsupported` for anything bashlex rejects (it has no `case`, `[[`, `$((`,
`time`, arrays, quoted heredoc delimiters) and for anything it parses but
would describe wrongly, so a bashlex quirk can never hide a command position:

* ANSI-C and locale strings (`$'\\x63url'`, `$"..."`), which bashlex reads as
  parameters;
* a parameter expansion holding a substitution (`${x:-$(curl u)}`), which
  bashlex leaves unparsed inside the parameter;
* any node kind this walker does not know.

bashlex is a recursive-descent parser written in Python: slow on long input
and recursive on nested input. `eligible` keeps it to short, shallow commands
(the tokenizer's depth is known first), so the audit stays linear overall.
"""

from __future__ import annotations

from typing import Any

# The same tree nodes as splitter.py imports: both front ends build `script.py`'s tree.
from .script import (
    SUB_MARK,
    Command,
    Compound,
    Heredoc,
    Pipeline,
    Redirect,
    Script,
    Substitution,
    Word,
)
from .splitter import scan_body

__all__ = ["MAX_CHARS", "MAX_DEPTH", "Unsupported", "eligible", "parse"]

MAX_CHARS = 2000
"""Longer commands go straight to the tokenizer (bashlex costs ~50 us per character)."""

MAX_DEPTH = 16
"""Deeper nesting (as the tokenizer measured it) goes straight to the tokenizer."""

_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_SPECIAL_PARAMS = frozenset("@*#?$!-0123456789")


class Unsupported(Exception):
    """bashlex cannot describe this command faithfully."""


def eligible(text: str, depth: int) -> bool:
    """Whether to try bashlex at all (short, shallow, no constructs it misreads)."""
    return len(text) <= MAX_CHARS and depth <= MAX_DEPTH and "$'" not in text \
        and '$"' not in text


def parse(text: str) -> Script:
    """`text` as a `Script`, or `Unsupported` when bashlex cannot parse it faithfully.

    This runs bashlex in the calling process, unbounded: the classifier calls
    it only inside a worker process (`parse_worker.parse`), which bounds its
    time and memory.
    """
    import bashlex

    try:
        nodes = bashlex.parse(text)
        return _Walker(text).script(nodes)
    except (Unsupported, MemoryError):
        raise  # a MemoryError is the worker's memory cap: its caller reports that
    except Exception as exc:  # bashlex raises many kinds of errors (RecursionError too)
        raise Unsupported(f"{type(exc).__name__}: {exc}") from None


class _Walker:
    def __init__(self, text: str) -> None:
        self.text = text

    def script(self, nodes: list[Any]) -> Script:
        pipelines: list[Pipeline] = []
        for node in nodes:
            self.statements(node, pipelines)
        return Script(pipelines)

    # -- statements ----------------------------------------------------------------------

    def statements(self, node: Any, out: list[Pipeline]) -> None:
        kind = node.kind
        if kind == "list":
            for part in node.parts:
                if part.kind == "operator":
                    if part.op == "&" and out:
                        out[-1].background = True
                    continue
                self.statements(part, out)
            return
        if kind == "pipeline":
            pipeline = Pipeline(node.pos[0])
            for part in node.parts:
                if part.kind in ("pipe", "reservedword"):
                    continue
                pipeline.stages.append(self.stage(part))
            if pipeline.stages:
                out.append(pipeline)
            return
        pipeline = Pipeline(node.pos[0])
        pipeline.stages.append(self.stage(node))
        out.append(pipeline)

    def body(self, parts: list[Any]) -> Script:
        pipelines: list[Pipeline] = []
        for part in parts:
            if part.kind in ("reservedword", "operator", "pipe"):
                continue
            self.statements(part, pipelines)
        return Script(pipelines)

    def stage(self, node: Any) -> Command | Compound:
        kind = node.kind
        if kind == "command":
            return self.command(node)
        if kind == "compound":
            return self.compound(node)
        if kind == "function":
            return self.function(node)
        if kind in ("if", "while", "until", "for"):
            return self.keyword_compound(node)
        raise Unsupported(f"node kind {kind!r}")

    def compound(self, node: Any) -> Compound:
        items = list(node.list)
        first = items[0] if items else None
        if first is not None and first.kind in ("if", "while", "until", "for") and len(items) == 1:
            result = self.keyword_compound(first)
        else:
            opener = first.word if first is not None and first.kind == "reservedword" else "("
            result = Compound("group" if opener == "{" else "subshell", node.pos[0],
                              self.body(items))
        for redirect in getattr(node, "redirects", None) or []:
            result.redirects.append(self.redirect(redirect))
        return result

    def keyword_compound(self, node: Any) -> Compound:
        result = Compound(node.kind, node.pos[0])
        parts = list(node.parts)
        if node.kind == "for":
            # for NAME [in WORDS] ; do LIST done
            index = 1
            while index < len(parts) and parts[index].kind == "word":
                result.words.append(self.word(parts[index]))
                index += 1
                if index < len(parts) and parts[index].kind == "reservedword" \
                        and parts[index].word == "in":
                    index += 1
            parts = parts[index:]
        result.body = self.body(parts)
        for redirect in getattr(node, "redirects", None) or []:
            result.redirects.append(self.redirect(redirect))
        return result

    def function(self, node: Any) -> Compound:
        name = None
        body_node = None
        for part in node.parts:
            if part.kind == "word" and name is None:
                name = part.word
            elif part.kind == "compound":
                body_node = part
        if body_node is None:
            raise Unsupported("function without a compound body")
        result = self.compound(body_node)
        result.name = name
        return result

    def command(self, node: Any) -> Command:
        command = Command(node.pos[0])
        for part in node.parts:
            kind = part.kind
            if kind == "assignment" and not command.words:
                word = self.word(part)
                word.assign = part.word.partition("=")[0].rstrip("+").partition("[")[0]
                command.assignments.append(word)
            elif kind in ("word", "assignment"):
                command.words.append(self.word(part))
            elif kind == "redirect":
                command.redirects.append(self.redirect(part))
            else:
                raise Unsupported(f"command part {kind!r}")
        return command

    # -- words ---------------------------------------------------------------------------

    def word(self, node: Any) -> Word:
        text = node.word
        subs: list[Substitution] = []
        params: list[str] = []
        for part in getattr(node, "parts", None) or []:
            kind = part.kind
            if kind in ("commandsubstitution", "processsubstitution"):
                start, end = part.pos
                source = self.text[start:end]
                if kind == "processsubstitution":
                    sub_kind = source[:2]
                else:
                    sub_kind = "`" if source.startswith("`") else "$("
                if sub_kind not in ("$(", "`", "<(", ">("):
                    raise Unsupported(f"substitution spelled {source[:2]!r}")
                inner = part.command
                pipelines: list[Pipeline] = []
                self.statements(inner, pipelines)
                subs.append(Substitution(sub_kind, start, Script(pipelines)))
                if source not in text:
                    raise Unsupported("substitution text not found in its word")
                text = text.replace(source, SUB_MARK, 1)
            elif kind == "parameter":
                params.append(_parameter_name(getattr(part, "value", None)))
            elif kind == "tilde":
                continue
            else:
                raise Unsupported(f"word part {kind!r}")
        quoted = any(q in self.text[node.pos[0]:node.pos[1]] for q in "'\"\\")
        return Word(text, node.pos[0], quoted=quoted, subs=subs, params=params)

    def redirect(self, node: Any) -> Redirect:
        op = node.type
        target_node = getattr(node, "output", None)
        target = self.word(target_node) if getattr(target_node, "kind", None) == "word" else None
        redirect = Redirect(op, node.pos[0], target)
        heredoc_node = getattr(node, "heredoc", None)
        if op in ("<<", "<<-"):
            if heredoc_node is None or target is None or target_node is None:
                raise Unsupported("heredoc without a body")
            raw = self.text[target_node.pos[0]:target_node.pos[1]]
            if any(q in raw for q in "'\"\\"):
                raise Unsupported("quoted heredoc delimiter")
            heredoc = Heredoc(target.text, False, node.pos[0])
            value = heredoc_node.value
            cut = value.rfind("\n")
            heredoc.body = value[:cut + 1] if cut >= 0 else ""
            if "$" in heredoc.body or "`" in heredoc.body:
                heredoc.subs, heredoc.params = scan_body(heredoc.body, heredoc_node.pos[0], 1)
            redirect.heredoc = heredoc
        return redirect


def _parameter_name(value: str | None) -> str:
    if not value:
        raise Unsupported("parameter without a name")
    if "$(" in value or "`" in value or "<(" in value or ">(" in value:
        raise Unsupported("substitution inside a parameter expansion")
    body = value.lstrip("#!")
    if body[:1] in _SPECIAL_PARAMS and body[:1] not in _NAME_CHARS:
        return body[:1]
    end = 0
    while end < len(body) and body[end] in _NAME_CHARS:
        end += 1
    if end == 0:
        return body[:1] or value[:1]
    return body[:end]
