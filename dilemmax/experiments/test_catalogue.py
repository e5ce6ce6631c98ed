"""The catalogue ``dilemmax experiment --list`` reads: one entry per registered design, with the
design's own section and summary and the calls its plan gives at the paper's sizes; and the
listing imports nothing a design needs (it took minutes when it planned every design)."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from dilemmax.envs.open_cleanup import constants as cleanup
from dilemmax.envs.open_harvest import constants as harvest
from dilemmax.experiments import catalogue, registry, runner
from dilemmax.experiments.cli import parse_design_argv
from dilemmax.experiments.open_grid import common as open_grid

CHEAP = ("moral_hazard/", "consequence/")  # planned for real; the grid games' envs are stubbed


def test_every_design_has_its_entry_and_nothing_else_does():
    designs, entries = registry.designs(), catalogue.entries()
    assert list(designs) == list(entries)
    for name, design in designs.items():
        assert (design.section, design.summary) == (entries[name].section, entries[name].summary)


def _defaults(design) -> tuple:
    """(params, run options) of ``dilemmax experiment <design>`` with no options."""
    return parse_design_argv(design, [])


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in catalogue.entries() if n.startswith(CHEAP)])
def test_listed_calls_are_the_plans_at_the_paper_sizes(name):
    design = registry.designs()[name]
    assert catalogue.entries()[name].calls == runner.plan_of(design, *_defaults(design)).calls


def test_listed_calls_of_the_grid_games_are_their_plans(monkeypatch):
    """The open_grid plans with an env of the papers' sizes (no env is built: building the two
    grid games' envs costs more than the rest of this file)."""
    for game, c in (("open_cleanup", cleanup), ("open_harvest", harvest)):
        env = SimpleNamespace(
            name=game,
            num_agents=c.NUM_AGENTS,
            num_trials=c.NUM_TRIALS,
            trial_steps=c.TRIAL_STEPS,
            agents=[f"agent_{i}" for i in range(c.NUM_AGENTS)],
        )
        monkeypatch.setattr(open_grid, "design_env", lambda game, params, env=env: env)
        monkeypatch.setattr(open_grid, "seed_configs", lambda *args, **kwargs: None)
        for name, entry in catalogue.entries().items():
            if name.startswith(game):
                design = registry.designs()[name]
                assert entry.calls == runner.plan_of(design, *_defaults(design)).calls, name


def _modules_after(argv: list[str]) -> set[str]:
    """The modules a fresh ``dilemmax <argv>`` has imported when it is done."""
    code = (
        "import json, sys\n"
        "from dilemmax.cli import main\n"
        "main(sys.argv[1:])\n"
        "sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300
    )
    return set(json.loads(done.stderr.rsplit("MODULES ", 1)[1]))


@pytest.mark.slow
def test_list_imports_no_more_than_dilemmax_list_does():
    listed = _modules_after(["experiment", "--list"])
    plain = _modules_after(["list"])
    ours = {m for m in listed - plain if m.split(".")[0] == "dilemmax"}
    assert ours <= {"dilemmax.experiments.cli", "dilemmax.experiments.catalogue"}, ours
    heavy = ("matplotlib", "optax", "aiohttp", "openai", "torch", "transformers", "inspect_ai")
    assert not {m for m in listed - plain if m.split(".")[0] in heavy}
    assert not any(m.startswith("dilemmax.redteam.") for m in listed)
