"""The tool-call policy: shell syntax refused outright, argv patterns, path globs, first match
wins, defaults, and the errors a pack author sees for a broken policy in fabric.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import line_of, write

from fabric.config.loader import load_config
from fabric.config.policy import PolicyRule, PolicySettings
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import ConfigError
from fabric.domain.policy import decide, match_argv, match_path, shell_syntax
from fabric.infrastructure.packs.registry import load_pack
from packs.engineering import EngineeringSettings


def policy(*rules: dict[str, Any], default: str = "allow") -> PolicySettings:
    return PolicySettings.model_validate({"default": default, "rules": list(rules)})


def verdict(p: PolicySettings, tool: str, **arguments: Any) -> str:
    return decide(p, tool, arguments).verdict


# --- shell syntax is denied before any rule ----------------------------------------------------


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ("ls; rm -rf x", "';'"),
        ("ls;rm", "';'"),
        ("make && make install", "'&&'"),
        ("test -f x || touch x", "'||'"),
        ("cat a | grep b", "'|'"),
        ("sleep 100 &", "'&'"),
        ("echo $(cat secret)", "'$(...)'"),
        ('echo "$(cat secret)"', "'$(...)'"),
        ("echo `id`", "backticks"),
        ("ls > out.txt", "'>'"),
        ("ls >out.txt", "'>'"),
        ("cat < in.txt", "'<'"),
        ("ls >> out.txt", "'>>'"),
        ("ls 2> err.txt", "'>'"),
        ("ls 2>&1", "'>&'"),
        ("ls &> all.txt", "'&>'"),
        ("FOO=1 python x.py", "FOO="),
        ("PATH=/tmp git status", "PATH="),
    ],
)
def test_shell_syntax_is_denied_even_when_a_rule_allows_the_program(
    command: str, named: str
) -> None:
    p = policy({"tool": "shell", "command": "**", "verdict": "allow"}, default="allow")
    decision = decide(p, "shell", {"command": command})
    assert decision.verdict == "deny"
    assert decision.rule is None
    assert named in decision.reason
    assert "without a shell" in decision.reason
    assert shell_syntax(command) is not None


@pytest.mark.parametrize(
    "command",
    [
        "python -c \"import os; print('a | b && c > d')\"",  # quoted: plain text
        "grep -E 'a|b' src/app.py",
        r"echo a\;b",
        "git log --format=%H -n 3",
        "python -m pytest -k 'not slow'",
        "pytest tests/ -x",
        "git commit -m 'x=1 is fixed'",
    ],
)
def test_quoted_operators_and_ordinary_commands_are_not_shell_syntax(command: str) -> None:
    assert shell_syntax(command) is None
    assert verdict(policy(), "shell", command=command) == "allow"


def test_a_command_that_cannot_be_split_is_denied() -> None:
    decision = decide(policy(), "shell", {"command": "echo 'unbalanced"})
    assert decision.verdict == "deny"
    assert "cannot be split" in decision.reason


# --- argv patterns -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "argv", "matches"),
    [
        ("git push **", "git push", True),
        ("git push **", "git push origin main --force", True),
        ("git push **", "git pull", False),
        ("git push", "git push origin", False),  # no ** : exactly these arguments
        ("git ** -c **", "git -c core.pager=sh log", True),
        ("git ** -c **", "git log -n 3", False),
        ("git ** push **", "git -C sub push", True),
        ("pytest *", "pytest tests", True),
        ("pytest *", "pytest", False),  # * is exactly one argument
        ("pytest *", "pytest a b", False),
        ("python -m pip **", "python -m pip install x", True),
        ("git push --force*", "git push --force-with-lease", True),
        ("Git **", "git status", False),  # case-sensitive
        ("**", "anything at all", True),
        ("** rm **", "find . -exec rm x", True),
        ("git ??", "git ls", True),
        ("git [cl]*", "git log", True),
    ],
)
def test_command_patterns_match_argv_word_by_word(pattern: str, argv: str, matches: bool) -> None:
    assert match_argv(pattern.split(), argv.split()) is matches
    p = policy({"tool": "shell", "command": pattern, "verdict": "deny"})
    assert verdict(p, "shell", command=argv) == ("deny" if matches else "allow")


def test_quoting_in_the_call_is_undone_before_matching() -> None:
    p = policy({"tool": "shell", "command": "git commit -m *", "verdict": "ask"})
    assert verdict(p, "shell", command="git commit -m 'a long message'") == "ask"
    assert verdict(p, "shell", command="git commit -m a long message") == "allow"


# --- path globs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("**/*.lock", "poetry.lock", True),  # **/ may be no folder at all
        ("**/*.lock", "sub/dir/Cargo.lock", True),
        ("*.lock", "sub/Cargo.lock", False),  # * does not cross /
        ("*.lock", "Cargo.lock", True),
        ("src/**", "src/a/b/c.py", True),
        ("src/*.py", "src/a/b.py", False),
        ("src/?.py", "src/a.py", True),
        ("src/?.py", "src/ab.py", False),
        ("secrets/**", "./secrets/key.txt", True),  # normalised before matching
        ("secrets/**", "docs/../secrets/key.txt", True),
        ("secrets/**", "secrets//key.txt", True),
        ("src/[!t]*.py", "src/app.py", True),
        ("src/[!t]*.py", "src/test.py", False),
        ("docs/*.md", "docs/a.MD", False),
    ],
)
def test_path_globs(pattern: str, path: str, matches: bool) -> None:
    assert match_path(pattern, path) is matches
    p = policy({"tool": "write_file", "path": pattern, "verdict": "deny"})
    assert verdict(p, "write_file", path=path, content="x") == ("deny" if matches else "allow")


def test_a_file_tool_without_a_path_argument_is_matched_as_the_workspace_root() -> None:
    p = policy({"tool": "list_files", "path": ".", "verdict": "ask"})
    assert verdict(p, "list_files") == "ask"
    assert verdict(p, "list_files", path="src") == "allow"


# --- first match, tool rules, defaults --------------------------------------------------------


def test_the_first_matching_rule_wins_and_is_named() -> None:
    p = policy(
        {"tool": "shell", "command": "git push --dry-run **", "verdict": "allow"},
        {"tool": "shell", "command": "git push **", "verdict": "ask"},
        {"tool": "shell", "command": "git **", "verdict": "deny"},
    )
    assert verdict(p, "shell", command="git push --dry-run origin") == "allow"
    decision = decide(p, "shell", {"command": "git push origin"})
    assert decision.verdict == "ask"
    assert decision.rule == 'rules[1]: {tool: shell, command: "git push **", verdict: ask}'
    assert "git push **" in decision.reason
    assert verdict(p, "shell", command="git status") == "deny"


def test_a_rule_without_pattern_covers_every_call_of_its_tool_only() -> None:
    p = policy({"tool": "fetch_url", "verdict": "ask"})
    decision = decide(p, "fetch_url", {"url": "https://example.org"})
    assert (decision.verdict, decision.rule) == ("ask", "rules[0]: {tool: fetch_url, verdict: ask}")
    assert verdict(p, "read_file", path="a.txt") == "allow"


@pytest.mark.parametrize("default", ["allow", "ask", "deny"])
def test_the_default_applies_when_no_rule_matches(default: str) -> None:
    p = policy({"tool": "shell", "command": "git **", "verdict": "allow"}, default=default)
    decision = decide(p, "write_file", {"path": "a", "content": ""})
    assert decision.verdict == default
    assert decision.rule is None
    assert f"default is {default}" in decision.reason


def test_the_empty_policy_allows_everything_and_has_a_five_minute_timeout() -> None:
    settings = SandboxSettings()
    assert settings.policy.default == "allow"
    assert settings.policy.rules == []
    assert settings.policy.approval_timeout == 300
    assert verdict(settings.policy, "shell", command="git push") == "allow"


def test_the_engineering_pack_asks_before_pushing_and_denies_git_config_overrides() -> None:
    p = EngineeringSettings(builder="packs.engineering:build").sandbox.policy
    assert verdict(p, "shell", command="git push origin main") == "ask"
    assert verdict(p, "shell", command="git -C sub push") == "ask"
    assert verdict(p, "shell", command="git -c core.pager=evil log") == "deny"
    assert verdict(p, "shell", command="git --config-env=core.pager=EVIL log") == "deny"
    assert verdict(p, "shell", command="git commit -m 'push later'") == "allow"
    assert verdict(p, "shell", command="python -m pytest -q") == "allow"
    assert verdict(p, "write_file", path="a.py", content="") == "allow"


# --- configuration errors ----------------------------------------------------------------------


def test_a_policy_in_fabric_yaml_loads_and_replaces_the_packs_own(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        packs:
          engineering:
            builder: packs.engineering:build
            sandbox:
              policy:
                default: ask
                approval_timeout: 30
                rules:
                  - {tool: shell, command: "pytest **", verdict: allow}
                  - {tool: write_file, path: "**/*.lock", verdict: deny}
        """,
    )
    loaded = load_config(path)
    settings = load_pack(loaded, "engineering").settings.sandbox
    assert settings.allowed_commands  # the pack's other defaults stay
    assert settings.policy.default == "ask" and settings.policy.approval_timeout == 30
    assert [r.verdict for r in settings.policy.rules] == ["allow", "deny"]
    assert verdict(settings.policy, "shell", command="git push") == "ask"  # no pack rule left


@pytest.mark.parametrize(
    ("rule", "key", "says"),
    [
        (
            '{tool: write_file, command: "rm **", verdict: deny}',
            "rules.0.command",
            "'command' applies only to tool shell",
        ),
        (
            '{tool: shell, path: "src/**", verdict: deny}',
            "rules.0.path",
            "'path' applies only to the file tools",
        ),
        ('{tool: fetch_url, path: "x", verdict: deny}', "rules.0.path", "applies only"),
        ('{tool: shell, command: "git \'push", verdict: ask}', "rules.0.command", "quotes"),
        ('{tool: shell, command: "git push; ls", verdict: ask}', "rules.0.command", "';'"),
        ('{tool: shell, command: "", verdict: ask}', "rules.0.command", "empty"),
        ('{tool: read_file, path: "/etc/**", verdict: deny}', "rules.0.path", "relative"),
        ("{tool: shell, verdict: maybe}", "rules.0.verdict", "'allow', 'ask' or 'deny'"),
        ("{tool: shell, verdict: ask, when: always}", "rules.0.when", "unknown key"),
    ],
)
def test_a_broken_rule_is_a_config_error_with_file_line_and_key(
    tmp_path: Path, rule: str, key: str, says: str
) -> None:
    path = write(
        tmp_path,
        f"""\
        packs:
          p:
            builder: declarative
            system_prompt: hi
            sandbox:
              policy:
                rules:
                  - {rule}
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert f"packs.p.sandbox.policy.{key}" in text
    assert f"{path}:{line_of(path, '- {')}" in text
    assert says in text


@pytest.mark.parametrize(
    ("policy_yaml", "key", "says"),
    [
        ("{default: sometimes}", "default", "'allow', 'ask' or 'deny'"),
        ("{approval_timeout: 0}", "approval_timeout", "greater than 0"),
        ("{rules: {tool: shell}}", "rules", "list"),
    ],
)
def test_broken_policy_settings_are_config_errors(
    tmp_path: Path, policy_yaml: str, key: str, says: str
) -> None:
    path = write(
        tmp_path,
        f"""\
        packs:
          p: {{builder: declarative, system_prompt: hi, sandbox: {{policy: {policy_yaml}}}}}
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"packs.p.sandbox.policy.{key}" in str(info.value)
    assert says in str(info.value)
    assert info.value.hint


def test_rules_are_checked_when_built_in_python_too() -> None:
    with pytest.raises(ValueError, match="applies only to tool shell"):
        PolicyRule(tool="read_file", command="cat **", verdict="deny")


def test_the_readme_policy_example_loads_and_decides_as_described(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")
    section = readme.split("### Policy and approvals", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    loaded = load_config(write(tmp_path, example))
    p = load_pack(loaded, "engineering").settings.sandbox.policy
    assert verdict(p, "shell", command="git push origin") == "ask"
    assert verdict(p, "shell", command="git -c core.pager=x log") == "deny"
    assert verdict(p, "write_file", path="a/b/Cargo.lock", content="") == "deny"
    research = load_pack(loaded, "research").settings.sandbox.policy
    assert verdict(research, "fetch_url", url="https://example.org") == "ask"
    assert verdict(p, "shell", command="pytest -q") == "allow"
    assert match_argv(["git", "push", "*"], ["git", "push", "origin"])
    assert not match_argv(["git", "push", "*"], ["git", "push", "origin", "main"])
