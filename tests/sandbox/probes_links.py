"""Probes for hidden places reached through symbolic links: links planted around a protected
folder (beside it, in the folders above it, at any depth, in chains, relative, to ``/``) and
credential stores in the home folder that are links themselves; and the normal reads through
links that must keep working. Under Landlock a granted link grants what it leads to, so the
grants around hidden places must never include one (``profile._read_grants``)."""

from __future__ import annotations

import secrets
from pathlib import Path

from .lab import Lab, Verdict, host_env, probe

READ_ALL = """
found = []
for route in ARGS:
    found.append(attempt("read " + route, lambda: open(route).read()))
    folder = os.path.dirname(route)
    found.append(attempt("list " + folder, lambda: sorted(os.listdir(folder))))
os.symlink("/", "made-root")  # a link the command makes itself, to the root
found.append(attempt("own link", lambda: open("made-root" + ARGS[0]).read()))
open("loot.txt", "w").write(repr(found))
"""
"""Read every route given (a file's path), list its folder, and write what was read into the
workspace; the first route must be the secret's own path."""


def _link(at: Path, to: str | Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(to)


def _routes(lab: Lab) -> tuple[Path, list[str]]:
    """A secret in ``root/real/x/y/secret`` (to be hidden) and the paths that lead to its file
    through links planted in and around the folders above it."""
    root = lab.root
    hidden = root / "real" / "x" / "y" / "secret"
    hidden.mkdir(parents=True)
    _link(root / "alink", root / "real")  # beside it: the report that found the hole
    _link(root / "rel", "real/x")  # relative
    _link(root / "chain1", root / "chain2")  # a chain of links
    _link(root / "chain2", "alink")
    _link(root / "up", ".")  # to a folder above the hidden one
    _link(root / "top", "/")  # to the root
    _link(root / "direct", hidden)  # to the hidden folder itself
    _link(root / "file", hidden / "a.txt")  # to the secret file
    _link(root / "real" / "self", ".")  # inside the folders walked around it, at each depth
    _link(root / "real" / "x" / "back", "../..")
    _link(root / "real" / "x" / "y" / "sib", "secret")
    _link(root / "real" / "x" / "y" / "z", root / "real" / "x" / "y")
    _link(root / "deep" / "a" / "b" / "c", "../../../real/x")  # a deep one elsewhere
    _link(lab.ws / "in", "../real/x/y/secret")  # in the workspace
    tail = "x/y/secret/a.txt"
    routes = [
        hidden / "a.txt",
        root / "alink" / tail,
        root / "rel" / "y/secret/a.txt",
        root / "chain1" / tail,
        root / "up" / "real" / tail,
        root / "top" / str(hidden / "a.txt").lstrip("/"),
        root / "direct" / "a.txt",
        root / "file",
        root / "real" / "self" / tail,
        root / "real" / "x" / "back" / "real" / tail,
        root / "real" / "x" / "y" / "sib" / "a.txt",
        root / "real" / "x" / "y" / "z" / "secret" / "a.txt",
        root / "deep" / "a" / "b" / "c" / "y/secret/a.txt",
        lab.ws / "in" / "a.txt",
    ]
    return hidden, [str(r) for r in routes]


@probe(
    "hidden folder through symlinks",
    "escape",
    "a protected folder four levels below the lab, with symlinks planted beside it, above it, "
    "in every folder on the way (relative, chained, to its parent folders, to the folder and "
    "the file themselves, to /) and in the workspace; the command reads the secret through "
    "each and through a link to / it makes; judged by the workspace's content",
)
async def hidden_through_links(lab: Lab) -> Verdict:
    canary = f"canary-{secrets.token_hex(8)}"
    hidden, routes = _routes(lab)
    (hidden / "a.txt").write_text(canary)
    out = await lab.python(READ_ALL, *routes, protected=[hidden])
    found = ["the secret reached the workspace"] if canary.encode() in lab.loot() else []
    return lab.judge(out, found)


@probe(
    "credential store behind a symlink",
    "escape",
    "HOME's .ssh, .netrc and .aws are symlinks (a dotfiles manager's) to a folder and files "
    "elsewhere, one through a chain; the command reads the keys through the links and where "
    "they really lie; judged by the workspace's content",
)
async def linked_credentials(lab: Lab) -> Verdict:
    canary = f"canary-{secrets.token_hex(8)}"
    store = lab.root / "dotfiles"
    (store / "ssh").mkdir(parents=True)
    (store / "ssh" / "id_rsa").write_text(f"key {canary}\n")
    (store / "netrc").write_text(f"machine x password {canary}\n")
    (store / "aws").mkdir()
    (store / "aws" / "credentials").write_text(f"secret {canary}\n")
    _link(lab.home / ".ssh", store / "ssh")
    _link(lab.home / ".netrc", "../dotfiles/netrc")
    _link(lab.root / "aws-link", store / "aws")
    _link(lab.home / ".aws", lab.root / "aws-link")
    routes = [
        store / "ssh" / "id_rsa",
        lab.home / ".ssh" / "id_rsa",
        lab.home / ".netrc",
        store / "netrc",
        lab.home / ".aws" / "credentials",
        store / "aws" / "credentials",
    ]
    with host_env(HOME=str(lab.home)):
        out = await lab.python(READ_ALL, *routes)
    found = ["a credential reached the workspace"] if canary.encode() in lab.loot() else []
    return lab.judge(out, found)


@probe(
    "reads through symlinks",
    "task",
    "with a protected folder hidden, files beside it stay readable through links: a link to "
    "the folder above it, a relative one, one to /, one in the workspace, and a credential "
    "store's link (only what it leads to is hidden); judged by what the command copied",
)
async def reads_through_links(lab: Lab) -> Verdict:
    hidden, _ = _routes(lab)
    word = f"open-{secrets.token_hex(8)}"
    (lab.root / "real" / "x" / "open.txt").write_text(word)
    (lab.outside / "existing.txt").write_text(word)
    _link(lab.home / ".ssh", lab.outside / "ssh")  # dangling: nothing to hide
    routes = [
        lab.root / "alink" / "x" / "open.txt",
        lab.root / "rel" / "open.txt",
        lab.root / "top" / str(lab.root / "real" / "x" / "open.txt").lstrip("/"),
        lab.root / "up" / "outside" / "existing.txt",
        lab.ws / "out" / "existing.txt",
    ]
    _link(lab.ws / "out", "../outside")
    with host_env(HOME=str(lab.home)):
        out = await lab.python(
            """
            for route in ARGS:
                open("copied.txt", "a").write(open(route).read() + "\\n")
            """,
            *routes,
            protected=[hidden],
        )
    copied = (lab.ws / "copied.txt").read_text() if (lab.ws / "copied.txt").exists() else ""
    if out.exit_code != 0 or copied.split() != [word] * len(routes):
        return Verdict("broken", f"{len(copied.split())} of {len(routes)} read: {out.output}")
    return Verdict("works", f"all {len(routes)} read")
