"""New packs as text: a YAML pack from the template beside this module (``new_pack.yaml``),
added at the end of a config's ``packs:`` with everything else in the file left as it was,
comments included (``fabric pack new``, ``fabric init``)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from importlib import resources
from string import Template

import yaml

from fabric.domain.errors import ConfigError

from .loader import packaged_text
from .where import yaml_error

INIT_HEADER = """\
# Written by `fabric init`. Add a pack written in YAML: fabric pack new NAME
# Check every pack: fabric packs --check · what this machine offers: fabric doctor
"""


def pack_text(name: str, tools: Sequence[str]) -> str:
    """The YAML of a new pack ``name`` (``name:`` and its section, not indented);
    ``tools``: the names of fabric's tools, listed in a comment."""
    template = resources.files("fabric.config").joinpath("new_pack.yaml").read_text("utf-8")
    listed = "\n  #   ".join(textwrap.wrap(", ".join(tools), width=80))
    return Template(template).substitute(name=name, tools=listed)


def first_config(name: str, tools: Sequence[str]) -> tuple[str, int]:
    """What ``fabric init`` writes: fabric's packaged default config with a first YAML pack
    ``name`` at the end of its packs, and the line that pack starts on."""
    text = INIT_HEADER + packaged_text()
    return with_pack(text, "fabric.yaml", name, pack_text(name, tools))


def with_pack(text: str, source: str, name: str, block: str) -> tuple[str, int]:
    """``text``, a config read from ``source``, with ``block`` (``pack_text``) as the last
    pack of its ``packs:``, and the line the pack starts on. Nothing else changes: the
    result is read back and compared; a config that cannot be changed so (``packs:`` written
    in flow style) is a ConfigError whose hint holds the block to paste by hand."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, source, text) from None
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    key, packs = _packs_of(root, source, name, block)
    for pack_key, _ in packs.value if packs is not None else ():
        if pack_key.value == name:
            raise ConfigError(
                f"{source}:{pack_key.start_mark.line + 1}: a pack named {name!r} is there already",
                hint="choose another name, or edit that pack",
            )
    if key is None:  # no packs: yet: it goes at the end
        head = ["\n"] if lines else []
        new, at = [*lines, *head, "packs:\n", *_indented(block, 2)], len(lines) + len(head) + 1
    elif packs is None:  # `packs:` with nothing (or ~): the pack goes right below it
        line = key.start_mark.line
        new, at = [*lines[:line], "packs:\n", *_indented(block, 2), *lines[line + 1 :]], line + 1
    else:
        indent = packs.value[0][0].start_mark.column
        at = _end_of_block(lines, _last_line(packs), key.start_mark.column) + 1
        tail = ["\n"] if at < len(lines) and lines[at].strip() else []
        new = [*lines[:at], "\n", *_indented(block, indent), *tail, *lines[at:]]
        at += 1
    return _checked(text, "".join(new), source, name, block), at + 1


def _packs_of(
    root: yaml.Node | None, source: str, name: str, block: str
) -> tuple[yaml.Node | None, yaml.MappingNode | None]:
    """The top-level ``packs`` key and its mapping (None for either when it has none)."""
    if root is None:
        return None, None
    if not isinstance(root, yaml.MappingNode) or root.flow_style:
        raise _by_hand(source, name, block, "its top level is not written one key per line")
    for key, value in root.value:
        if not (isinstance(key, yaml.ScalarNode) and key.value == "packs"):
            continue
        if isinstance(value, yaml.ScalarNode) and value.tag.endswith(":null"):
            return key, None
        if isinstance(value, yaml.MappingNode) and not value.flow_style and value.value:
            return key, value
        raise _by_hand(source, name, block, "its packs: is not written one pack per line")
    return None, None


def _last_line(node: yaml.Node) -> int:
    """The 0-based line where ``node``'s content ends (a block collection's own end mark
    lies where the next key begins, past comments and blank lines)."""
    while isinstance(node, yaml.MappingNode | yaml.SequenceNode) and not node.flow_style:
        last = node.value[-1]
        node = last[1] if isinstance(node, yaml.MappingNode) else last
    end = node.end_mark
    return end.line if end.column > 0 else end.line - 1


def _end_of_block(lines: list[str], last: int, column: int) -> int:
    """The last line (0-based) that belongs to the block ending on line ``last``: the comment
    lines after it indented deeper than its key (at ``column``), such as a pack's
    commented-out keys."""
    end = last
    for index in range(last + 1, len(lines)):
        stripped = lines[index].strip()
        if not stripped:
            continue
        indent = len(lines[index]) - len(lines[index].lstrip())
        if not stripped.startswith("#") or indent <= column:
            break
        end = index
    return end


def _indented(block: str, indent: int) -> list[str]:
    pad = " " * indent
    return [pad + line if line.strip() else line for line in block.splitlines(keepends=True)]


def _checked(before: str, after: str, source: str, name: str, block: str) -> str:
    """``after`` when it says what ``before`` says plus the pack, else a ConfigError."""
    old, new, pack = (yaml.safe_load(t) or {} for t in (before, after, block))
    expected = {**old, "packs": {**(old.get("packs") or {}), **pack}}
    if new != expected:
        raise _by_hand(source, name, block, "adding it would change what else the file says")
    return after


def _by_hand(source: str, name: str, block: str, why: str) -> ConfigError:
    pasted = "".join(_indented(block, 2))
    return ConfigError(
        f"fabric cannot add pack {name!r} to {source}: {why}",
        hint=f"add it under packs: yourself:\n{pasted}",
    )
