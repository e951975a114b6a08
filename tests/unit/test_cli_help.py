"""Every option's help reaches --help as written: rich reads a bare ``[default: ...]`` as a markup tag and
drops it, so the texts are escaped where options are made (key options) or written (the other commands)."""

from __future__ import annotations

import re

import click
import typer
from typer.testing import CliRunner

from harnessrl.cli.app import app

DEFAULT_NOTE = re.compile(r"\\?\[default: [^\]]*\]")  # a help text's own note on its default


def commands(group: click.Group, path: tuple[str, ...] = ()):
    """(the words that name it, the command) for every command of ``group``, sub-groups' included."""
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def flat(text: str) -> str:
    """Help output with its boxes and line wrapping taken out."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_every_options_own_default_note_is_shown_in_its_commands_help():
    root = typer.main.get_command(app)
    checked = 0
    for path, command in commands(root):
        notes = [m.group(0).lstrip("\\") for p in command.params for m in DEFAULT_NOTE.finditer(p.help or "")]
        if not notes:
            continue
        shown = flat(CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400"}).output)
        for note in notes:
            assert " ".join(note.split()) in shown, (path, note)
            checked += 1
    assert checked >= 20  # the notes of serve, run, eval, quickstart, sft, export...
