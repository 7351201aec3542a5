"""The parsed form of a shell command line, shared by both front ends.

`splitter.py` (the linear tokenizer) and `bashlex_walker.py` (the real parser)
both produce a `Script`; the classifier only ever looks at this shape:

* a `Script` is a list of `Pipeline` statements (split by `;`, `&&`, `||`,
  `&` and unquoted newlines);
* a `Pipeline` is a list of stages, each a simple `Command` or a `Compound`
  (subshell, group, if/while/for/case body, function body);
* a `Command` has its leading assignments, its words and its redirects;
* a `Word` is quote-removed text plus the `Substitution`s and parameter
  references inside it;
* a `Substitution` (``$(...)``, backticks, ``<(...)``, ``>(...)``) holds the
  `Script` it runs. Arithmetic (``$((...))``, ``((...))``) is marked `arith`:
  its words are values, never commands.

In word text a command or process substitution appears as `SUB_MARK`, so a
word's text never repeats the text nested inside it (which keeps the whole
structure linear in the size of the input); parameter expansions keep their
source spelling (``$HOME``, ``${x:-y}``).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "SUB_MARK",
    "Command",
    "Compound",
    "Heredoc",
    "Pipeline",
    "Redirect",
    "Script",
    "Substitution",
    "Word",
]

SUB_MARK = "\ue000"
"""Stands for a substitution inside a word's text (a private-use code point)."""


class Word:
    __slots__ = ("assign", "params", "quoted", "start", "subs", "text")

    def __init__(self, text: str, start: int, quoted: bool = False,
                 subs: Sequence[Substitution] | None = None,
                 params: Sequence[str] | None = None, assign: str | None = None) -> None:
        self.text = text
        self.start = start
        self.quoted = quoted
        self.subs: Sequence[Substitution] = subs if subs is not None else ()
        self.params: Sequence[str] = params if params is not None else ()
        self.assign = assign
        """The variable name when the word is an assignment (`NAME=value`)."""

    @property
    def static(self) -> bool:
        """No expansion: the text is exactly what the shell passes on."""
        return not self.subs and not self.params

    @property
    def value(self) -> str:
        """The assigned value of an assignment word, else the text."""
        if self.assign is None:
            return self.text
        return self.text.partition("=")[2]

    def __repr__(self) -> str:
        return f"Word({self.text!r})"


class Substitution:
    __slots__ = ("arith", "body", "kind", "start")

    def __init__(self, kind: str, start: int, body: Script, *, arith: bool = False) -> None:
        self.kind = kind          # "$(", "`", "<(", ">("
        self.start = start
        self.body = body
        self.arith = arith        # `$((...))`: arithmetic expansion, not a command

    def __repr__(self) -> str:
        return f"Substitution({self.kind!r}, {self.body!r}{', arith' if self.arith else ''})"


class Heredoc:
    __slots__ = ("body", "delimiter", "params", "quoted", "start", "subs")

    def __init__(self, delimiter: str, quoted: bool, start: int) -> None:
        self.delimiter = delimiter
        self.quoted = quoted      # quoted delimiter: the body is not expanded
        self.start = start
        self.body = ""
        self.subs: Sequence[Substitution] = ()
        self.params: Sequence[str] = ()


class Redirect:
    __slots__ = ("heredoc", "op", "start", "target")

    def __init__(self, op: str, start: int, target: Word | None = None,
                 heredoc: Heredoc | None = None) -> None:
        self.op = op              # "<", ">", ">>", "<<", "<<-", "<<<", ">&", "&>", ...
        self.start = start
        self.target = target
        self.heredoc = heredoc


class Command:
    __slots__ = ("assignments", "redirects", "start", "words")

    def __init__(self, start: int) -> None:
        self.start = start
        self.assignments: list[Word] = []
        self.words: list[Word] = []
        self.redirects: list[Redirect] = []

    def __repr__(self) -> str:
        return f"Command({[w.text for w in self.assignments + self.words]!r})"


class Compound:
    __slots__ = ("arith", "body", "kind", "name", "redirects", "start", "words")

    def __init__(self, kind: str, start: int, body: Script | None = None) -> None:
        self.kind = kind          # "subshell", "group", "if", "while", "until", "for", ...
        self.start = start
        self.body = body if body is not None else Script()
        self.words: list[Word] = []      # value words: for/select lists, case subject/patterns
        self.redirects: list[Redirect] = []
        self.name: str | None = None     # the function's name when this is a function body
        self.arith = False               # `((...))`: an arithmetic command

    def __repr__(self) -> str:
        label = f" {self.name}()" if self.name else ""
        return f"Compound({self.kind!r}{label}, {self.body!r})"


class Pipeline:
    __slots__ = ("background", "stages", "start")

    def __init__(self, start: int) -> None:
        self.start = start
        self.stages: list[Command | Compound] = []
        self.background = False

    def __repr__(self) -> str:
        return f"Pipeline({self.stages!r}{', &' if self.background else ''})"


class Script:
    __slots__ = ("pipelines",)

    def __init__(self, pipelines: list[Pipeline] | None = None) -> None:
        self.pipelines: list[Pipeline] = pipelines if pipelines is not None else []

    def __repr__(self) -> str:
        return f"Script({self.pipelines!r})"
