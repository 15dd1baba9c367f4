"""The CLI's option records (freshindex/cli/grouped.py): options gathered into one frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass

import click
import pytest
from click.testing import CliRunner

from freshindex.cli.grouped import grouped


@dataclass(frozen=True)
class Picked:
    colour: str
    size: int
    loud: bool


def _command(seen: list[object]) -> click.Command:
    @click.command("pick")
    @click.argument("name")
    @click.option("--colour", default="red", show_default=True, help="A colour.")
    @click.option("--size", type=int, default=1)
    @click.option("--loud", is_flag=True)
    @grouped(Picked, "picked")
    def pick(name: str, picked: Picked) -> None:
        """Pick NAME."""
        seen.append((name, picked))

    return pick


def test_the_options_arrive_as_one_record_and_the_rest_as_themselves() -> None:
    seen: list[object] = []
    got = CliRunner().invoke(_command(seen), ["box", "--size", "3", "--loud"])
    assert got.exit_code == 0, got.output
    assert seen == [("box", Picked(colour="red", size=3, loud=True))]


def test_help_is_the_same_as_the_same_options_taken_one_by_one() -> None:
    @click.command("pick")
    @click.argument("name")
    @click.option("--colour", default="red", show_default=True, help="A colour.")
    @click.option("--size", type=int, default=1)
    @click.option("--loud", is_flag=True)
    def pick(name: str, colour: str, size: int, loud: bool) -> None:
        """Pick NAME."""

    grouped_help = CliRunner().invoke(_command([]), ["--help"])
    assert grouped_help.exit_code == 0 and "Pick NAME." in grouped_help.output
    assert grouped_help.output == CliRunner().invoke(pick, ["--help"]).output


def test_a_bad_value_is_still_clicks_error() -> None:
    got = CliRunner().invoke(_command([]), ["box", "--size", "many"])
    assert got.exit_code == 2 and "'many' is not a valid integer" in got.output


def test_only_a_dataclass_can_gather() -> None:
    with pytest.raises(TypeError):
        grouped(dict, "x")
