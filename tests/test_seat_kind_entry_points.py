"""Seat kinds come from the ``dilemmax.seats`` entry points (dilemmax.envs.seat_spec): dilemmax's
own are declared there as a plug-in's are, a kind that does not load or declares something that
is no SeatKind is named in one line while every other kind works, and ``reload_seat_kinds``
reads the group again. In process, on hand-made distributions (a folder with a package and its
``.dist-info`` put on ``sys.path``, what pip leaves): no JAX program is compiled.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dilemmax.envs import seat_spec
from dilemmax.envs.seat_spec import SeatSpecError, parse_seat, seat_kind, seat_kind_problems
from dilemmax.llm.providers.api_seat import API_OPTIONS
from dilemmax.llm.seats import ModelSeatKind, model_kinds

KINDS = """
from dilemmax.envs.seat_spec import SeatKind

def _constant(spec, env, context):
    return lambda key, observation: 0

GOOD = SeatKind("constant", "<name>", _constant, options={"action": None})
MISNAMED = SeatKind("other", "<name>", _constant)
NOT_A_KIND = {"name": "dict"}
BAD_OPTION = SeatKind("badoption", "<name>", _constant, options={"Bad Name": None})
"""
ENTRY_POINTS = {
    "constant": "seatplug.kinds:GOOD",
    "raising": "seatplug.raises:SEAT",
    "dictkind": "seatplug.kinds:NOT_A_KIND",
    "misnamed": "seatplug.kinds:MISNAMED",
    "badoption": "seatplug.kinds:BAD_OPTION",
    "missing": "seatplug.kinds:NOWHERE",
}


def install(site: Path, dist: str, entry_points: dict[str, str]) -> None:
    info = site / f"{dist}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[dilemmax.seats]\n{lines}")


@pytest.fixture
def plugins(tmp_path):
    """The ``seatplug`` distribution installed on ``sys.path`` (removed again after)."""
    (tmp_path / "seatplug").mkdir()
    (tmp_path / "seatplug" / "__init__.py").write_text("")
    (tmp_path / "seatplug" / "kinds.py").write_text(KINDS)
    (tmp_path / "seatplug" / "raises.py").write_text('raise RuntimeError("broken on purpose")\n')
    install(tmp_path, "seatplug", ENTRY_POINTS)
    sys.path.insert(0, str(tmp_path))
    seat_spec.reload_seat_kinds()
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m == "seatplug" or m.startswith("seatplug.")]:
        del sys.modules[name]
    seat_spec.reload_seat_kinds()


def test_dilemmaxs_own_kinds_are_entry_points():
    declared = seat_spec._declared()
    assert {name: declared[name].value for name in ("scripted", "openai", "hf")} == {
        "scripted": "dilemmax.envs.seat_spec:SCRIPTED",
        "openai": "dilemmax.llm.providers.openai:SEAT",
        "hf": "dilemmax.llm.providers.hf:SEAT",
    }
    assert model_kinds() == ("hf", "inspect", "openai")
    openai = seat_kind("openai")
    assert isinstance(openai, ModelSeatKind) and not openai.jittable
    assert set(openai.options) == {*API_OPTIONS, "role", "reveal", "price"}
    assert seat_kind_problems() == {}


def test_a_plugins_kinds_parse_and_its_broken_ones_are_named_in_one_line(plugins):
    spec = parse_seat("constant:zero,action=1")
    assert (spec.kind, spec.target, dict(spec.options)) == ("constant", "zero", {"action": "1"})
    problems = seat_kind_problems()
    assert set(problems) == {"raising", "dictkind", "misnamed", "badoption", "missing"}
    assert all("\n" not in line for line in problems.values())
    assert problems["raising"] == (
        "seat kind 'raising' (seatplug.raises:SEAT) does not load: RuntimeError: broken on purpose"
    )
    assert problems["dictkind"].endswith("is not valid: a dict, not a SeatKind")
    assert problems["misnamed"].endswith("is not valid: it calls itself 'other'")
    assert "option 'Bad Name'" in problems["badoption"]
    assert "does not load: AttributeError" in problems["missing"]
    with pytest.raises(SeatSpecError, match=r"^seat 'raising:x': seat kind 'raising' .* broken"):
        parse_seat("raising:x")
    # Every other kind keeps working, dilemmax's own included.
    assert parse_seat("openai:m,temperature=0.5").options == {"temperature": 0.5}
    assert parse_seat("teacher").kind == "scripted"
    assert "constant" in seat_spec.seat_kinds() and "raising" in seat_spec.seat_kinds()


def test_reloading_forgets_a_plugin_that_is_gone(plugins):
    assert parse_seat("constant:zero").kind == "constant"
    sys.path.remove(str(plugins))
    seat_spec.reload_seat_kinds()
    with pytest.raises(SeatSpecError, match="unknown seat kind 'constant'"):
        parse_seat("constant:zero")
    assert seat_kind_problems() == {}
    sys.path.insert(0, str(plugins))  # for the fixture to remove


def test_a_kind_two_distributions_declare_differently_is_used_by_neither(plugins):
    install(plugins, "otherplug", {"constant": "otherplug.kinds:GOOD"})
    seat_spec.reload_seat_kinds()
    with pytest.raises(SeatSpecError, match="declared twice .*neither is used"):
        parse_seat("constant:zero")
    assert parse_seat("random").kind == "scripted"
