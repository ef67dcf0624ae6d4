"""The README's console examples are what the commands print: each ``$ kubectl runs …`` line in a console
block is run (as ``kubectl-runs``) and its output compared with the lines under it, up to the next ``$``."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from kubectl_runs.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```console\n(.*?)```", re.S)


def examples() -> list[tuple[str, str]]:
    out = []
    for block in BLOCK.findall((ROOT / "README.md").read_text()):
        command, lines = None, []
        for line in [*block.splitlines(), "$ end"]:
            if line.startswith("$ "):
                if command and command.startswith("kubectl runs ") and "|" not in command:
                    out.append((command, "\n".join(lines)))
                command, lines = line[2:], []
            else:
                lines.append(line)
    return out


@pytest.mark.parametrize(("command", "expected"), examples(), ids=[c for c, _ in examples()])
def test_readme_example(command, expected, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    main(shlex.split(command)[2:])
    out, _ = capsys.readouterr()
    assert out.rstrip("\n") == expected


def test_the_readme_has_examples_of_every_report():
    commands = " ".join(c for c, _ in examples())
    for words in ("budgets usage", "plan", "explain", "leases audit", "seeds verify", "pending"):
        assert f"kubectl runs {words}" in commands
