"""Check that every figure in docs/ comes with the command that produced it, and that it still runs.

Every section of ``docs/*.md`` (the text under one heading) that states measured
figures (a table with numbers, or a number with a unit: ``12 s``, ``532 MB``,
``1.2 nats``, ``135,943 msg/s``) must name at least one command, or be inside a
section that does (a subsection inherits its parents' commands): ``python
demos/SCRIPT.py ...`` or ``streamspec COMMAND ...``, in inline code or a code block.
A section whose figures have no command in this repository (the prototype's) says
so, and why, in a comment ``<!-- no command: REASON -->``; :func:`opted_out` lists them.
Every command named anywhere in docs/ must exist: the script file, its options
(read from its ``add_argument`` calls, without running it) and positional choices;
the ``streamspec`` subcommand and its options (from the CLI's parser).

Usage::

    python demos/check_docs.py            # the static checks (what tests/test_docs.py runs)
    python demos/check_docs.py --run      # also run every script with --quick (or --help)

``--run`` takes minutes (benchmarks, brokers): it is for before re-measuring a
figure, not for CI; the static checks take well under a second.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

_CODE = re.compile(r"`([^`]+)`")
_FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
_COMMAND = re.compile(r"(?:[A-Z_]+=\S+\s+)*(python demos/[\w-]+\.py|streamspec [a-z]+)([^`\n]*)")
_UNIT = re.compile(r"\d[\d,.]*\s?(?:s|ms|min|MB|GB|kB|KB|MiB|GiB|msg/s|M/s|k/s|symbols/s|nats|"
                   r"nats/word|nats/letter|nats/character)\b")
_CELL_NUMBER = re.compile(r"^[*`~≈<>≥≤+−-]*\d")  # a table cell that starts with a number
_OPT_OUT = re.compile(r"<!-- no command: [^>]+-->")


@dataclass(frozen=True)
class Command:
    """A command named in a doc: its file, line, program (script or subcommand) and arguments."""

    doc: str
    line: int
    program: str
    args: tuple[str, ...]


def sections(text: str) -> list[tuple[int, str, str]]:
    """``(line, heading, body)`` of every section (text up to the next heading).

    >>> [(n, h) for n, h, _ in sections("intro\\n# A\\nx\\n## B\\ny\\n")]
    [(1, ''), (2, '# A'), (4, '## B')]
    """
    out, start, heading, body = [], 1, "", []
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            in_fence = not in_fence
        if line.startswith("#") and not in_fence:
            out.append((start, heading, "\n".join(body)))
            start, heading, body = number, line.strip(), []
        else:
            body.append(line)
    out.append((start, heading, "\n".join(body)))
    return [s for s in out if s[1] or s[2].strip()]


def has_figures(body: str) -> bool:
    """Whether a section states measured figures (a table row with a number, a number+unit).

    >>> has_figures("| a | 0.5 |"), has_figures("took 55 s"), has_figures("| P1 | (n,) |")
    (True, True, False)
    """
    for line in body.splitlines():
        if line.startswith("|") and any(_CELL_NUMBER.match(c.strip()) for c in line.split("|")):
            return True
    return bool(_UNIT.search(body))


def commands(text: str, doc: str = "") -> list[Command]:
    """The commands named in ``text``: inline code and code blocks (lines joined at ``\\``).

    >>> [(c.program, c.args) for c in commands("run `python demos/x.py --quick` now")]
    [('python demos/x.py', ('--quick',))]
    >>> [c.program for c in commands("```bash\\nstreamspec learn a.txt \\\\\\n  --out m\\n```")]
    ['streamspec learn']
    """
    found: list[Command] = []
    fences = list(_FENCE.finditer(text))
    spans = [(m.start(1), m.group(1).replace("\\\n", " ")) for m in fences]
    prose = _FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)  # offsets kept
    spans += [(m.start(1), m.group(1)) for m in _CODE.finditer(prose)]
    spans += [(m.start(1), m.group(1)) for m in re.finditer(r"^    (\S.*)$", prose, re.M)]
    for start, code in spans:
        for piece in re.split(r"\n|&&|;", code):
            m = _COMMAND.match(" ".join(piece.split()).removeprefix("$ "))
            if m:
                line = text.count("\n", 0, start) + 1
                args = m.group(2).split("#")[0]
                found.append(Command(doc, line, m.group(1), tuple(_words(args))))
    return found


def _words(args: str) -> list[str]:
    try:
        return shlex.split(args)
    except ValueError:  # an unclosed quote in prose: the words are enough
        return args.split()


def script_options(path: Path) -> tuple[set[str], set[str]]:
    """The option strings and positional choices of a script's ``add_argument`` calls (AST)."""
    options, choices = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-"):
                    options.add(a.value)
            for kw in node.keywords:
                if kw.arg == "choices" and isinstance(kw.value, ast.List | ast.Tuple):
                    choices |= {e.value for e in kw.value.elts if isinstance(e, ast.Constant)}
    return options, choices


def _cli_options(sub: str) -> tuple[set[str], set[str]] | None:
    """The options and positional choices of ``streamspec SUB`` (``None``: no such command)."""
    sys.path.insert(0, str(ROOT))
    from streamspec.cli import build_parser

    parser = build_parser()
    subparsers = parser._subparsers._group_actions[0].choices
    if sub not in subparsers:
        return None
    p = subparsers[sub]
    choices = {c for a in p._actions if not a.option_strings and a.choices for c in a.choices}
    return set(p._option_string_actions), choices


def _positional(cmd: Command) -> str | None:
    """The command's first word when it is no option (a subcommand or a choice)."""
    return cmd.args[0] if cmd.args and not cmd.args[0].startswith("-") else None


def problems(cmd: Command) -> list[str]:
    """What is wrong with one command: a missing script or subcommand, unknown options."""
    where = f"{cmd.doc}:{cmd.line}: {cmd.program}"
    if cmd.program.startswith("python "):
        path = ROOT / cmd.program.split()[1]
        if not path.exists():
            return [f"{where}: no such script"]
        options, choices = script_options(path)
    else:
        found = _cli_options(cmd.program.split()[1])
        if found is None:
            return [f"{where}: no such subcommand"]
        options, choices = found
    out = []
    first = _positional(cmd)
    if choices and first is not None and re.fullmatch(r"[a-z_]+", first) and first not in choices:
        out.append(f"{where}: unknown choice {first!r} (one of {', '.join(sorted(map(str, choices)))})")
    for word in cmd.args:
        word = word.strip("[]")
        if word.startswith("--"):
            flag = word.split("=")[0]
            if flag not in options:
                out.append(f"{where}: unknown option {flag}")
    return out


def check(docs: Path = DOCS) -> list[str]:
    """Every problem found in ``docs``: figures without a command, commands that do not exist."""
    out = []
    for path in sorted(docs.glob("*.md")):
        text = path.read_text()
        name = path.relative_to(docs.parent).as_posix()
        named: dict[int, bool] = {}  # heading level -> that section (or its parents) names one
        for line, heading, body in sections(text):
            level = len(heading) - len(heading.lstrip("#"))
            inherited = any(v for lv, v in named.items() if lv < level)
            named = {lv: v for lv, v in named.items() if lv < level}
            named[level] = bool(commands(body)) or inherited
            if has_figures(body) and not named[level] and not _OPT_OUT.search(body):
                out.append(f"{name}:{line}: section {heading or '(top)'!r} states figures "
                           "without the command that produced them")
        for cmd in commands(text, name):
            out.extend(problems(cmd))
    return out


def opted_out(docs: Path = DOCS) -> list[str]:
    """The sections that state figures without a command, with their reason."""
    out = []
    for path in sorted(docs.glob("*.md")):
        for line, heading, body in sections(path.read_text()):
            for m in _OPT_OUT.finditer(body):
                out.append(f"{path.name}:{line} {heading}: {m.group(0)[16:-3].strip()}")
    return out


def run_all(docs: Path = DOCS, timeout: float = 900) -> list[str]:
    """Run every documented script once with ``--quick`` (``--help`` without one); failures.

    A script with positional choices (``bench_large.py synthetic``) runs once per
    documented choice.
    """
    failures, seen = [], set()
    for path in sorted(docs.glob("*.md")):
        for cmd in commands(path.read_text(), path.name):
            positional = []
            if cmd.program.startswith("python "):
                script = ROOT / cmd.program.split()[1]
                options, choices = script_options(script)
                first = _positional(cmd)
                positional = [first] if first in choices else []
            if (cmd.program, *positional) in seen:
                continue
            seen.add((cmd.program, *positional))
            if cmd.program.startswith("python "):
                quick = "--quick" in options
                argv = [sys.executable, str(script), *positional, "--quick" if quick else "--help"]
            else:
                argv = [sys.executable, "-m", "streamspec", cmd.program.split()[1], "--help"]
            t0 = time.monotonic()
            proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
            status = "ok" if proc.returncode == 0 else f"FAILED ({proc.returncode})"
            print(f"{status:>12}  {time.monotonic() - t0:6.1f} s  {' '.join(argv[1:])}", flush=True)
            if proc.returncode:
                failures.append(f"{' '.join(argv[1:])}: {proc.stderr.strip()[-500:]}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true",
                        help="also run every documented script with --quick (minutes)")
    args = parser.parse_args(argv)
    found = check()
    for p in found:
        print(p)
    if args.run:
        found += run_all()
    print(f"{len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
