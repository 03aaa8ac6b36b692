"""One help style for every subcommand: a description, examples, the exit codes; every preset where a model is
asked for; `remat --version`."""

import pytest

from remat import __version__
from remat.cli import build_parser, main
from remat.models.presets import PRESETS

SUBCOMMANDS = ["check", "experiment", "figure", "report", "bandwidth", "measure", "account", "plan"]


def _help(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_subcommand_help_has_description_examples_and_exit_codes(capsys, name):
    text = _help(capsys, name)
    usage, description = text.split("\n\n")[:2]
    assert usage.startswith(f"usage: remat {name}") and len(description.split()) >= 5, text
    assert f"examples:\n  remat {name}" in text and "exit codes: 0 ok" in text and "2 bad input" in text
    parser = build_parser()._subparsers._group_actions[0].choices[name]
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"remat {name} {action.option_strings[0]} has no help text"


@pytest.mark.parametrize("name", ["measure", "account", "plan"])
def test_every_preset_is_listed_where_a_model_is_asked_for(capsys, name):
    text = " ".join(_help(capsys, name).split())
    assert all(preset in text for preset in PRESETS), text


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"remat {__version__}"


def test_the_module_contract_lists_every_command_and_plan_format():
    """cli/__init__'s docstring is the contract scripts read: every subcommand the parser has, every plan format."""
    import remat.cli
    commands = build_parser()._subparsers._group_actions[0].choices
    plan = next(a for a in commands["plan"]._actions if "--format" in a.option_strings)
    assert [c for c in commands if f"    remat {c} " not in remat.cli.__doc__] == []
    assert "--format " + "|".join(plan.choices) in remat.cli.__doc__
    from remat.planner.trainers import FORMATS        # the registry; the CLI keeps its own torch-free copy
    assert tuple(plan.choices) == ("md", "json", *FORMATS, "all")
    from remat.cli.plan_out import FILES                # --format all writes each of the others to its own file
    assert tuple(FILES) == ("md", "json", *FORMATS)
