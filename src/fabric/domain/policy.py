"""The tool-call policy as pure functions: which calls run, which wait for a person, which are
refused.

A policy is a default verdict and an ordered list of rules; the first rule that matches a call
decides it. A rule names a tool and, optionally, a ``command`` pattern (shell) or a ``path``
glob (file tools):

- ``command`` is split like a command line into token patterns, matched against the call's
  argv (``shlex``): ``**`` matches any number (0+) of arguments, any other token is an
  ``fnmatch`` glob (case-sensitive) for exactly one argument.
- ``path`` is matched against the call's normalised, workspace-relative path: ``**`` crosses
  ``/``, ``*`` and ``?`` do not.

A shell command that holds shell syntax (``;``, ``&&``, ``||``, ``|``, ``&``, ``$(``, backticks,
redirections, a leading ``VAR=value``) is refused before any rule: fabric runs commands without
a shell, so such a command would not do what it says.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any, Literal, Protocol

from msgspec import Struct

from .errors import SandboxError

Verdict = Literal["allow", "ask", "deny"]
Scope = Literal["once", "run"]
SHELL_TOOL = "shell"
PATH_TOOLS = frozenset({"read_file", "write_file", "edit_file", "list_files", "search_files"})
"""The file tools whose ``path`` argument a rule's ``path`` glob is matched against."""
ANY_ARGS = "**"

_OPERATOR_CHARS = frozenset(";&|<>")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_SYNTAX_NAMES = {
    ";": "';' (command separator)",
    "&&": "'&&' (and-list)",
    "||": "'||' (or-list)",
    "|": "'|' (pipe)",
    "&": "'&' (background job)",
}


class PolicyDenied(SandboxError):
    """The policy refused a tool call (a ``deny`` rule, the default, or shell syntax)."""

    CODE = "policy_denied"


class ApprovalDenied(SandboxError):
    """A call the policy asks about was not approved (refused, timed out, no one to ask)."""

    CODE = "approval_denied"


class Rule(Protocol):
    """What the matcher reads of a rule (``fabric.config.policy.PolicyRule`` has it)."""

    @property
    def tool(self) -> str: ...
    @property
    def command(self) -> str | None: ...
    @property
    def path(self) -> str | None: ...
    @property
    def verdict(self) -> Verdict: ...


class Policy(Protocol):
    """What the matcher reads of a policy (``fabric.config.policy.PolicySettings`` has it)."""

    @property
    def default(self) -> Verdict: ...
    @property
    def rules(self) -> Sequence[Rule]: ...


class Decision(Struct, frozen=True):
    """What the policy says about one call. ``rule`` is the deciding rule as readable text
    (None when the default applied or shell syntax was found); ``reason`` says why in words."""

    verdict: Verdict
    rule: str | None
    reason: str


class ApprovalRequest(Struct, frozen=True):
    """A call waiting for a person's yes or no."""

    run_id: str
    step: int
    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    rule: str | None
    reason: str
    timeout: float | None
    """Seconds the answer may take; then the call is denied."""


class ApprovalAnswer(Struct, frozen=True):
    """A person's (or a stand-in's) answer. ``scope="run"`` means: the same answer for every
    later call of this tool under the same rule, for the rest of the run."""

    approved: bool
    by: str
    scope: Scope = "once"


# --- shell syntax ------------------------------------------------------------------------------


def shell_syntax(command: str) -> str | None:
    """The first piece of shell syntax in ``command``, described, or None. Quoted or escaped
    operators are plain text (a shell would not act on them either); ``$(`` and backticks are
    refused even inside double quotes, where a shell would still run them."""
    if "$(" in command:
        return "'$(...)' (command substitution)"
    if "`" in command:
        return "backticks (command substitution)"
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:
        return None  # unbalanced quotes: reported by split_command
    for token in tokens:
        if token and set(token) <= _OPERATOR_CHARS | {"(", ")"} and set(token) & _OPERATOR_CHARS:
            return _SYNTAX_NAMES.get(token, f"'{token}' (redirection)")
    # no operators, so the tokens are the words shlex.split would give
    if tokens and _ASSIGNMENT.match(tokens[0]):
        return f"a leading variable assignment ({tokens[0].split('=', 1)[0]}=...)"
    return None


def split_command(command: str) -> list[str]:
    """``command`` as argv, like the shell tool splits it; ValueError when it cannot be."""
    return shlex.split(command)


# --- matching ----------------------------------------------------------------------------------


def match_argv(pattern: Sequence[str], argv: Sequence[str]) -> bool:
    """Whether ``argv`` matches the token ``pattern`` (``**``: any number of arguments)."""
    # ends[j]: pattern[:i] matches argv[:j]; one row per pattern token
    ends = [True] + [False] * len(argv)
    for token in pattern:
        if token == ANY_ARGS:
            seen = False
            for j in range(len(ends)):
                seen = seen or ends[j]
                ends[j] = seen
        else:
            ends = [False] + [ends[j] and fnmatchcase(argv[j], token) for j in range(len(argv))]
    return ends[-1]


def normalise_path(path: str) -> str:
    """A workspace-relative path in one spelling: ``./a//b/../c`` → ``a/c``, ``""`` → ``.``."""
    return posixpath.normpath(path) if path else "."


@lru_cache(maxsize=256)
def _path_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("(?!/)[" + body.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def match_path(pattern: str, path: str) -> bool:
    """Whether the normalised ``path`` matches the glob ``pattern`` (``**`` crosses ``/``)."""
    return _path_regex(normalise_path(pattern)).fullmatch(normalise_path(path)) is not None


def rule_text(rule: Rule, index: int) -> str:
    """``rules[0]: {tool: shell, command: "git push **", verdict: ask}``: a rule as written."""
    parts = [f"tool: {rule.tool}"]
    if rule.command is not None:
        parts.append(f"command: {_quote(rule.command)}")
    if rule.path is not None:
        parts.append(f"path: {_quote(rule.path)}")
    parts.append(f"verdict: {rule.verdict}")
    return f"rules[{index}]: {{{', '.join(parts)}}}"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- deciding ----------------------------------------------------------------------------------


def decide(policy: Policy, tool: str, arguments: Mapping[str, Any]) -> Decision:
    """The verdict on calling ``tool`` with ``arguments``: shell syntax is denied first, then
    the first matching rule decides, else the policy's default."""
    argv: list[str] | None = None
    if tool == SHELL_TOOL and isinstance(arguments.get("command"), str):
        command = arguments["command"]
        syntax = shell_syntax(command)
        if syntax is not None:
            return Decision(
                "deny",
                None,
                f"the command contains shell syntax: {syntax}; fabric runs commands without "
                "a shell, so it would not do what a shell does",
            )
        try:
            argv = split_command(command)
        except ValueError as exc:
            return Decision("deny", None, f"the command cannot be split into arguments: {exc}")
    path = arguments.get("path", ".")
    for index, rule in enumerate(policy.rules):
        if rule.tool != tool:
            continue
        if rule.command is not None and (argv is None or not _argv_matches(rule.command, argv)):
            continue
        if rule.path is not None and (not isinstance(path, str) or not match_path(rule.path, path)):
            continue
        return Decision(rule.verdict, rule_text(rule, index), _why(rule, index))
    default = policy.default
    return Decision(default, None, f"no rule matches; the policy default is {default}")


def _argv_matches(pattern: str, argv: Sequence[str]) -> bool:
    tokens = _pattern_tokens(pattern)
    return tokens is not None and match_argv(tokens, argv)


@lru_cache(maxsize=256)
def _pattern_tokens(pattern: str) -> tuple[str, ...] | None:
    """A rule's command pattern split once, not on every call it is tried against."""
    try:
        return tuple(split_command(pattern))
    except ValueError:  # validated at load time; a hand-built rule may still be broken
        return None


def _why(rule: Rule, index: int) -> str:
    what = {"allow": "allows it", "ask": "asks a person first", "deny": "denies it"}[rule.verdict]
    if rule.command is not None:
        return f"the command matches {_quote(rule.command)} (rules[{index}]), which {what}"
    if rule.path is not None:
        return f"the path matches {_quote(rule.path)} (rules[{index}]), which {what}"
    return f"rules[{index}] covers every {rule.tool} call and {what}"
