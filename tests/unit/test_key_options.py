"""A config's keys are its command's options, each declared once on its field (harnessrl/cli/key_options.py):
adding a key to a section is adding its option to every job with that section, with the field's help, range,
default, flag and environment variable."""

from __future__ import annotations

import tomllib

import pytest
import typer
from pydantic import Field
from typer.testing import CliRunner

from harnessrl.cli.job_config import config_command, option_keys
from harnessrl.cli.key_options import key_options
from harnessrl.config.files import Section, cli
from harnessrl.config.jobs import EvalConfig, QuickstartConfig, RunConfig
from harnessrl.config.sections import TasksConfig


class Knobs(Section):
    """A section as a new feature would add it."""

    depth: int = Field(3, ge=1, le=9, description="How deep it goes")
    names: list[str] = Field(["a"], description="Names, comma-separated", json_schema_extra=cli(given_as="comma_list"))
    pairs: dict = Field({}, description="key=value", json_schema_extra=cli("--pair", given_as="pairs"))
    secret: str | None = Field(None, description="A key from the environment", json_schema_extra=cli(envvar="KNOB_S"))


class Job(Section):
    name: str = Field(description="Required, as a run's name is")
    knobs: Knobs = Knobs()


def app_of(model: type[Section]) -> tuple[typer.Typer, list]:
    seen, made = [], typer.Typer()
    made.command()(config_command(model)(seen.append))
    return made, seen


def test_a_key_added_to_a_section_is_an_option_of_its_job_with_the_fields_help_range_and_default():
    made, seen = app_of(Job)
    result = CliRunner().invoke(made, ["--name", "n", "--depth", "5", "--names", "x,y", "--pair", "k=1"])
    assert result.exit_code == 0, result.output
    assert seen == [Job(name="n", knobs=Knobs(depth=5, names=["x", "y"], pairs={"k": 1}))]
    shown = CliRunner().invoke(made, ["--help"], env={"COLUMNS": "300"}).output
    assert "How deep it goes" in shown and "[default: 3]" in shown and "1<=x<=9" in shown
    assert CliRunner().invoke(made, ["--name", "n", "--depth", "10"]).exit_code == 2  # the field's range


def test_an_environment_variable_gives_its_key_and_show_config_prints_it():
    made, _ = app_of(Job)
    result = CliRunner().invoke(made, ["--name", "n", "--show-config"], env={"KNOB_S": "s3"})
    assert result.exit_code == 0, result.output
    assert tomllib.loads(result.stdout)["knobs"]["secret"] == "s3"


def test_a_required_key_given_by_nobody_is_clicks_missing_option():
    made, seen = app_of(Job)
    result = CliRunner().invoke(made, [])
    assert result.exit_code == 2 and "Missing option '--name'" in result.output and seen == []


def test_a_key_without_a_description_is_refused_naming_the_fix():
    class Bare(Section):
        depth: int = 3

    with pytest.raises(TypeError, match=r"Bare.depth has no description.*Field\(description=...\)"):
        list(key_options(Bare))


def test_two_keys_with_one_flag_are_refused_naming_the_fix():
    class Clash(Section):
        depth: int = Field(3, description="d")
        knobs: Knobs = Knobs()

    with pytest.raises(TypeError, match="two keys have one flag"):
        config_command(Clash)(print)

    class Shadowing(Section):
        config: str = Field("x", description="a key whose flag would be --config")

    with pytest.raises(TypeError, match="two keys have one flag"):
        config_command(Shadowing)(print)


def test_a_section_that_changes_a_default_keeps_the_options_flag_and_help():
    class Narrower(TasksConfig):
        source: str = "builtin:shell"

    (option,) = [o for o in key_options(Narrower) if o.key == "source"]
    assert option.name == "tasks" and option.default == "builtin:shell"


@pytest.mark.parametrize("model", [RunConfig, EvalConfig, QuickstartConfig])
def test_every_jobs_keys_have_options_of_their_own_flags(model):
    options = list(key_options(model))
    assert len({o.name for o in options}) == len(options) > 20
    made, _ = app_of(model)
    assert {s.key for s in option_keys(made.registered_commands[0].callback).values()} == {o.key for o in options}
