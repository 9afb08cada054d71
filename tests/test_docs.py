"""The documentation stays true (issue 20, items 10 and 11).

Every figure in docs/ comes with the command that produced it, and every command
named in docs/ and the README exists with the options it is given
(``demos/check_docs.py``: static checks, well under a second; ``--run`` re-runs the
commands with ``--quick``, which takes minutes and is not for CI). Numbered lists
count 1, 2, 3, ...; the README starts with the two commands of a fresh machine.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "demos"))

import check_docs  # noqa: E402


def test_every_figure_has_its_command_and_every_command_exists():
    assert check_docs.check() == []
    # what is exempt is said, with a reason, and stays rare
    exempt = check_docs.opted_out()
    assert len(exempt) <= 4 and all("prototype" in e for e in exempt)


def test_the_checker_finds_what_it_should(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(
        "# A\n\nCommand: `python demos/bench_core.py --quick`\n\n| x | 1.5 s |\n\n"
        "## A.1\n\ninherits: 3 MB\n\n"
        "# B\n\n`streamspec learn book.txt` took 55 s\n\n"
        "# C\n\nno command: 12 s, 236 MB\n\n"
        "# D\n\n`python demos/bench_core.py --no-such-flag` 2 s\n\n"
        "# E\n\n`python demos/nope.py` 2 s; `streamspec nope` 1 s\n\n"
        "# F\n\nold: 4 s <!-- no command: prototype -->\n")
    found = check_docs.check(docs)
    assert any("section '# C'" in p for p in found)
    assert any("unknown option --no-such-flag" in p for p in found)
    assert any("nope.py: no such script" in p for p in found)
    assert any("streamspec nope: no such subcommand" in p for p in found)
    assert not any(s in p for p in found for s in ("'# A'", "'## A.1'", "'# B'", "'# F'"))
    assert len(found) == 4


def test_readme_commands_exist():
    text = (ROOT / "README.md").read_text()
    cmds = check_docs.commands(text, "README.md")
    assert len(cmds) > 10
    assert [p for c in cmds for p in check_docs.problems(c)] == []


def test_readme_starts_with_the_two_commands_of_a_fresh_machine():
    text = (ROOT / "README.md").read_text()
    first = re.search(r"```bash\n(.*?)```", text, re.S).group(1).strip().splitlines()
    assert first == ['pip install -e ".[test]" && streamspec demo --kafka',
                     'pip install -e ".[test]" && python -m pytest -q']


def test_numbered_lists_count_up():
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        expected = None
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            m = re.match(r"^(\d+)\. ", line)
            if m:
                n = int(m.group(1))
                assert n == (expected or 1) or n == 1, f"{path.name}:{number}: {n} after {expected - 1}"
                expected = n + 1
            elif line and not line.startswith(" "):
                expected = None if not line.startswith(("-", "*", "|")) else expected
