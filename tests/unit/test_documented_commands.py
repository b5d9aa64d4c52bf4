"""The commands the documentation shows, held to the code: `--help` of every subcommand
answers, help texts list every choice of the lists they describe (generated from them, not
typed), every `mars ...` command line in the README and docs/ parses with the real parser
(its flags exist, its choices are valid), the quick ones (`mars check ...`) run, and the files
the project's own files cite exist."""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cli.commands import parser
from cli.main import main
from tests.conftest import REPO


def _subcommands(p: argparse.ArgumentParser, path=()):
    """Every (sub)command path with its parser: ("train",), ("eval", "mas"), ...; an alias
    (`eval strategic` of `eval games`) too, with the same parser."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _subcommands(sub, (*path, name))


SUBCOMMANDS = {path: sub for path, sub in _subcommands(parser())}
PRIMARY = list({id(sub): path for path, sub in reversed(SUBCOMMANDS.items())}.values())[::-1]


@pytest.mark.parametrize("path", [(), *PRIMARY], ids=lambda p: " ".join(p) or "mars")
def test_help_of_every_subcommand_answers(path, capsys):
    with pytest.raises(SystemExit) as done:
        main([*path, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: mars {' '.join(path)}".rstrip())


def test_the_installed_command_answers_help():
    mars = Path(sys.executable).with_name("mars")
    out = subprocess.run([str(mars), "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "check" in out.stdout and "train" in out.stdout


def _help(path: tuple[str, ...], flag: str) -> str:
    action = next(a for a in SUBCOMMANDS[path]._actions if flag in a.option_strings)
    return " ".join(action.help.split())


def test_help_lists_every_choice_of_its_list():
    from eval.benchmarks import BENCHMARKS
    from eval.systems import SYSTEMS
    from mars_core.games.opponents import BOT_SPECS, OPPONENT_SPECS

    games = next(p for p in PRIMARY if p[0] == "eval" and p[-1] not in ("mas", "harness")
                 and len(p) == 2)  # the game evaluation (`eval games`, formerly `strategic`)
    lists = {(games, "--opponents"): OPPONENT_SPECS,
             (games, "--policy"): BOT_SPECS,
             (("eval", "mas"), "--benchmarks"): tuple(BENCHMARKS),
             (("eval", "harness"), "--benchmarks"): tuple(BENCHMARKS),
             (("eval", "mas"), "--systems"): tuple(SYSTEMS)}
    for (path, flag), choices in lists.items():
        text = _help(path, flag)
        missing = [c for c in choices if not re.search(rf"(?<![\w:-]){re.escape(c)}(?![\w-])",
                                                          text)]
        assert not missing, f"mars {' '.join(path)} {flag}: its help leaves out {missing}"


def test_output_file_defaults_are_the_ones_the_help_names():
    for path in PRIMARY:
        for action in SUBCOMMANDS[path]._actions:
            if "--out" in action.option_strings and action.default:
                assert f"(default: {action.default})" in _help(path, "--out"), path


# -- the command lines of the README and docs/ --------------------------------------------------
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)


def documented_commands(text: str) -> list[str]:
    """`mars ...` command lines inside the fenced blocks of a Markdown text, continuation lines
    joined, comments dropped; usage summaries (`[--flag ...]`) are not commands."""
    found = []
    for block in _FENCE.findall(text):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.strip().removeprefix("$ ")
            if not re.match(r"^(\.venv/bin/)?mars\s", line):
                continue
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                words = line.split()
            if any(w.startswith("[") or w in ("|", "...") or "..." in w for w in words):
                continue  # a usage summary, not a command
            found.append(shlex.join(words[1:]))
    return found


COMMANDS = sorted({(doc.relative_to(REPO).as_posix(), c) for doc in DOCS if doc.is_file()
                   for c in documented_commands(doc.read_text(encoding="utf-8"))})


def test_documented_commands_are_found():
    assert documented_commands("```bash\nmars train --config a.yaml \\\n  --set x=1  # why\n"
                               "mars eval mas [--limit N]\n```\n") == [
        "train --config a.yaml --set x=1"]
    assert len(COMMANDS) >= 5, "the README and docs show mars commands"


@pytest.mark.parametrize("doc,command", COMMANDS, ids=[f"{d}: {c[:60]}" for d, c in COMMANDS])
def test_every_documented_command_parses(doc, command, capsys):
    try:
        parser().parse_args(shlex.split(command))
    except SystemExit as e:
        pytest.fail(f"{doc}: `mars {command}` does not parse: "
                    f"{capsys.readouterr().err.strip().splitlines()[-1:]} (exit {e.code})")


# `mars check` lines run (the adding-a-game page's needs the game added first: its own test
# runs it, tests/unit/test_adding_a_game.py)
QUICK = [(d, c) for d, c in COMMANDS if c.startswith("check ") and not d.endswith("adding.md")]


@pytest.mark.parametrize("doc,command", QUICK, ids=[f"{d}: {c[:60]}" for d, c in QUICK])
def test_documented_quick_commands_run(doc, command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    assert main([*shlex.split(command), "--runs-dir", str(tmp_path)]) == 0, capsys.readouterr()


def usage_lines(text: str) -> list[str]:
    """The usage summaries (`mars eval mas --model SPEC [--limit N] ...`) of a text: in fenced
    blocks, and in the `cli/main.py` docstring; continuation lines (more indented) joined."""
    blocks = _FENCE.findall(text) or [text]
    found = []
    for block in blocks:
        for line in re.split(r"\n(?=\s*(?:\$ )?(?:\.venv/bin/)?mars\s)", block):
            line = " ".join(line.split()).removeprefix("$ ")
            if re.match(r"^(\.venv/bin/)?mars\s", line) and " [" in line:
                found.append(line.split("#")[0].split(" (")[0])
    return found


def _usage_cases():
    docs = {d.relative_to(REPO).as_posix(): d.read_text(encoding="utf-8")
            for d in DOCS if d.is_file()}
    import cli.main
    docs["cli/main.py"] = cli.main.__doc__
    return sorted({(name, u) for name, text in docs.items() for u in usage_lines(text)})


USAGE = _usage_cases()


@pytest.mark.parametrize("doc,usage", USAGE, ids=[f"{d}: {u[:50]}" for d, u in USAGE])
def test_usage_summaries_name_real_flags_and_defaults(doc, usage):
    """Every flag a usage summary names exists on that subcommand, and an output file shown
    as `[--out FILE]` is the one the command writes by default."""
    words = usage.split()[1:]
    path: tuple[str, ...] = ()
    while words and (*path, words[0]) in SUBCOMMANDS:
        path, words = (*path, words[0]), words[1:]
    assert path, f"{doc}: `{usage}` names no subcommand"
    flags = {f: a for a in SUBCOMMANDS[path]._actions for f in a.option_strings}
    named = re.findall(r"(--[a-z][\w-]*)(?:[ =]([^\s\]]+))?", " ".join(words))
    unknown = [f for f, _ in named if f not in flags]
    assert not unknown, f"{doc}: `mars {' '.join(path)}` has no {unknown}"
    for flag, value in named:
        default = flags[flag].default
        if flag == "--out" and isinstance(default, str) and "." in value:
            assert value == default, f"{doc}: `mars {' '.join(path)}` writes {default}, not {value}"


# -- paths the project's own files cite ---------------------------------------------------------
TOP = ("mars_core", "tasks", "flows", "cli", "eval", "tests", "bench", "configs", "docs",
       "requirements")
_CITED = re.compile(rf"\b(?:{'|'.join(TOP)})/[\w./-]*\w\.(?:py|ya?ml|md|txt|json|lock)\b")


@pytest.mark.parametrize("name", ["pyproject.toml", "Makefile", "prefect.yaml"])
def test_files_cited_by_the_project_files_exist(name):
    text = (REPO / name).read_text(encoding="utf-8")
    missing = sorted({m for m in _CITED.findall(text) if not (REPO / m).exists()})
    assert not missing, f"{name} cites files that do not exist: {missing}"
