"""The walk: a parsed command line judged in execution order, by position.

`Walker` visits a `Script` the way the shell runs it. Substitutions are walked
before the command that contains them, and each reports what it may print (a
`taint.Risk`). A risky substitution is judged by **position**: as the command
itself it runs what it prints and blocks; as a value it only captures output
and passes. The arguments of `eval`/`source`, an interpreter's code string and
a here-string or heredoc fed to an interpreter are position-blind. Pipelines
are judged as a whole (fetched or decoded content reaching an interpreter's
stdin). Code that is itself shell (`sh -c '...'`, `eval '...'`, a heredoc fed
to a shell, the literal command lines interpreter code hands to a shell) is
parsed and walked again, a few levels deep.

The dataflow state lives in `taint.Taint`, the rules on one simple command in
`commands.CommandRules`, the findings in `verdict.Findings`.
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from . import frontend
from .commands import CommandRules, fork_loop, reverse_shell_code
from .embedded import awk_network, awk_programs, code_values, embedded_code
from .interpreter_code import hands_arguments_to_code, shell_commands
from .loops import process_loop
from .rules import (
    CANDIDATE_COMMANDS,
    CODE_FILE_OPTIONS,
    CODE_FILE_VARIABLES,
    CODE_FLAGS,
    CODE_OPTIONS,
    CODE_VARIABLES,
    DECLARATION_COMMANDS,
    DECODERS,
    EVAL_WORDS,
    FETCHERS,
    FIND_EXEC,
    NETWORK_TOOLS,
    RAW_PATTERNS,
    RULED_COMMANDS,
    interpreter_family,
)
from .script import Command, Compound, Pipeline, Redirect, Script, Substitution, Word
from .splitter import Budget, TooComplex, TooDeep, Unauditable, split
from .taint import Risk, Taint, content_source, merge, substitution_output
from .verdict import Findings
from .words import (
    NAME_ASSIGN,
    STDIN_EXECUTORS,
    basename,
    code_value,
    command_name,
    decodes,
    interpreter_options,
    literal_risky,
    normalize,
    reads_code_from_stdin,
    resolve,
    script_reads_code,
    stage_text,
    triggers,
    words_text,
)

__all__ = ["MAX_CODE_DEPTH", "Walker"]

MAX_CODE_DEPTH = 3
"""Code strings (`sh -c '...'`, `eval ...`) classified inside code strings."""

MAX_NESTED_CODES = 256
"""Pieces of nested code (code strings, heredoc scripts, commands in interpreter code or
in options) one classification audits; a command with more is refused as too complex."""

MAX_BASHLEX_PARSES = 4
"""Parses one classification may hand to bashlex (each is a round trip to its worker);
the code strings nested beyond them are read by the tokenizer alone."""

MAX_GLOB_SUSPECTS = 3
"""A glob command name is judged as the ruled commands it matches when it matches this
many at most (`/bin/r?` is `rm`; `*` matches them all and points at none)."""

_POSITIONAL = ("0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "@", "*")


def stdin_reader(code: str) -> str | None:
    """The interpreter family that reads its program from stdin in a command line, if any
    (`sh` in `tar --to-command=sh`)."""
    try:
        return script_reads_code(split(code))
    except Unauditable:
        return None


class StageInfo:
    """What a pipeline stage does with its stdin and output."""

    __slots__ = ("feeds_code", "network", "reads_code", "shell")

    def __init__(self) -> None:
        self.reads_code: str | None = None   # interpreter family reading code from stdin
        self.feeds_code: str | None = None   # output goes into `>(sh)`
        self.shell = False                   # runs a shell
        self.network = False                 # a socket tool


NO_INFO = StageInfo()


@dataclass
class Context:
    arith: bool = False
    function: str | None = None



class Walker:
    """One classification: walks the scripts it parses and collects the findings."""

    def __init__(self, parser: frontend.Parser, budget: Budget | None = None) -> None:
        self.parser: frontend.Parser = parser
        self.budget = budget or Budget()
        self.findings = Findings()
        self.taint = Taint(self.findings)
        self.rules = CommandRules(self.findings)
        self.code_depth = 0
        self.bashlex_left = MAX_BASHLEX_PARSES
        self.codes_left = MAX_NESTED_CODES

    # -- parsing ---------------------------------------------------------------------------

    def parse(self, text: str) -> Script | None:
        parser = self.parser if self.bashlex_left > 0 else "tokenizer"
        if parser != "tokenizer":
            self.bashlex_left -= 1
        try:
            script, used = frontend.parse(text, parser, self.budget)
        except TooDeep as exc:
            self.findings.add("nesting_too_deep", str(exc), 0)
            return None
        except TooComplex as exc:
            self.findings.add("command_too_complex", str(exc), 0)
            return None
        if self.findings.parser == "none":
            self.findings.parser = used
        return script

    def audit_top(self, text: str) -> None:
        self.findings.text = text
        for rule, literal, pattern in RAW_PATTERNS:
            match = pattern.search(text) if literal in text else None
            if match is not None:
                self.findings.add(rule, text[max(0, match.start() - 40):match.end() + 40],
                                  match.start())
        script = self.parse(text)
        if script is not None:
            self.walk_script(script, Context())

    def audit_code(self, code: str, position: int, what: str) -> None:
        """Classify shell code found inside the command (`sh -c`, `eval`, heredocs)."""
        if not code.strip():
            return
        if self.code_depth >= MAX_CODE_DEPTH:
            self.findings.add("nesting_too_deep", f"{what} nested more than {MAX_CODE_DEPTH} deep",
                              position)
            return
        if self.codes_left <= 0:
            self.findings.add("command_too_complex",
                              f"more than {MAX_NESTED_CODES} pieces of nested code", position)
            return
        self.codes_left -= 1
        saved = self.findings.anchor
        self.code_depth += 1
        self.findings.anchor = position if saved is None else saved
        try:
            script = self.parse(code)
            if script is not None:
                self.walk_script(script, Context())
        finally:
            self.code_depth -= 1
            self.findings.anchor = saved

    # -- statements ------------------------------------------------------------------------

    def walk_script(self, script: Script, ctx: Context) -> tuple[Risk | None, StageInfo]:
        total: Risk | None = None
        first_info = NO_INFO
        for index, pipeline in enumerate(script.pipelines):
            risk, info = self.walk_pipeline(pipeline, ctx)
            total = merge(total, risk)
            if index == 0:
                first_info = info
        return total, first_info

    def walk_pipeline(self, pipeline: Pipeline, ctx: Context,
                      ) -> tuple[Risk | None, StageInfo]:
        stages = pipeline.stages
        upstream: Risk | None = None
        total: Risk | None = None
        first_info = NO_INFO
        shell_at = network_at = -1
        decode_warned = False
        for index, stage in enumerate(stages):
            if isinstance(stage, Command):
                risk, info = self.walk_command(stage, ctx, pipeline, upstream)
            else:
                risk, info = self.walk_compound(stage, ctx)
                if not ctx.arith and stage.redirects:
                    source = content_source(risk, upstream)
                    if source is not None:
                        self.taint.redirect_writes(stage.redirects, source)
            if index == 0:
                first_info = info
            if not ctx.arith:
                if index > 0 and info.reads_code:
                    self.piped_code(upstream, info.reads_code, stage)
                elif index > 0 and upstream is not None and upstream.decode \
                        and not decode_warned:
                    decode_warned = True
                    self.findings.add("decode_piped", f"{upstream.decode} | {stage_text(stage)}",
                                      stage.start)
                if info.feeds_code:
                    self.piped_code(merge(merge(None, upstream), risk), info.feeds_code,
                                    stage)
                if info.shell:
                    shell_at = index
                if info.network:
                    network_at = index
            upstream = merge(upstream, risk)
            total = merge(total, risk)
        if shell_at >= 0 and network_at >= 0 and len(stages) > 1:
            self.findings.add("reverse_shell", "a shell and a network tool joined by a pipe: "
                     + " | ".join(stage_text(s) for s in stages[:4]), pipeline.start)
        return total, first_info

    def piped_code(self, upstream: Risk | None, family: str, stage: Command | Compound,
                   ) -> None:
        where = stage_text(stage)
        if upstream is not None and (upstream.fetch or upstream.taint):
            self.findings.add("fetch_piped_to_interpreter",
                              f"{upstream.fetch or upstream.taint} | {where}", stage.start)
        elif upstream is not None and upstream.decode:
            self.findings.add("decode_piped_to_interpreter", f"{upstream.decode} | {where}",
                              stage.start)
        elif family == "shell":
            self.findings.add("pipe_to_shell", f"... | {where}", stage.start)
        else:
            self.findings.add("pipe_to_interpreter", f"... | {where}", stage.start)

    def walk_compound(self, compound: Compound, ctx: Context,
                      ) -> tuple[Risk | None, StageInfo]:
        inner = ctx
        if compound.arith and not ctx.arith:
            inner = Context(True, ctx.function)
        if compound.name is not None:
            inner = Context(inner.arith, compound.name)
        risk: Risk | None = None
        list_risk: Risk | None = None
        for word in compound.words:
            list_risk = merge(list_risk, self.word_subs_value(word, inner))
            list_risk = merge(list_risk, self.taint.param_taint(word))
        if compound.kind in ("for", "select") and compound.words:
            variable = compound.words[0].text
            self.taint.forget(variable)
            if list_risk is not None and list_risk.risky and len(compound.words) > 1:
                self.taint.variables[variable] = (f"${variable} iterates over "
                                                  f"{list_risk.risky} output")
        for redirect in compound.redirects:
            risk = merge(risk, self.redirect_value(redirect, inner))
            self.rules.check_redirect_target(redirect)
        body_risk, body_info = self.walk_script(compound.body, inner)
        if compound.kind in ("while", "until", "for") and not inner.arith:
            why = process_loop(compound, self.taint.values)
            if why is not None:
                self.findings.add("fork_bomb", why, compound.start)
        if compound.name is not None:
            if body_risk is not None and body_risk.risky:
                self.taint.functions[compound.name] = body_risk
            else:
                self.taint.functions.pop(compound.name, None)
            return None, NO_INFO     # a definition runs nothing
        info = StageInfo()
        info.reads_code = body_info.reads_code
        info.shell = body_info.shell
        info.network = body_info.network
        return merge(risk, body_risk), info

    # -- one simple command ----------------------------------------------------------------

    def walk_command(self, cmd: Command, ctx: Context, pipeline: Pipeline | None,
                     upstream: Risk | None) -> tuple[Risk | None, StageInfo]:
        words = normalize(cmd.words, self.taint.values)
        subrisk: dict[int, Risk | None] = {}
        risk: Risk | None = None
        sub_words = [w for w in words if w.subs]

        # Substitutions run first, in order; their risk is what they may print.
        for word in cmd.assignments:
            if word.subs:
                risk = merge(risk, self.walk_word_subs(word, ctx, subrisk))
        for word in sub_words:
            risk = merge(risk, self.walk_word_subs(word, ctx, subrisk))
        for redirect in cmd.redirects:
            if redirect.target is not None and redirect.target.subs:
                risk = merge(risk, self.walk_word_subs(redirect.target, ctx, subrisk))
            heredoc = redirect.heredoc
            if heredoc is not None:
                for sub in heredoc.subs:
                    subrisk[id(sub)] = self.walk_sub(sub, ctx)
                    risk = merge(risk, subrisk[id(sub)])
        if self.taint.variables:
            for word in words:
                if word.params:
                    risk = merge(risk, self.taint.param_taint(word))

        for word in cmd.assignments:
            self.taint.assign(word, subrisk, sets=not words)
            self.assignment(word, subrisk)

        vanished: list[int] = []
        exec_index, wrappers = resolve(words, 0, vanished)
        name = None
        if exec_index is not None:
            if words[exec_index].static:
                name = command_name(words[exec_index])
            elif not ctx.arith:
                # A computed command name: whatever it is, its output is unknown.
                risk = merge(risk, Risk(interp=f"computed command {words[exec_index].text}"))

        info = NO_INFO
        reads_code = None
        if name is not None and exec_index is not None:
            own = self.own_risk(name, words, exec_index)
            risk = merge(risk, own)
            family = interpreter_family(name)
            if family is not None or name in STDIN_EXECUTORS:
                reads_code = reads_code_from_stdin(words, exec_index, name)
            network = name in NETWORK_TOOLS and (name != "openssl" or any(
                a.text == "s_client" for a in words[exec_index + 1:]))
            if name in CODE_OPTIONS and CODE_OPTIONS[name].language == "awk":
                for program in awk_programs(name, words[exec_index + 1:]):
                    socket, runs = awk_network(program)
                    if socket:     # awk network files are sockets: awk is a network tool
                        network = True
                        risk = merge(risk, Risk(fetch=f"{name} (a /inet socket)"))
                    if runs and not ctx.arith:
                        self.findings.add("reverse_shell", f"{name} reads a socket and runs "
                                          "commands", words[exec_index].start)
            if family == "shell" or network or reads_code:
                info = StageInfo()
                info.shell = family == "shell"
                info.network = network
                info.reads_code = reads_code
        for word in sub_words:
            for sub in word.subs:
                if sub.kind == ">(" and not sub.arith and sub.body.pipelines:
                    family = script_reads_code(sub.body)
                    if family is not None:
                        if info is NO_INFO:
                            info = StageInfo()
                        info.feeds_code = info.feeds_code or family

        if not ctx.arith:
            bound = self.taint.bind_descriptors(cmd, subrisk) if cmd.redirects else None
            held = self.taint.descriptors
            if bound is not None:
                self.taint.descriptors = bound
            try:
                self.judge(cmd, words, exec_index, name, wrappers, subrisk, upstream,
                           sub_words, reads_code, vanished)
            finally:
                if exec_index is not None or wrappers != ["exec"]:
                    self.taint.descriptors = held   # `exec 3< <(...)` alone keeps them open
            self.taint.file_writes(cmd, words, exec_index, name, content_source(risk, upstream),
                                   subrisk)
            if ctx.function is not None and name == ctx.function and pipeline is not None \
                    and (len(pipeline.stages) > 1 or pipeline.background):
                self.findings.add("fork_bomb", f"{name}() calls itself through a pipe or in the "
                         "background", cmd.start)
        else:
            self.value_findings(cmd, subrisk, set())
        return risk, info

    def walk_word_subs(self, word: Word, ctx: Context,
                       subrisk: dict[int, Risk | None]) -> Risk | None:
        risk: Risk | None = None
        for sub in word.subs:
            sub_risk = self.walk_sub(sub, ctx)
            subrisk[id(sub)] = sub_risk
            risk = merge(risk, sub_risk)
        return risk

    def walk_sub(self, sub: Substitution, ctx: Context) -> Risk | None:
        if sub.arith:
            self.walk_script(sub.body, Context(True, ctx.function))
            return None
        inner = ctx if not ctx.arith else Context(False, ctx.function)
        risk, _ = self.walk_script(sub.body, inner)
        return risk

    def word_subs_value(self, word: Word, ctx: Context) -> Risk | None:
        """Walk the substitutions of a value-only word and record the risky ones as passes."""
        return self.value_subs(word.subs, word.text, ctx)

    def redirect_value(self, redirect: Redirect, ctx: Context) -> Risk | None:
        risk: Risk | None = None
        if redirect.target is not None:
            risk = self.word_subs_value(redirect.target, ctx)
        if redirect.heredoc is not None:
            risk = merge(risk, self.value_subs(redirect.heredoc.subs, "heredoc body", ctx))
        return risk

    def value_subs(self, subs: Sequence[Substitution], where: str, ctx: Context,
                   ) -> Risk | None:
        risk: Risk | None = None
        for sub in subs:
            sub_risk = self.walk_sub(sub, ctx)
            if sub_risk is not None and sub_risk.risky:
                self.findings.add("value_position_substitution",
                                  f"{where} captures {sub_risk.risky} output", sub.start)
            risk = merge(risk, sub_risk)
        return risk

    def own_risk(self, name: str, words: list[Word], index: int) -> Risk | None:
        if name in FETCHERS:
            return Risk(fetch=name)
        if "*" in name or "?" in name or "[" in name:
            return Risk(interp=f"a command named by the glob {name}")
        if name in DECODERS and decodes(name, words[index + 1:]):
            return Risk(decode=f"{name} (decoding)")
        if name in EVAL_WORDS or name == "." or interpreter_family(name) is not None:
            return Risk(interp=name)
        function = self.taint.functions.get(name)
        if function is not None:
            return Risk(function.fetch, function.decode, function.interp, function.taint)
        return None

    # -- the rules on one command ----------------------------------------------------------

    def judge(self, cmd: Command, words: list[Word], exec_index: int | None, name: str | None,
              wrappers: list[str], subrisk: dict[int, Risk | None],
              upstream: Risk | None, sub_words: list[Word], reads_code: str | None,
              vanished: list[int]) -> None:
        flagged: set[int] = set()
        positions = [exec_index] if exec_index is not None else []
        for index in vanished:
            self.command_position(words, index, subrisk, flagged)
        if name == "find" or name == "fd":
            positions.extend(self.exec_positions(words, exec_index))
        for position in positions:
            self.command_position(words, position, subrisk, flagged)
            if position != exec_index:
                sub_index, _ = resolve(words, position)
                if sub_index is not None and words[sub_index].static:
                    sub_name = basename(words[sub_index].text)
                    end = sub_index + 1
                    while end < len(words) and words[end].text not in (";", "+"):
                        end += 1
                    self.rules.named_rules(cmd, words[:end], sub_index, sub_name, [])
                    self.carried_code(cmd, words[:end], sub_index, sub_name, upstream,
                                      subrisk, flagged)
        eval_index, interpreters = triggers(words)
        if eval_index is not None or (name == "." and exec_index is not None):
            self.eval_source(words, exec_index if eval_index is None else eval_index,
                             exec_index, subrisk, flagged)
        if interpreters:
            self.code_strings(words, interpreters, positions, subrisk, flagged)
        static = exec_index is not None and words[exec_index].static
        if cmd.redirects:
            family = reads_code
            if family is None and exec_index is not None and not static:
                family = "shell"   # an unknown command may be an interpreter
            self.here_input(cmd, family, subrisk, flagged, static)
        if name is not None and (reads_code or interpreter_family(name) is not None):
            self.script_operand(cmd, words, exec_index, name, subrisk, flagged)
        if (self.taint.files or self.taint.descriptors or self.taint.paths) \
                and exec_index is not None:
            self.taint.file_executed(cmd, words, exec_index, name, reads_code)
        if name is not None and exec_index is not None:
            self.code_files(words, exec_index, name, subrisk, flagged)
        if exec_index is not None and name is not None:
            if name in DECLARATION_COMMANDS:
                for word in words[exec_index + 1:]:
                    match = NAME_ASSIGN.match(word.text)
                    if match is not None:
                        word.assign = match.group(1)
                        self.taint.assign(word, subrisk)
                        self.assignment(word, subrisk, flagged)
            elif name in ("read", "mapfile", "readarray"):
                self.taint.read(cmd, words[exec_index + 1:], name, subrisk, upstream)
            self.rules.named_rules(cmd, words, exec_index, name, wrappers)
            self.carried_code(cmd, words, exec_index, name, upstream, subrisk, flagged)
        elif wrappers:
            self.rules.named_rules(cmd, words, None, None, wrappers)
        if wrappers:
            for index, word in enumerate(words[:exec_index]):
                if not word.subs and NAME_ASSIGN.match(word.text):
                    self.assignment(word)      # `env LD_PRELOAD=/tmp/x.so ls`
                elif word.subs and NAME_ASSIGN.match(word.text):
                    self.code_variable(word, subrisk, flagged)
                elif word.static and basename(word.text) in CODE_OPTIONS:
                    self.carried_code(cmd, words, index, basename(word.text), upstream,
                                      subrisk, flagged)
        if sub_words or cmd.redirects or any(a.subs for a in cmd.assignments):
            self.value_findings(cmd, subrisk, flagged)
        self.suspects(cmd, words, exec_index, name, vanished)
        for redirect in cmd.redirects:
            target = redirect.target
            if target is not None and target.params and self.taint.values:
                resolved = normalize([target], self.taint.values)
                target = resolved[0] if len(resolved) == 1 else target
            self.rules.check_redirect_target(redirect, target)
        self.rules.mentioned_paths(words, exec_index, name)

    def assignment(self, word: Word, subrisk: dict[int, Risk | None] | None = None,
                   flagged: set[int] | None = None) -> None:
        """An environment assignment: loader variables, variables holding a command (code:
        a risky substitution there runs what it prints), variables naming a file of code
        (`BASH_ENV`)."""
        self.rules.assignment(word)
        variable = word.assign or word.text.partition("=")[0]
        if subrisk is not None and not word.static:
            self.code_variable(word, subrisk, flagged if flagged is not None else set())
        if variable in CODE_VARIABLES and word.static:
            code = word.text.partition("=")[2].lstrip(" |")
            self.audit_code(code, word.start, f"the command in ${variable}")

    def code_variable(self, word: Word, subrisk: dict[int, Risk | None],
                      flagged: set[int]) -> None:
        """A variable whose value is code (`PAGER=`) or names a file of code (`BASH_ENV=`),
        given a risky substitution: its value runs."""
        variable = word.assign or word.text.partition("=")[0]
        if variable in CODE_VARIABLES:
            self.risky_args([word], subrisk, flagged, "code_string_substitution",
                            f"${variable}", literal=False)
        elif variable in CODE_FILE_VARIABLES:
            self.code_file(word, f"${variable}", subrisk, flagged)

    def suspects(self, cmd: Command, words: list[Word], exec_index: int | None,
                 name: str | None, vanished: list[int]) -> None:
        """A command named by a variable or a glob is judged as each command it may be."""
        unknown = list(vanished)
        if exec_index is not None and not words[exec_index].static:
            unknown.append(exec_index)
        for index in unknown:
            if not words[index].subs:
                for candidate in CANDIDATE_COMMANDS:
                    self.rules.named_rules(cmd, words, index, candidate, [])
        if name is not None and exec_index is not None and any(c in name for c in "*?["):
            matched = [c for c in sorted(RULED_COMMANDS) if fnmatch.fnmatchcase(c, name)]
            if len(matched) <= MAX_GLOB_SUSPECTS:    # `*` alone says nothing of the command
                for candidate in matched:
                    self.rules.named_rules(cmd, words, exec_index, candidate, [])

    def carried_code(self, cmd: Command, words: list[Word], index: int, name: str,
                     upstream: Risk | None, subrisk: dict[int, Risk | None],
                     flagged: set[int]) -> None:
        """Code in the command's options and operands (`rules.CODE_OPTIONS`), audited as
        nested shell code; code that runs the command's input is judged as a pipe. A
        code-valued option or operand is code wherever it stands: a risky substitution
        or tainted variable in it runs what it prints (`awk "$(curl u)"`)."""
        if name not in CODE_OPTIONS:
            return
        for value in code_values(name, words[index + 1:]):
            self.risky_args(list(value.words), subrisk, flagged, "code_string_substitution",
                            value.what, literal=False)
        for code in embedded_code(name, words[index + 1:], self.codes_left):
            if code.runs_input:
                self.piped_code(upstream, "shell", cmd)
                continue
            self.audit_code(code.text, code.position, code.what)
            if code.stdin:
                family = stdin_reader(code.text)
                if family is not None:
                    self.piped_code(upstream, family, cmd)

    @staticmethod
    def exec_positions(words: list[Word], exec_index: int | None) -> list[int]:
        found = []
        start = (exec_index or 0) + 1
        for index in range(start, len(words) - 1):
            text = words[index].text
            if text in FIND_EXEC or text in ("-x", "--exec", "-X", "--exec-batch"):
                found.append(index + 1)
        return found

    def command_position(self, words: list[Word], index: int,
                         subrisk: dict[int, Risk | None], flagged: set[int]) -> None:
        word = words[index]
        for sub in word.subs:
            if sub.arith:
                continue
            flagged.add(id(sub))
            sub_risk = subrisk.get(id(sub))
            if sub_risk is not None and sub_risk.risky:
                self.findings.add("substitution_in_command_position",
                                  f"{words_text(words[index:index + 3])} runs what "
                         f"{sub_risk.risky} prints", sub.start)
            else:
                self.findings.add("dynamic_command_substitution",
                                  f"{words_text(words[index:index + 3])}", sub.start)
        tainted = self.taint.tainted_in(word)
        if tainted is not None:
            self.findings.add("tainted_variable_executed",
                     f"{word.text} as a command: {self.taint.variables[tainted]}", word.start)

    def risky_args(self, args: list[Word], subrisk: dict[int, Risk | None],
                   flagged: set[int], rule: str, what: str, *, literal: bool = True) -> None:
        """Position-blind: any risky substitution, literal one (unless `literal` is false:
        text a shell never expands), or tainted variable in `args`."""
        for word in args:
            for sub in word.subs:
                sub_risk = subrisk.get(id(sub))
                if sub_risk is not None and sub_risk.risky and not sub.arith:
                    flagged.add(id(sub))
                    if sub_risk.taint and not (sub_risk.fetch or sub_risk.decode
                                               or sub_risk.interp):
                        self.findings.add("tainted_variable_executed",
                                          f"{what}: {sub_risk.taint}", sub.start)
                    else:
                        self.findings.add(rule, f"{what}: {word.text} runs {sub_risk.risky}",
                                          sub.start)
            spelled = literal_risky(word.text) if literal else None
            if spelled is not None:
                self.findings.add(rule, f"{what}: literal {spelled}", word.start)
            tainted = self.taint.tainted_in(word)
            if tainted is not None:
                self.findings.add("tainted_variable_executed",
                         f"{what}: {word.text}: {self.taint.variables[tainted]}", word.start)

    def eval_source(self, words: list[Word], index: int | None, exec_index: int | None,
                    subrisk: dict[int, Risk | None], flagged: set[int]) -> None:
        if index is None:
            return
        text = words[index].text
        args = words[index + 1:]
        self.risky_args(args, subrisk, flagged, "eval_source_substitution", text)
        if index == exec_index and text == "eval" and args:
            self.audit_code(" ".join([a.text for a in args]), words[index].start, "eval code")

    def code_strings(self, words: list[Word], interpreters: list[int], positions: list[int],
                     subrisk: dict[int, Risk | None], flagged: set[int]) -> None:
        """Position-blind: the first interpreter word with a code-string flag, wherever it is."""
        scanned = -1
        for index in interpreters:
            if index <= scanned:
                continue    # an option argument of the interpreter scanned before
            name = basename(words[index].text)
            family = interpreter_family(name)
            if family is None:
                continue
            code_index, _, _, scanned = interpreter_options(words, index, family)
            if code_index is None:
                continue
            flag = words[code_index].text
            attached = ""
            if family in ("shell", "su"):
                pass    # `sh -c CODE`: the code is the next word
            elif not flag.startswith("--"):
                short = CODE_FLAGS[family].short
                for position, char in enumerate(flag[1:], start=1):
                    # `-pe CODE` is `-p -e CODE`; `-e'CODE'` carries its code
                    if char in short and flag[position + 1:position + 2] not in short:
                        attached = flag[position + 1:]
                        break
            elif "=" in flag:
                attached = flag.partition("=")[2]
            value = code_index if attached else code_value(words, code_index, family)
            after = value + 1
            what = f"{name} {flag}"
            self.risky_args(words[code_index:after], subrisk, flagged,
                            "code_string_substitution", what)
            code = attached or (words[value].text if value < len(words) else "")
            arguments = words[after:]
            if family in ("shell", "su"):
                if index in positions and code:
                    with self.positional(arguments if family == "shell" else [], subrisk):
                        self.audit_code(code, words[index].start, f"{name} -c code")
                return
            if arguments and hands_arguments_to_code(family, code):
                # the code runs what its arguments say: they are code too
                self.risky_args(arguments, subrisk, flagged, "code_string_substitution", what)
            if reverse_shell_code(code):
                self.findings.add("reverse_shell", f"{name} code opens a socket and a shell",
                                  words[index].start)
            if fork_loop(code):
                self.findings.add("fork_bomb", f"{name} code forks in an endless loop",
                                  words[index].start)
            if index in positions and code:
                self.interpreter_calls(family, code, words[index].start, f"{name} code")
            return

    @contextlib.contextmanager
    def positional(self, arguments: list[Word], subrisk: dict[int, Risk | None],
                   ) -> Iterator[None]:
        """While `sh -c CODE ARG0 ARG1 ...` is audited, `$0`, `$1`, ... (and `$@`, `$*`)
        carry the taint of their arguments: `sh -c '$1' _ "$(curl u)"` runs fetched text,
        and `sh -c 'bash "$0"' <(curl u)` runs the file `$0` names."""
        variables, paths = self.taint.variables, self.taint.paths
        saved = {key: (variables.get(key), paths.get(key)) for key in _POSITIONAL}
        any_taint = any_path = None
        for number, word in enumerate(arguments[:10]):
            key = str(number)
            source = self.argument_taint(word, subrisk)
            if source is not None:
                variables[key] = f"${number} is {source}"
                any_taint = any_taint or variables[key]
            output = substitution_output(word, subrisk)
            if output is not None:
                paths[key] = f"${number} names {output}"
                any_path = any_path or paths[key]
        if any_taint is not None:
            variables["@"] = variables["*"] = any_taint
        if any_path is not None:
            paths["@"] = paths["*"] = any_path
        try:
            yield
        finally:
            for key, (value, path) in saved.items():
                for table, old in ((variables, value), (paths, path)):
                    if old is None:
                        table.pop(key, None)
                    else:
                        table[key] = old

    def argument_taint(self, word: Word, subrisk: dict[int, Risk | None]) -> str | None:
        for sub in word.subs:
            sub_risk = subrisk.get(id(sub))
            if sub_risk is not None and sub_risk.risky and not sub.arith:
                return f"{sub_risk.risky} output"
        tainted = self.taint.tainted_in(word)
        return self.taint.variables[tainted] if tainted is not None else None

    def interpreter_calls(self, family: str, code: str, position: int, what: str) -> None:
        """Audit, as nested shell code, each literal command line that interpreter code
        hands to a shell (`os.system("...")`, `execSync('...')`, backticks, ...)."""
        for how, command in shell_commands(family, code, self.codes_left):
            self.audit_code(command, position, f"{what}: {how}")

    def here_input(self, cmd: Command, family: str | None,
                   subrisk: dict[int, Risk | None], flagged: set[int], static: bool) -> None:
        if family is None:
            return
        for redirect in cmd.redirects:
            heredoc = redirect.heredoc
            if redirect.op == "<<<" and redirect.target is not None:
                target = redirect.target
                self.risky_args([target], subrisk, flagged, "here_input_substitution",
                                "here-string to an interpreter")
                if family == "shell" and static:
                    self.audit_code(target.text, target.start, "here-string script")
                else:
                    self.interpreter_text(family, target.text, target.start, "here-string code",
                                          static)
            elif heredoc is not None:
                what = "heredoc to an interpreter"
                for sub in heredoc.subs:
                    sub_risk = subrisk.get(id(sub))
                    if sub_risk is not None and sub_risk.risky and not sub.arith:
                        flagged.add(id(sub))
                        self.findings.add("here_input_substitution", f"{what} pastes "
                                 f"{sub_risk.risky} output into the code", sub.start)
                for param in heredoc.params:
                    if param in self.taint.variables:
                        self.findings.add("tainted_variable_executed",
                                          f"{what}: {self.taint.variables[param]}", heredoc.start)
                        break
                if family == "shell" and static:
                    self.audit_code(heredoc.body, heredoc.start, "heredoc script")
                else:
                    literal = literal_risky(heredoc.body)
                    if literal is not None:
                        self.findings.add("here_input_substitution", f"{what}: literal {literal}",
                                          heredoc.start)
                    self.interpreter_text(family, heredoc.body, heredoc.start, "heredoc code",
                                          static)

    def interpreter_text(self, family: str, text: str, start: int, what: str,
                         static: bool) -> None:
        """Interpreter code fed on stdin: a reverse shell, and (static text) its shell calls."""
        if reverse_shell_code(text):
            self.findings.add("reverse_shell", f"{what} opens a socket and a shell", start)
        if fork_loop(text):
            self.findings.add("fork_bomb", f"{what} forks in an endless loop", start)
        if static:
            self.interpreter_calls(family, text, start, what)

    def script_operand(self, cmd: Command, words: list[Word], exec_index: int | None,
                       name: str | None, subrisk: dict[int, Risk | None],
                       flagged: set[int]) -> None:
        if exec_index is None or name is None:
            return
        family = interpreter_family(name)
        code_index = operand = None
        if family is not None and family not in ("su", "generic"):
            code_index, operand, _, _ = interpreter_options(words, exec_index, family)
        if code_index is None and operand is not None:
            for sub in words[operand].subs:
                sub_risk = subrisk.get(id(sub))
                if sub.kind == "<(" and sub_risk is not None and sub_risk.risky:
                    flagged.add(id(sub))
                    self.findings.add("interpreter_runs_substitution",
                                      f"{name} {words[operand].text} runs {sub_risk.risky} output",
                             sub.start)
        if reads_code_from_stdin(words, exec_index, name) is None:
            return
        for redirect in cmd.redirects:
            if redirect.op == "<" and redirect.target is not None:
                for sub in redirect.target.subs:
                    sub_risk = subrisk.get(id(sub))
                    if sub.kind == "<(" and sub_risk is not None and sub_risk.risky:
                        flagged.add(id(sub))
                        self.findings.add("interpreter_runs_substitution",
                                 f"{name} < <(...) runs {sub_risk.risky} output", sub.start)

    def code_files(self, words: list[Word], exec_index: int, name: str,
                   subrisk: dict[int, Risk | None], flagged: set[int]) -> None:
        """Options whose value is a file of code the command runs (`bash --rcfile F`,
        `awk -f F`, `node --require F`): a process substitution there is its script."""
        options = CODE_FILE_OPTIONS.get(interpreter_family(name) or name)
        if options is None:
            return
        for index in range(exec_index + 1, len(words)):
            text = words[index].text
            if text == "--":
                return
            key, equals, _ = text.partition("=")
            if equals and key in options:
                self.code_file(words[index], text, subrisk, flagged)
            elif text in options and index + 1 < len(words):
                self.code_file(words[index + 1], f"{name} {text}", subrisk, flagged)

    def code_file(self, word: Word, what: str, subrisk: dict[int, Risk | None],
                  flagged: set[int]) -> None:
        """`word` names a file of code that runs: a risky process substitution (or a
        descriptor path open on one, or a downloaded file) is what runs."""
        for sub in word.subs:
            sub_risk = subrisk.get(id(sub))
            if sub.kind == "<(" and sub_risk is not None and sub_risk.risky:
                flagged.add(id(sub))
                self.findings.add("interpreter_runs_substitution",
                                  f"{what} runs {sub_risk.risky} output", sub.start)
        how = self.taint.tainted_file(word)
        if how is not None:
            self.findings.add(self.taint.rule_for(word), f"{what} {word.text}: it was {how}",
                              word.start)

    def value_findings(self, cmd: Command, subrisk: dict[int, Risk | None],
                       flagged: set[int]) -> None:
        for word in (*cmd.assignments, *cmd.words):
            self.value_word(word, subrisk, flagged)
        for redirect in cmd.redirects:
            if redirect.target is not None:
                self.value_word(redirect.target, subrisk, flagged)
            if redirect.heredoc is not None:
                for sub in redirect.heredoc.subs:
                    self.value_sub(sub, "heredoc body", subrisk, flagged)

    def value_word(self, word: Word, subrisk: dict[int, Risk | None],
                   flagged: set[int]) -> None:
        for sub in word.subs:
            self.value_sub(sub, word.text, subrisk, flagged)

    def value_sub(self, sub: Substitution, where: str, subrisk: dict[int, Risk | None],
                  flagged: set[int]) -> None:
        if id(sub) in flagged:
            return
        sub_risk = subrisk.get(id(sub))
        if sub_risk is not None and sub_risk.risky:
            self.findings.add("value_position_substitution",
                              f"{where} captures {sub_risk.risky} output", sub.start)
