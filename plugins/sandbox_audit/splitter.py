"""The fallback front end: a linear, quote-, heredoc- and arithmetic-aware tokenizer.

`split(text)` turns a command line into a `Script` (see `script.py`) in one
left-to-right pass with an explicit stack, so its cost is linear in the length
of the input whatever the input is: no regex here can backtrack (each one
matches a run of characters from a single class), no text is scanned twice
except a heredoc body (once to find its end, once for its substitutions), and
nesting deeper than `MAX_DEPTH` stops the scan with `TooDeep` instead of
recursing.

It is a heuristic, not a shell. Where it has to guess it guesses towards
*more* command positions, never fewer:

* an unquoted newline separates statements exactly like `;`;
* a heredoc header (`<<EOF`, `<<-EOF`, `<<'EOF'`) registers a body that is
  consumed verbatim, as data, at the newline that starts it; an unterminated
  body consumes the rest of the input. `<<<` is a here-string and never opens
  a body, and neither does `<<` inside `((...))`/`$((...))`, where it is a
  shift: arithmetic is tracked alongside the quotes;
* `((` and `$((` are parsed as nested parentheses and only marked arithmetic
  once their `))` closes them; an unclosed one only disables heredoc detection,
  so newlines keep splitting;
* an unmatched `)` separates statements; an unterminated double quote is
  re-read as a literal character (`split` retries), so the text after it is
  not hidden inside a string the shell would reject;
* command and process substitutions (``$(``, backticks, ``<(``, ``>(``) share
  one code path, so a rule can never see one spelling and miss another.
"""

from __future__ import annotations

import re

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

__all__ = [
    "MAX_BODY_NESTING",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_WORDS",
    "Budget",
    "TooComplex",
    "TooDeep",
    "Unauditable",
    "decode_ansi_c",
    "scan_body",
    "split",
    "split_plain",
]

MAX_DEPTH = 64
"""Open substitutions, quotes and compounds followed at once; deeper input is refused."""

MAX_BODY_NESTING = 6
"""Heredoc bodies scanned inside heredoc bodies (each level rescans its own body)."""

_MAX_RETRIES = 2


MAX_NODES = 10_000
"""Commands, substitutions, compounds and quotes one classification builds at most."""

MAX_WORDS = 50_000
"""Words one classification builds at most."""


class Unauditable(Exception):
    """The input is beyond what the audit follows; the classifier refuses it."""


class TooDeep(Unauditable):
    """The input nests deeper than the audit follows."""


class TooComplex(Unauditable):
    """The input has more structure than the audit builds (see `Budget`)."""


class Budget:
    """Work left for one classification, shared by every parse it makes.

    A command line with ten thousand statements or a hundred thousand words is
    no longer something anyone reads; refusing it keeps the worst case bounded
    (and linear) instead of building a structure nobody will review.
    """

    __slots__ = ("nodes", "words")

    def __init__(self, nodes: int = MAX_NODES, words: int = MAX_WORDS) -> None:
        self.nodes = nodes
        self.words = words

    def spend_nodes(self, count: int = 1) -> None:
        self.nodes -= count
        if self.nodes < 0:
            raise TooComplex(f"more than {MAX_NODES} commands, substitutions and quotes")

    def spend_words(self, count: int = 1) -> None:
        self.words -= count
        if self.words < 0:
            raise TooComplex(f"more than {MAX_WORDS} words")


_PLAIN = re.compile(r"[^ \t\n'\"\\$`()<>|&;]+")
_ARG_RUN = re.compile(r"(?:[^ \t\n'\"\\$`()<>|&;#][^ \t\n'\"\\$`()<>|&;]*[ \t]+)+")
_NONBLANK = re.compile(r"[^ \t]+")
_RUN_WINDOW = 4096   # the fast path takes plain arguments a window at a time
_BLANKS = re.compile(r"[ \t]+")
_DQ_PLAIN = re.compile(r"[^\"\\$`]+")
_HD_PLAIN = re.compile(r"[^\\$`]+")
_PARAM_PLAIN = re.compile(r"[^}{'\"\\$`]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARAM_NAME = re.compile(r"[#!]?([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])")
_ANSI_BODY = re.compile(r"(?:[^'\\]|\\.)*'", re.S)
_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]\n]*\])?\+?=")
_FD_WORD = re.compile(r"[0-9]+|\{[A-Za-z_][A-Za-z0-9_]*\}")

_SUB_KINDS = frozenset({"$(", "`", "<(", ">("})
_PAREN_KINDS = frozenset({"$(", "<(", ">(", "subshell"})
_COMPOUND_KINDS = frozenset({"subshell", "group", "if", "while", "until", "for", "select",
                             "case"})
_KEYWORD_FRAMES = frozenset({"group", "if", "while", "until", "for", "select", "case"})
_PREFIX_KEYWORDS = frozenset({"!", "then", "else", "elif", "do", "coproc"})
_CLOSERS = {"fi": frozenset({"if"}), "done": frozenset({"while", "until", "for", "select"}),
            "esac": frozenset({"case"}), "}": frozenset({"group"})}
_OPENERS = {"if": "if", "while": "while", "until": "until", "for": "for",
            "select": "select", "case": "case", "{": "group"}

_ANSI_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b",
                "E": "\x1b", "f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
_ANSI_ESCAPE = re.compile(
    r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)", re.S)


def _ansi_replace(match: re.Match[str]) -> str:
    code = match.group(1)
    head = code[0]
    if head in "xuU" and len(code) > 1:
        value = int(code[1:], 16)
        return chr(value) if value <= 0x10FFFF else "?"
    if head in "01234567":
        return chr(int(code, 8) & 0xFF)
    if head == "c" and len(code) == 2:
        return chr(ord(code[1]) & 0x1F)
    return _ANSI_SIMPLE.get(code, "\\" + code)


def decode_ansi_c(body: str) -> str:
    """The value of a `$'...'` string body (without its quotes)."""
    return _ANSI_ESCAPE.sub(_ansi_replace, body) if "\\" in body else body


class _Frame:
    """One open context: a scope holding statements, or a quote/parameter inside a word."""

    __slots__ = (
        "arith",
        "brace",
        "bracket",
        "command",
        "compound",
        "escaped",
        "expect_name",
        "in_dq",
        "kind",
        "no_heredoc",
        "owner",
        "paren",
        "pending_func",
        "pending_redirect",
        "pipeline",
        "pipelines",
        "stage",
        "start",
        "state",
        "warray",
        "wbreak",
        "wdepth",
        "wparams",
        "wparts",
        "wplain",
        "wquoted",
        "wstart",
        "wsubs",
    )

    def __init__(self, kind: str, start: int) -> None:
        self.kind = kind
        self.start = start
        self.pipelines: list[Pipeline] = []
        self.pipeline: Pipeline | None = None
        self.command: Command | None = None
        self.stage: Compound | None = None      # a closed compound waiting for `|` or the end
        self.compound: Compound | None = None   # the node a keyword/group/subshell frame builds
        self.pending_redirect: tuple[str, int] | None = None
        self.pending_func: str | None = None
        self.expect_name = False                # after `function`
        self.state: str | None = None           # for/case headers
        self.bracket = False                    # inside `[[ ... ]]`
        self.paren = -1                         # index of this frame's `(`
        self.arith = False
        self.no_heredoc = False
        self.escaped = False                    # a backtick frame opened by \`
        self.owner: _Frame | None = None        # quote/param frames: whose word they build
        self.in_dq = False
        self.brace = 0
        # the word being built (scope frames only)
        self.wparts: list[str] | None = None
        self.wsubs: list[Substitution] | None = None
        self.wparams: list[str] | None = None
        self.wquoted = False
        self.wplain = True
        self.wbreak = 0                         # plain characters before the first quote/expansion
        self.wstart = 0
        self.wdepth = 0
        self.warray = False


class _Splitter:
    def __init__(self, text: str, base: int, body_depth: int, literal: frozenset[int],
                 budget: Budget) -> None:
        self.budget = budget
        self.s = text
        self.n = len(text)
        self.base = base
        self.body_depth = body_depth
        self.literal = literal
        self.root = _Frame("top", base)
        self.stack: list[_Frame] = [self.root]
        self.heredocs: list[tuple[Heredoc, bool]] = []
        self.bt_depth = 0
        self.unclosed_quote = -1

    # -- driver --------------------------------------------------------------------------

    def run(self) -> Script:
        self._scan()
        self._unwind()
        root = self.root
        self._end_word(root, self.n)
        self._end_command(root)
        self._end_pipeline(root)
        return Script(root.pipelines)

    def _scan(self, body: bool = False) -> None:
        """Read the whole text, one step of the frame on top at a time.

        `body`: the text is a heredoc body (`scan_body`), read in an ``hd``
        context over the root; the body never closes that context itself (only
        a closing backtick may unwind through it), so it is reopened there.
        """
        s, n = self.s, self.n
        i = 0
        stack = self.stack
        reopen = self.root if body else None
        while i < n:
            frame = stack[-1]
            kind = frame.kind
            if kind == "dq":
                i = self._step_dq(frame, i, _DQ_PLAIN)
            elif kind == "hd":
                i = self._step_dq(frame, i, _HD_PLAIN)
            elif kind == "param":
                i = self._step_param(frame, i)
            elif frame is reopen:
                self._push("hd", i).owner = frame
            else:
                m = _PLAIN.match(s, i)
                if m is None or (s[i] == "#" and frame.wparts is None):
                    i = self._step_cmd(frame, i)
                elif (frame.wparts is None and frame.command is not None and frame.command.words
                      and frame.pending_redirect is None and frame.state is None
                      and not frame.bracket and frame.stage is None):
                    # Fast path: a run of plain arguments, each ended by blanks. No
                    # keyword, assignment or redirect can be among them.
                    run = _ARG_RUN.match(s, i, i + _RUN_WINDOW)
                    if run is None:
                        self._plain(frame, m.group(), i)
                        i = m.end()
                        continue
                    end = run.end()
                    base = self.base
                    found = [Word(w.group(), base + w.start())
                             for w in _NONBLANK.finditer(s, i, end)]
                    self.budget.spend_words(len(found))
                    frame.command.words.extend(found)
                    i = end
                else:
                    self._plain(frame, m.group(), i)
                    i = m.end()

    def _unwind(self) -> None:
        """Close every frame over the root at the end of the text."""
        n = self.n
        while len(self.stack) > 1:
            frame = self.stack[-1]
            if frame.kind == "dq":
                self.unclosed_quote = frame.start - self.base
                self.stack.pop()
            elif frame.kind in ("param", "hd"):
                self.stack.pop()
            else:
                self._close_scope(n)

    # -- words ---------------------------------------------------------------------------

    def _begin(self, f: _Frame, i: int) -> list[str]:
        parts = f.wparts
        if parts is None:
            parts = f.wparts = []
            f.wsubs = None
            f.wparams = None
            f.wquoted = False
            f.wplain = True
            f.wstart = self.base + i
        return parts

    def _plain(self, f: _Frame, text: str, i: int) -> None:
        self._begin(f, i).append(text)

    def _unplain(self, f: _Frame, i: int) -> list[str]:
        parts = self._begin(f, i)
        if f.wplain:
            f.wplain = False
            f.wbreak = sum(map(len, parts))
        return parts

    def _quoted(self, f: _Frame, text: str, i: int) -> None:
        self._unplain(f, i).append(text)
        f.wquoted = True

    def _expansion(self, f: _Frame, text: str, i: int) -> None:
        self._unplain(f, i).append(text)

    def _add_param(self, f: _Frame, name: str) -> None:
        if f.wparams is None:
            f.wparams = []
        f.wparams.append(name)

    def _end_word(self, f: _Frame, i: int) -> _Frame:
        """Place the word being built; returns the top frame (a keyword may open or close one)."""
        self._place_word(f, i)
        return self.stack[-1]

    def _place_word(self, f: _Frame, i: int) -> None:
        parts = f.wparts
        if parts is None:
            return
        f.wparts = None
        f.wdepth = 0
        f.warray = False
        text = parts[0] if len(parts) == 1 else "".join(parts)
        self.budget.spend_words()
        word = Word(text, f.wstart, f.wquoted, f.wsubs, f.wparams)
        if f.pending_redirect is not None:
            op, start = f.pending_redirect
            f.pending_redirect = None
            redirect = Redirect(op, start, word)
            if op in ("<<", "<<-"):
                raw = self.s[f.wstart - self.base:i]
                quoted = any(q in raw for q in "'\"\\")
                delimiter = raw.replace("'", "").replace('"', "").replace("\\", "")
                heredoc = Heredoc(delimiter, quoted, start)
                redirect.heredoc = heredoc
                self.heredocs.append((heredoc, op == "<<-"))
            self.budget.spend_nodes()
            self._attach_redirect(f, redirect)
            return
        if f.state is not None:
            self._header_word(f, word)
            return
        command = f.command
        at_start = command is None or not (command.words or command.assignments
                                            or command.redirects)
        if at_start and f.stage is None:
            if not word.quoted and word.static and self._keyword(f, word, i):
                return
            if f.expect_name:
                f.expect_name = False
                f.pending_func = text
                return
        if command is None:
            command = f.command = Command(word.start)
        if not command.words:
            m = _ASSIGN.match(text)
            if m is not None and (f.wplain or m.end() <= f.wbreak):
                word.assign = m.group().rstrip("=").rstrip("+").partition("[")[0]
                command.assignments.append(word)
                return
        if not command.words and word.text == "[[" and not word.quoted:
            f.bracket = True
        elif f.bracket and word.text == "]]" and not word.quoted:
            f.bracket = False
        command.words.append(word)

    def _keyword(self, f: _Frame, word: Word, i: int) -> bool:
        text = word.text
        if text in _PREFIX_KEYWORDS:
            return True
        opener = _OPENERS.get(text)
        if opener is not None:
            frame = self._push_compound(f, opener, word.start - self.base)
            if opener in ("for", "select"):
                frame.state = "for_name"
            elif opener == "case":
                frame.state = "case_subject"
            return True
        closes = _CLOSERS.get(text)
        if closes is not None:
            self._close_keyword(closes, i)
            return True
        if text == "function":
            f.expect_name = True
            return True
        return False

    def _header_word(self, f: _Frame, word: Word) -> None:
        state = f.state
        compound = f.compound
        assert compound is not None
        text = "" if word.quoted else word.text
        if state == "for_name":
            compound.words.append(word)
            f.state = "for_in"
        elif state == "for_in":
            if text == "do":
                f.state = None
            elif text != "in":
                compound.words.append(word)
                f.state = "for_words"
            else:
                f.state = "for_words"
        elif state == "for_words":
            compound.words.append(word)
        elif state == "case_subject":
            if text == "in":
                f.state = "case_pattern"
            else:
                compound.words.append(word)
        elif state == "case_pattern":
            if text == "esac":
                self._close_keyword(_CLOSERS["esac"], word.start - self.base)
            else:
                compound.words.append(word)

    # -- statements ----------------------------------------------------------------------

    def _attach_redirect(self, f: _Frame, redirect: Redirect) -> None:
        command = f.command
        if f.stage is not None and (command is None or not (command.words
                                                              or command.assignments)):
            f.stage.redirects.append(redirect)
            return
        if command is None:
            command = f.command = Command(redirect.start)
        command.redirects.append(redirect)

    def _add_stage(self, f: _Frame, stage: Command | Compound) -> None:
        self.budget.spend_nodes()
        if f.pipeline is None:
            f.pipeline = Pipeline(stage.start)
        f.pipeline.stages.append(stage)

    def _end_command(self, f: _Frame) -> None:
        if f.stage is not None:
            self._add_stage(f, f.stage)
            f.stage = None
        command = f.command
        if command is not None:
            f.command = None
            if command.words or command.assignments or command.redirects:
                self._add_stage(f, command)
        f.bracket = False

    def _end_pipeline(self, f: _Frame, background: bool = False) -> None:
        pipeline = f.pipeline
        if pipeline is not None:
            f.pipeline = None
            pipeline.background = background
            f.pipelines.append(pipeline)

    def _separate(self, f: _Frame, op: str, i: int) -> None:
        f = self._end_word(f, i)
        f.pending_redirect = None
        self._end_command(f)
        if op == "|":
            return
        self._end_pipeline(f, op == "&")
        if f.state in ("for_words", "for_in", "for_name"):
            f.state = None

    # -- frames --------------------------------------------------------------------------

    def _push(self, kind: str, i: int) -> _Frame:
        if len(self.stack) >= MAX_DEPTH:
            raise TooDeep(f"more than {MAX_DEPTH} nested levels")
        if kind in ("dq", "param", "hd"):
            self.budget.spend_words()
        else:
            self.budget.spend_nodes()
        frame = _Frame(kind, self.base + i)
        self.stack.append(frame)
        return frame

    def _push_compound(self, f: _Frame, kind: str, i: int, paren: int = -1) -> _Frame:
        self._end_word(f, i)
        if f.command is not None and (f.command.words or f.command.assignments):
            self._end_command(f)
            self._end_pipeline(f)
        elif f.stage is not None:
            self._end_command(f)
        frame = self._push(kind, i)
        frame.compound = Compound(kind, self.base + i)
        if f.pending_func is not None:
            frame.compound.name = f.pending_func
            f.pending_func = None
        frame.paren = paren
        frame.no_heredoc = f.no_heredoc
        if kind == "subshell" and paren >= 0 and f.paren == paren - 1 and f.kind in _PAREN_KINDS:
            # `((` or `$((`: maybe arithmetic, where `<<` is a shift, not a heredoc.
            frame.no_heredoc = True
            f.no_heredoc = True
        return frame

    def _push_sub(self, owner: _Frame, kind: str, i: int) -> int:
        self._begin(owner, i)
        frame = self._push(kind, i)
        if kind == "`":
            self.bt_depth += 1
            return i + 1
        frame.paren = i + 1
        return i + 2

    def _close_scope(self, i: int) -> None:
        """Close the top scope frame and hand its node to the frame below."""
        stack = self.stack
        frame = stack[-1]
        self._place_word(frame, i)
        if stack[-1] is not frame:
            # The last word was a keyword: it closed this frame itself, or opened one.
            if frame not in stack:
                return
            while stack[-1] is not frame:
                self._close_scope(i)
        stack.pop()
        self._end_command(frame)
        self._end_pipeline(frame)
        body = Script(frame.pipelines)
        kind = frame.kind
        if kind == "`":
            self.bt_depth -= 1
        below = self.stack[-1]
        if kind in _SUB_KINDS:
            owner = below.owner if below.owner is not None else below
            sub = Substitution(kind, frame.start, body, arith=frame.arith)
            self._unplain(owner, frame.start - self.base).append(SUB_MARK)
            if owner.wsubs is None:
                owner.wsubs = []
            owner.wsubs.append(sub)
            return
        compound = frame.compound
        assert compound is not None
        compound.body = body
        compound.arith = frame.arith
        self._end_word(below, i)
        command = below.command
        if (command is not None and (command.words or command.assignments)) \
                or below.stage is not None:
            self._end_command(below)
        below.stage = compound

    def _close_keyword(self, kinds: frozenset[str], i: int) -> None:
        stack = self.stack
        index = len(stack) - 1
        while index > 0 and stack[index].kind in _COMPOUND_KINDS:
            if stack[index].kind in kinds:
                while len(stack) - 1 >= index:
                    self._close_scope(i)
                return
            index -= 1

    def _close_paren(self, f: _Frame, i: int) -> bool:
        """Close the innermost parenthesis scope at `)` (and the compounds inside it)."""
        stack = self.stack
        index = len(stack) - 1
        while index > 0 and stack[index].kind in _COMPOUND_KINDS:
            if stack[index].kind in _PAREN_KINDS:
                break
            index -= 1
        target = stack[index]
        if index == 0 or target.kind not in _PAREN_KINDS:
            return False
        while len(stack) - 1 > index:
            self._close_scope(i)
        below = stack[index - 1]
        if (self.s[i + 1:i + 2] == ")" and below.kind in _PAREN_KINDS
                and below.paren == target.paren - 1 and below.paren >= 0):
            target.arith = True
            below.arith = True
            compound = target.compound
            if compound is not None:
                compound.arith = True
        self._close_scope(i)
        return True

    # -- one token in a command context ----------------------------------------------------

    def _step_cmd(self, f: _Frame, i: int) -> int:
        s = self.s
        c = s[i]
        if c == " " or c == "\t":
            if f.wdepth > 0:
                self._plain(f, c, i)
                return i + 1
            self._end_word(f, i)
            m = _BLANKS.match(s, i)
            return m.end() if m else i + 1
        if c == "\n":
            if f.wdepth > 0 and f.warray:
                self._plain(f, " ", i)
                return i + 1
            if f.state in ("case_subject", "case_pattern", "for_name", "for_in"):
                self._end_word(f, i)
                if f.state == "for_in":
                    f.state = None
            else:
                self._separate(f, "\n", i)
            return self._read_heredocs(i + 1)
        if c == "#":  # at a word start: a comment to the end of the line
            end = s.find("\n", i)
            return self.n if end < 0 else end
        if c == "'":
            end = s.find("'", i + 1)
            if self.bt_depth:
                tick = s.find("`", i + 1)
                if 0 <= tick < end or (end < 0 <= tick):
                    end = -1
            if end < 0 or (self.base + i) in self.literal:
                self._plain(f, "'", i)
                return i + 1
            self._quoted(f, s[i + 1:end], i)
            return end + 1
        if c == '"':
            if (self.base + i) in self.literal or s.find('"', i + 1) < 0:
                self._plain(f, '"', i)
                return i + 1
            self._unplain(f, i)
            f.wquoted = True
            frame = self._push("dq", i)
            frame.owner = f
            return i + 1
        if c == "\\":
            nxt = s[i + 1:i + 2]
            if nxt == "\n":
                return i + 2
            if not nxt:
                self._plain(f, "\\", i)
                return i + 1
            if nxt == "`" and self.bt_depth:
                return self._escaped_backtick(f, i)
            self._quoted(f, nxt, i)
            return i + 2
        if c == "$":
            return self._dollar(f, i, in_dq=False)
        if c == "`":
            return self._backtick(f, i)
        if c == "(":
            return self._open_paren(f, i)
        if c == ")":
            if f.bracket:
                self._plain(f, ")", i)
                return i + 1
            if f.wdepth > 0:
                f.wdepth -= 1
                if f.wdepth == 0:
                    f.warray = False
                self._plain(f, ")", i)
                return i + 1
            if f.state == "case_pattern":
                self._end_word(f, i)
                f.state = None
                return i + 1
            f = self._end_word(f, i)
            if not self._close_paren(f, i):
                self._separate(f, ";", i)
            return i + 1
        if c == "<" or c == ">":
            return self._redirect(f, i)
        if c == "|":
            if f.bracket or f.wdepth > 0:
                self._plain(f, "|", i)
                return i + 1
            if f.state == "case_pattern":
                self._end_word(f, i)
                return i + 1
            if s.startswith("||", i):
                self._separate(f, "||", i)
                return i + 2
            self._separate(f, "|", i)
            return i + 2 if s.startswith("|&", i) else i + 1
        if c == "&":
            if f.bracket:
                self._plain(f, "&", i)
                return i + 1
            if s.startswith("&&", i):
                self._separate(f, "&&", i)
                return i + 2
            if s.startswith("&>", i):
                f = self._end_word(f, i)
                op = "&>>" if s.startswith("&>>", i) else "&>"
                f.pending_redirect = (op, self.base + i)
                return i + len(op)
            self._separate(f, "&", i)
            return i + 1
        if c == ";":
            if s.startswith(";;", i) or s.startswith(";&", i):
                length = 3 if s.startswith(";;&", i) else 2
                self._separate(f, ";", i)
                if f.kind == "case":
                    f.state = "case_pattern"
                return i + length
            self._separate(f, ";", i)
            return i + 1
        # unreachable: every other character is matched by _PLAIN
        self._plain(f, c, i)
        return i + 1

    def _open_paren(self, f: _Frame, i: int) -> int:
        s = self.s
        if f.bracket or f.state == "case_pattern":
            if f.bracket:
                self._plain(f, "(", i)
            return i + 1
        parts = f.wparts
        if parts is not None:
            if f.wdepth > 0:
                f.wdepth += 1
                self._plain(f, "(", i)
                return i + 1
            text = "".join(parts)
            command = f.command
            no_words = command is None or not command.words
            if f.wplain and no_words and _ASSIGN.fullmatch(text):
                f.wdepth, f.warray = 1, True       # NAME=( array values )
                self._plain(f, "(", i)
                return i + 1
            if text and text[-1] in "@!+*?":
                f.wdepth = 1                       # extglob pattern
                self._plain(f, "(", i)
                return i + 1
            close = _BLANKS.match(s, i + 1)
            after = close.end() if close else i + 1
            if no_words and s[after:after + 1] == ")" and f.wplain:
                f.wparts = None                    # name() { ...; }
                f.pending_func = text
                return after + 1
            f = self._end_word(f, i)
        else:
            command = f.command
            close = _BLANKS.match(s, i + 1)
            after = close.end() if close else i + 1
            if (command is not None and len(command.words) == 1 and not command.assignments
                    and not command.redirects and s[after:after + 1] == ")"):
                f.pending_func = command.words.pop().text      # name () { ...; }
                f.command = None
                return after + 1
        self._push_compound(f, "subshell", i, paren=i)
        return i + 1

    def _redirect(self, f: _Frame, i: int) -> int:
        s = self.s
        c = s[i]
        if f.bracket:
            self._plain(f, c, i)
            return i + 1
        if s.startswith("<(", i) or s.startswith(">(", i):
            self._end_word(f, i)
            return self._push_sub(f, s[i:i + 2], i)
        parts = f.wparts
        if parts is not None:
            text = "".join(parts)
            if f.wplain and _FD_WORD.fullmatch(text):
                f.wparts = None                    # 2>file, {fd}>file
            else:
                f = self._end_word(f, i)
        if c == "<":
            if s.startswith("<<<", i):
                op = "<<<"
            elif s.startswith("<<", i):
                op = "<<-" if s.startswith("<<-", i) and not f.no_heredoc else "<<"
                if f.no_heredoc:
                    op = "<<shift"
            elif s.startswith("<&", i) or s.startswith("<>", i):
                op = s[i:i + 2]
            else:
                op = "<"
        elif s.startswith(">>", i) or s.startswith(">&", i) or s.startswith(">|", i):
            op = s[i:i + 2]
        else:
            op = ">"
        f.pending_redirect = (op, self.base + i)
        return i + (2 if op == "<<shift" else len(op))

    # -- expansions ------------------------------------------------------------------------

    def _dollar(self, owner: _Frame, i: int, in_dq: bool) -> int:
        s = self.s
        nxt = s[i + 1:i + 2]
        if nxt == "(":
            return self._push_sub(owner, "$(", i)
        if nxt == "{":
            if s.find("}", i + 2) < 0:
                self._expansion(owner, "${", i)
                return i + 2
            self._expansion(owner, "${", i)
            frame = self._push("param", i)
            frame.owner = owner
            frame.in_dq = in_dq
            m = _PARAM_NAME.match(s, i + 2)
            if m is not None:
                self._add_param(owner, m.group(1))
            return i + 2
        if nxt == "'" and not in_dq:
            m = _ANSI_BODY.match(s, i + 2)
            if m is None or (self.base + i + 1) in self.literal:
                self._plain(owner, "$", i)
                return i + 1
            self._quoted(owner, decode_ansi_c(m.group()[:-1]), i)
            return m.end()
        if nxt == '"' and not in_dq:
            if s.find('"', i + 2) < 0 or (self.base + i + 1) in self.literal:
                self._plain(owner, "$", i)
                return i + 1
            self._unplain(owner, i)
            owner.wquoted = True
            frame = self._push("dq", i + 1)
            frame.owner = owner
            return i + 2
        m = _NAME.match(s, i + 1)
        if m is not None:
            self._expansion(owner, "$" + m.group(), i)
            self._add_param(owner, m.group())
            return m.end()
        if nxt and nxt in "0123456789@*#?$!-":
            self._expansion(owner, "$" + nxt, i)
            self._add_param(owner, nxt)
            return i + 2
        self._plain(owner, "$", i)
        return i + 1

    def _backtick(self, owner: _Frame, i: int) -> int:
        if self.bt_depth:
            # Inside backticks an unescaped backtick always ends the substitution,
            # whatever quotes are open (quotes do not protect it).
            stack = self.stack
            while len(stack) > 1:
                top = stack[-1]
                if top.kind in ("dq", "param", "hd"):
                    stack.pop()
                    continue
                closing_plain = top.kind == "`" and not top.escaped
                self._close_scope(i)
                if closing_plain:
                    break
            return i + 1
        return self._push_sub(owner, "`", i)

    def _escaped_backtick(self, owner: _Frame, i: int) -> int:
        top = self.stack[-1]
        if top.kind == "`" and top.escaped:
            self._close_scope(i)
            return i + 2
        self._push_sub(owner, "`", i)
        self.stack[-1].escaped = True
        return i + 2

    # -- quote and parameter contexts ------------------------------------------------------

    def _step_dq(self, f: _Frame, i: int, plain: re.Pattern[str]) -> int:
        s = self.s
        owner = f.owner
        assert owner is not None
        m = plain.match(s, i)
        if m is not None:
            self._quoted(owner, m.group(), i)
            return m.end()
        c = s[i]
        if c == '"':
            self.stack.pop()
            return i + 1
        if c == "\\":
            nxt = s[i + 1:i + 2]
            if nxt == "\n":
                return i + 2
            if nxt == "`" and self.bt_depth:
                return self._escaped_backtick(owner, i)
            if nxt and nxt in ("$`\\\"" if f.kind == "dq" else "$`\\"):
                self._quoted(owner, nxt, i)
                return i + 2
            self._quoted(owner, "\\", i)
            return i + 1
        if c == "$":
            return self._dollar(owner, i, in_dq=True)
        return self._backtick(owner, i)  # c == "`"

    # Read like `_step_dq` (a plain run, else one character), for `${...}`, where other
    # characters matter: the two contexts stay separate steps of the hot loop.
    def _step_param(self, f: _Frame, i: int) -> int:
        s = self.s
        owner = f.owner
        assert owner is not None
        m = _PARAM_PLAIN.match(s, i)
        if m is not None:
            self._expansion(owner, m.group(), i)
            return m.end()
        c = s[i]
        if c == "}":
            self._expansion(owner, "}", i)
            if f.brace:
                f.brace -= 1
            else:
                self.stack.pop()
            return i + 1
        if c == "{":
            f.brace += 1
            self._expansion(owner, "{", i)
            return i + 1
        if c == "'":
            end = s.find("'", i + 1)
            if f.in_dq or end < 0:
                self._expansion(owner, "'", i)
                return i + 1
            self._quoted(owner, s[i + 1:end], i)
            return end + 1
        if c == '"':
            if s.find('"', i + 1) < 0:
                self._expansion(owner, '"', i)
                return i + 1
            frame = self._push("dq", i)
            frame.owner = owner
            return i + 1
        if c == "\\":
            nxt = s[i + 1:i + 2]
            self._quoted(owner, nxt or "\\", i)
            return i + 2
        if c == "$":
            return self._dollar(owner, i, in_dq=f.in_dq)
        return self._backtick(owner, i)  # c == "`"

    # -- heredoc bodies ----------------------------------------------------------------

    def _read_heredocs(self, i: int) -> int:
        if not self.heredocs:
            return i
        s, n = self.s, self.n
        pending, self.heredocs = self.heredocs, []
        for heredoc, strip in pending:
            start = i
            body_end = n
            while i < n:
                newline = s.find("\n", i)
                end = n if newline < 0 else newline
                line = s[i:end]
                if (line.lstrip("\t") if strip else line) == heredoc.delimiter:
                    body_end = i
                    i = end + 1 if newline >= 0 else n
                    break
                i = end + 1 if newline >= 0 else n
            else:
                body_end = n
            body = s[start:body_end]
            heredoc.body = body
            if not heredoc.quoted and ("$" in body or "`" in body):
                heredoc.subs, heredoc.params = scan_body(body, self.base + start,
                                                         self.body_depth + 1, self.budget)
        return i


def scan_body(text: str, base: int = 0, body_depth: int = 0, budget: Budget | None = None,
              ) -> tuple[list[Substitution], list[str]]:
    """The substitutions and parameters of an unquoted heredoc body (expanded as data)."""
    if body_depth > MAX_BODY_NESTING:
        raise TooDeep(f"heredoc bodies nested more than {MAX_BODY_NESTING} deep")
    splitter = _Splitter(text, base, body_depth, frozenset(), budget or Budget())
    root = splitter.root
    splitter._begin(root, 0)
    splitter._push("hd", 0).owner = root
    splitter._scan(body=True)
    splitter._unwind()
    return list(root.wsubs or []), list(root.wparams or [])



def split_plain(text: str, budget: Budget) -> Script:
    """`split(text, budget=budget)` for one command of plain words (`frontend.plain_words`).

    Such a text is one simple command: no quoting, expansion, operator,
    redirect, keyword or assignment, words separated by spaces. So its script
    is that command's words at their offsets, and it spends what `split` spends
    on it: one word each, then one node. The differential tests hold the two to
    the same structure and budget.
    """
    words = [Word(match.group(), match.start()) for match in _NONBLANK.finditer(text)]
    budget.spend_words(len(words))
    budget.spend_nodes()
    command = Command(words[0].start)
    command.words = words
    pipeline = Pipeline(command.start)
    pipeline.stages.append(command)
    return Script([pipeline])


def split(text: str, *, base: int = 0, budget: Budget | None = None) -> Script:
    """Parse `text` into a `Script`.

    Raises `TooDeep` past `MAX_DEPTH` and `TooComplex` when `budget` runs out;
    never anything else.
    """
    budget = budget or Budget()
    literal: frozenset[int] = frozenset()
    for _ in range(_MAX_RETRIES + 1):
        splitter = _Splitter(text, base, 0, literal, budget)
        script = splitter.run()
        if splitter.unclosed_quote < 0:
            return script
        # An unterminated double quote: the shell would reject the statement, so the
        # quote is more likely a literal we misread. Re-read it as one, so the text
        # after it is seen as commands rather than hidden in a string.
        literal = literal | {base + splitter.unclosed_quote}
    return script
