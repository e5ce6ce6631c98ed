"""Hostile-but-fair probes of the files a red-teaming or fine-tuning command is given (issue #30):
populations and references that are random bytes, text, truncated or hold other arrays; datasets
that are empty, malformed or lack fields; model and adapter folders that are neither; --out and
--json options that cannot be written. Each is one line on stderr (exit 2) naming the file and
what was wrong, before any work. Also the red-teaming example: certify says why it refuses and
how many episodes would do, and the README's example plays that many."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_errors import _fails_cleanly  # the one-line, exit-2 check of every CLI probe

from dilemmax.cli import main
from dilemmax.finetune.checks import RLOO_FIELDS, SFT_FIELDS, DatasetError, read_records
from dilemmax.llm.hf_client import ModelFolderError, check_adapter_folder, check_model_folder
from dilemmax.redteam import reference as R
from dilemmax.redteam import statistics as S
from dilemmax.redteam.files import FileFormatError
from dilemmax.redteam.inputs import context_index
from dilemmax.redteam.safety_case import clopper_pearson, episodes_needed, zero_event_bound

ROOT = Path(__file__).resolve().parents[2]
GRID = 228  # contexts of the W = 12 grid the --context values are located in
FILES = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


# ------------------------------------------------------------------------------ fixtures
def _population(episodes: int = 4, collapse: float = 0.0) -> S.Population:
    """Every rule at context (1, 5, 6):10 and (4, 4, 4):9, ``episodes`` each."""
    cells = [context_index((1, 5, 6), 10), context_index((4, 4, 4), 9)]
    rule = np.repeat(np.arange(5), 2 * episodes)
    context = np.tile(np.repeat(cells, episodes), 5)
    zeros = np.zeros(len(rule))
    metrics = {"fatality": zeros, "collapse": zeros + collapse, "exploitation": zeros}
    return S.Population("demo", metrics, rule, context, GRID)


def _save_reference(path: Path, rules=("AON",)) -> None:
    """A reference of ``rules`` on two contexts, UR_ref 0 everywhere."""
    fatality = np.zeros((1, len(rules), 2))
    table = R.ReferenceTable((0.1,), rules, np.full((2, 3), 4), np.array([9, 10]), 1,
                             {"fatality": fatality}, dict.fromkeys(rules, 0))  # fmt: skip
    R.save_reference(table, path)


def _argparse_refuses(capsys, argv, words: str) -> None:
    """argparse's own refusal: exit 2, its usage line and an error naming ``words``."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2 and words in capsys.readouterr().err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A good population and reference, and foreign files of every kind."""
    root = tmp_path_factory.mktemp("files")
    _population().save(root / "pop.npz")
    _save_reference(root / "ref.npz")
    with np.load(root / "pop.npz") as saved:  # uncompressed: the array headers lie open to damage
        np.savez(root / "plain.npz", **saved)
    good = (root / "pop.npz").read_bytes()
    (root / "random.npz").write_bytes(os.urandom(512))
    (root / "text.npz").write_text("rule_index,context_index\n0,1\n")
    (root / "truncated.npz").write_bytes(good[: len(good) // 2])
    (root / "empty.npz").write_bytes(b"")
    np.savez(root / "other.npz", weights=np.ones(3))
    np.save(root / "array.npy", np.arange(3))
    almost = {"context_index": [0, 1], "num_contexts": GRID, "rules": ["AON", "RE"], "name": "x"}
    for name, changed in (
        ("rule_out_of_range", {"rule_index": [0, 7], "m_fatality": [0.0, 0.0]}),
        ("nan_metric", {"rule_index": [0, 1], "m_fatality": [0.0, np.nan]}),
        ("short_metric", {"rule_index": [0, 1], "m_fatality": [0.0] * 5}),
    ):
        np.savez(
            root / f"{name}.npz", **{k: np.asarray(v) for k, v in {**almost, **changed}.items()}
        )
    (root / "folder").mkdir()
    return root


FOREIGN = {
    "random.npz": "not an .npz archive",
    "text.npz": "not an .npz archive",
    "truncated.npz": "not an .npz archive",
    "empty.npz": "not an .npz archive",
    "array.npy": "not an .npz archive",
    "other.npz": "no array",
    "rule_out_of_range.npz": "rule_index 7 is outside 0..1",
    "nan_metric.npz": "not finite",
    "short_metric.npz": "shape (5,)",
    "missing.npz": "no such file",
    "folder": "is a folder",
}


# ------------------------------------------------------------------ populations, references
@pytest.mark.parametrize(("name", "words"), sorted(FOREIGN.items()))
def test_certify_and_gap_name_a_foreign_population(capsys, files, tmp_path, name, words):
    bad = str(files / name)
    certify = ["redteam", "certify", "--population", bad, "--context", "1,5,6:10"]
    err = _fails_cleanly(capsys, [*certify, "--out", str(tmp_path / "case")])
    assert f"--population {bad}" in err and words in err
    gap = ["redteam", "gap", "--reference", str(files / "ref.npz"), "--population", bad]
    err = _fails_cleanly(capsys, [*gap, "--out", str(tmp_path / "gap")])
    assert f"--population {bad}" in err and words in err
    assert not (tmp_path / "gap").exists() and not (tmp_path / "case.md").exists()


@pytest.mark.parametrize("name", ["random.npz", "text.npz", "truncated.npz", "pop.npz", "folder"])
def test_gap_names_a_foreign_reference(capsys, files, tmp_path, name):
    argv = ["redteam", "gap", "--reference", str(files / name), "--population"]
    err = _fails_cleanly(capsys, [*argv, str(files / "pop.npz"), "--out", str(tmp_path / "g")])
    assert f"--reference {files / name}" in err


def test_gap_checks_the_inputs_against_each_other_before_any_statistics(capsys, files, tmp_path):
    argv = ["redteam", "gap", "--reference", str(files / "ref.npz"), "--population"]
    argv += [str(files / "pop.npz"), "--out", str(tmp_path / "g")]
    assert "reference has no rule(s)" in _fails_cleanly(capsys, argv)  # the file knows only AON
    assert "epsilons [0.1]" in _fails_cleanly(capsys, [*argv, "--epsilon", "0.3"])
    _argparse_refuses(capsys, [*argv, "--resamples", "0"], "--resamples")


def test_gap_refuses_per_rank_metrics_and_other_rules_and_keeps_one_name_apart(capsys, tmp_path):
    cells = {"rules": ("AON",), "rule_index": [0, 0], "context_index": [0, 1], "num_contexts": 2}
    flat = S.Population("same", {"fatality": np.zeros(2)}, **cells)
    flat.save(tmp_path / "a.npz")
    flat.save(tmp_path / "b.npz")
    S.Population("ranked", {"fatality": np.zeros((2, 3))}, **cells).save(tmp_path / "r.npz")
    _save_reference(tmp_path / "ref.npz", ("AON", "RP"))  # more rules than the populations
    argv = ["redteam", "gap", "--reference", str(tmp_path / "ref.npz"), "--resamples", "20"]
    ranked = [*argv, "--population", str(tmp_path / "r.npz"), "--out", str(tmp_path / "g")]
    assert "m_fatality has shape (2, 3)" in _fails_cleanly(capsys, ranked)
    both = [str(tmp_path / "a.npz"), str(tmp_path / "b.npz")]
    assert main([*argv, "--population", *both, "--out", str(tmp_path / "g")]) == 0
    report = json.loads((tmp_path / "g" / "report.json").read_text())
    assert sorted(report["populations"]) == [f"same ({both[0]})", f"same ({both[1]})"]
    S.Population("rp", {"fatality": np.zeros(2)}, [0, 0], [0, 1], 2, ("RP",)).save(
        tmp_path / "rp.npz"
    )
    mixed = [*argv, "--population", both[0], str(tmp_path / "rp.npz"), "--out", str(tmp_path / "m")]
    assert "compared over the same rules" in _fails_cleanly(capsys, mixed)


def test_a_model_run_folder_is_read_through_its_population_file(files, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "population.npz").write_bytes((files / "pop.npz").read_bytes())
    assert S.Population.load(tmp_path / "run").name == "demo"


@FILES
@given(st.binary(max_size=2048))
def test_any_bytes_load_or_fail_by_name(tmp_path, data):
    file = tmp_path / "any.npz"
    file.write_bytes(data)
    for load in (S.Population.load, R.load_reference):
        with pytest.raises(FileFormatError, match=re.escape(str(file))):
            load(file)


@FILES
@given(cut=st.integers(0, 10_000), flip=st.integers(0, 10_000), byte=st.integers(0, 255))
def test_truncated_or_damaged_saves_load_or_fail_by_name(files, tmp_path, cut, flip, byte):
    """A good file cut short or with one byte changed: loaded (the damage missed what is read)
    or a FileFormatError, never another exception."""
    loads = [("pop.npz", S.Population.load), ("plain.npz", S.Population.load)]
    for name, load in [*loads, ("ref.npz", R.load_reference)]:
        data = bytearray((files / name).read_bytes())
        data[flip % len(data)] = byte
        damaged = tmp_path / "damaged.npz"
        damaged.write_bytes(bytes(data[: max(cut, len(data) // 2)]))
        try:
            load(damaged)
        except FileFormatError as err:
            assert str(damaged) in str(err)


ARRAY_NAMES = ["rule_index", "context_index", "num_contexts", "rules", "name", "m_fatality"]
ARRAYS = st.one_of(
    st.integers(-3, 300).map(np.int64),
    st.lists(st.integers(-3, 300), max_size=6).map(lambda v: np.asarray(v, np.int64)),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=6).map(np.asarray),
    st.lists(st.sampled_from(["AON", "RE", "RP", "", "x"]), max_size=6).map(np.asarray),
    st.text(max_size=5).map(np.asarray),
    st.just(np.zeros((2, 2, 2))),
)


@FILES
@given(st.dictionaries(st.sampled_from(ARRAY_NAMES), ARRAYS, max_size=len(ARRAY_NAMES)))
def test_any_arrays_load_as_a_valid_population_or_fail_by_name(tmp_path, arrays):
    file = tmp_path / "arrays.npz"
    np.savez(file, **arrays)
    try:
        pop = S.Population.load(file)
    except FileFormatError as err:
        assert str(file) in str(err) and "\n" not in str(err)
        return
    assert pop.rule_index.max(initial=0) < len(pop.rules)  # loaded only when it is a population
    assert pop.context_index.max(initial=0) < pop.num_contexts


# -------------------------------------------------------------------------- certification
def test_certify_says_why_nothing_is_certified_and_how_many_episodes_would_do(capsys, tmp_path):
    _population(episodes=4).save(tmp_path / "few.npz")
    argv = ["redteam", "certify", "--context", "1,5,6:10", "--context", "4,4,4:9"]
    assert (
        main([*argv, "--population", str(tmp_path / "few.npz"), "--out", str(tmp_path / "a")]) == 0
    )
    out = capsys.readouterr().out
    needed = episodes_needed(0.05, 0.95)
    assert "certified: none" in out and f"{zero_event_bound(4):.3f}" in out
    assert f"{needed} episodes with no event are needed" in out
    case = json.loads((tmp_path / "a.json").read_text())
    assert f"{needed} with no event are needed" in case["certification"]["refused"]["RP"][0]
    _population(episodes=needed).save(tmp_path / "enough.npz")
    assert (
        main([*argv, "--population", str(tmp_path / "enough.npz"), "--out", str(tmp_path / "b")])
        == 0
    )
    assert "certified: ['AON', 'RE', 'DV', 'RP', 'PP']" in capsys.readouterr().out


@settings(max_examples=50, deadline=None)
@given(st.floats(0.005, 1.0), st.floats(0.5, 0.995))
def test_episodes_needed_is_the_first_count_the_exact_bound_certifies(budget, level):
    n = episodes_needed(budget, level)
    assert clopper_pearson(0, n, level)[1] < budget
    assert n == 1 or clopper_pearson(0, n - 1, level)[1] >= budget


def test_the_documented_example_plays_enough_episodes_to_certify():
    text = (ROOT / "docs" / "redteam.md").read_text()
    block = text[text.index("dilemmax redteam play --policy fair_share") :].split("\n")[0]
    assert f"--episodes {episodes_needed(0.05, 0.95)} " in block


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--budget-collapse", "0"], "--budget-collapse"),
        (["--budget-exploitation", "nan"], "--budget-exploitation"),
        (["--level", "1"], "--level"),
    ],
)
def test_certify_refuses_budgets_and_levels_no_evidence_can_meet(
    capsys, files, tmp_path, extra, words
):
    argv = ["redteam", "certify", "--population", str(files / "pop.npz"), "--context", "1,5,6:10"]
    _argparse_refuses(capsys, [*argv, "--out", str(tmp_path / "c"), *extra], words)


def test_certify_refuses_events_that_are_not_events(capsys, tmp_path):
    _population(collapse=0.5).save(tmp_path / "rates.npz")
    argv = ["redteam", "certify", "--population", str(tmp_path / "rates.npz")]
    err = _fails_cleanly(capsys, [*argv, "--context", "1,5,6:10", "--out", str(tmp_path / "c")])
    assert "m_collapse must be 0 or 1" in err


def test_redteam_counts_and_rounds_outside_their_ranges_are_refused_first(capsys, tmp_path):
    out = str(tmp_path / "r.npz")
    assert "--rounds 0" in _fails_cleanly(
        capsys, ["redteam", "reference", "--rounds", "0", "--out", out]
    )
    for argv in (
        ["redteam", "play", "--policy", "fair_share", "--episodes", "0", "--out", out],
        ["redteam", "reference", "--epsilons", "2", "--out", out],
        ["redteam", "ablate", "--policy", "fair_share", "--seed", "-1", "--out", out],
    ):
        _argparse_refuses(capsys, argv, argv[-3])
    assert not Path(out).exists()


# --------------------------------------------------------------------------- output options
@pytest.mark.slow
def test_output_options_are_checked_before_any_work(capsys, files, tmp_path):
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    pop, ref = str(files / "pop.npz"), str(files / "ref.npz")
    # A population the reference file covers (AON on its two contexts), so gap reaches --out.
    aon = tmp_path / "aon.npz"
    S.Population("aon", {"fatality": np.zeros(2)}, [0, 0], [0, 1], 2, ("AON",)).save(aon)
    model = str(_looks_like_a_model(tmp_path / "m"))
    probes = [
        ["redteam", "reference", "--out", "/proc/x/ref.npz"],
        ["redteam", "play", "--policy", "fair_share", "--out", "/proc/x/pop.npz"],
        ["redteam", "ablate", "--policy", "fair_share", "--out", str(a_file)],
        ["redteam", "certify", "--population", pop, "--context", "4,4,4:9", "--out", "/proc/x/c"],
        ["redteam", "gap", "--reference", ref, "--population", str(aon), "--out", str(a_file)],
        ["finetune", "sft", "--model", "m", "--data", "d", "--out", str(a_file)],
        ["finetune", "evaluate", "--model", model, "--out", "/proc/x"],
        ["finetune", "data", str(a_file)],
    ]
    for argv in probes:
        err = _fails_cleanly(capsys, argv)
        assert "cannot be written" in err or "is a file" in err, (argv, err)


# ------------------------------------------------------------------------------- datasets
RECORD = {
    "prompt": [{"role": "user", "content": "go"}],
    "completion": [{"role": "assistant", "content": "ACTION QUERY"}],
    "target": 1,
    "context": "{}",
    "legal": [0, 1],
    "num_agents": 2,
    "protocol": "{}",
}


@pytest.fixture()
def datasets(tmp_path):
    (tmp_path / "empty_folder").mkdir()
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "malformed.jsonl").write_text(json.dumps(RECORD) + "\n{not json\n")
    no_prompt = {k: v for k, v in RECORD.items() if k != "prompt"}
    (tmp_path / "no_prompt.jsonl").write_text(json.dumps(no_prompt) + "\n")
    (tmp_path / "a_list.jsonl").write_text("[1, 2]\n")
    (tmp_path / "bytes.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    return tmp_path


DATASET_PROBES = {
    "empty_folder": "no train.jsonl",
    "empty.jsonl": "holds no train records",
    "malformed.jsonl": "line 2 is not JSON",
    "no_prompt.jsonl": "line 1: the record has no 'prompt'",
    "a_list.jsonl": "line 1: a record must be a JSON object",
    "bytes.jsonl": "cannot be read as UTF-8",
    "missing": "no such file or folder",
}


def test_every_data_option_names_a_bad_dataset_before_loading_a_model(capsys, datasets):
    """sft, rloo, sft-rloo, reward and tiny-model, each on every kind of bad dataset; the model
    named does not exist, so reaching it would be a different error."""
    model = "org/no-such-model"  # a hub id: it passes the folder check, and is never loaded
    for name, words in DATASET_PROBES.items():
        data = str(datasets / name)
        for command in ("sft", "rloo", "sft-rloo"):
            argv = ["finetune", command, "--model", model, "--data", data]
            err = _fails_cleanly(capsys, [*argv, "--out", str(datasets / "out")])
            assert f"--data {data}" in err or f"--data {datasets / name}" in err, err
        reward = ["finetune", "reward", "--model", model, "--data", data, "--split", "train"]
        assert "--data" in _fails_cleanly(capsys, reward)
        tiny = ["finetune", "tiny-model", str(datasets / "tiny"), "--data", data]
        assert words.split(":")[0] in _fails_cleanly(capsys, tiny)
    assert not (datasets / "out").exists() and not (datasets / "tiny").exists()


def test_a_condition_grid_the_game_refuses_is_named_before_any_episode(capsys, tmp_path):
    out = tmp_path / "data"
    err = _fails_cleanly(capsys, ["finetune", "data", str(out), "--costs", "nan"])
    assert "cost must lie in [0, 1]" in err and not out.exists()
    (tmp_path / "spec").mkdir()
    _looks_like_a_model(tmp_path / "model")
    for spec, words in (
        ("{oops", "spec.json is not readable JSON"),
        ('{"costs": [7]}', "cost must lie in [0, 1]"),
        ('{"fractions": [1, 1, 1]}', "fractions must sum to 1"),
        ('{"protocol_options": 5}', "protocol_options must be a JSON object"),
    ):
        (tmp_path / "spec" / "spec.json").write_text(spec)
        model = str(tmp_path / "model")
        argv = ["finetune", "evaluate", "--model", model, "--conditions", str(tmp_path / "spec")]
        assert words in _fails_cleanly(capsys, [*argv, "--out", str(tmp_path / "report")])
    assert not (tmp_path / "report").exists()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
RECORDS = st.dictionaries(
    st.sampled_from([*RLOO_FIELDS, "completion", "split", "other"]), JSON_VALUES, max_size=8
)


@FILES
@given(st.lists(RECORDS | JSON_VALUES, max_size=5), st.binary(max_size=40))
def test_any_jsonl_reads_as_checked_records_or_fails_by_line(tmp_path, values, tail):
    file = tmp_path / "any.jsonl"
    file.write_bytes(b"".join(json.dumps(v).encode() + b"\n" for v in values) + tail)
    for need in (SFT_FIELDS, RLOO_FIELDS):
        try:
            records = read_records(file, "train", need)
        except DatasetError as err:
            assert str(file) in str(err) and "\n" not in str(err)
            continue
        assert records and all(set(need) <= set(r) for r in records)


# ---------------------------------------------------------------------------- model folders
def _model_folder(root: Path, **files: str) -> Path:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name.replace("_dot_", ".")).write_text(text)
    return root


def _looks_like_a_model(root: Path) -> Path:
    """A folder with the file names of a model (so it passes the checks) and nothing in them."""
    return _model_folder(
        root,
        config_dot_json='{"model_type": "llama"}',
        model_dot_safetensors="not weights",
        tokenizer_dot_json="{",
    )


MODEL_FOLDERS = {
    "empty": ({}, "no model at"),
    "garbage_config": ({"config_dot_json": "\x00not json"}, "config.json is not readable JSON"),
    "list_config": ({"config_dot_json": "[1]"}, "config.json is not a JSON object"),
    "no_type": ({"config_dot_json": "{}"}, "names no model_type"),
    "no_weights": ({"config_dot_json": '{"model_type": "llama"}'}, "has no weights"),
    "no_tokenizer": (
        {"config_dot_json": '{"model_type": "llama"}', "model_dot_safetensors": "x"},
        "has no tokenizer",
    ),
}
ADAPTER_FOLDERS = {
    "empty": ({}, "no PEFT adapter at"),
    "garbage_config": ({"adapter_config_dot_json": "{"}, "adapter_config.json is not readable"),
    "no_type": ({"adapter_config_dot_json": '{"r": 8}'}, "names no peft_type"),
    "no_weights": ({"adapter_config_dot_json": '{"peft_type": "LORA"}'}, "no adapter weights"),
}


def test_model_and_adapter_folders_are_checked_file_by_file(tmp_path):
    for name, (contents, words) in MODEL_FOLDERS.items():
        folder = _model_folder(tmp_path / "models" / name, **contents)
        with pytest.raises(ModelFolderError, match=re.escape(words)) as err:
            check_model_folder(folder)
        assert str(folder) in str(err.value)
    for name, (contents, words) in ADAPTER_FOLDERS.items():
        folder = _model_folder(tmp_path / "adapters" / name, **contents)
        with pytest.raises(ModelFolderError, match=re.escape(words)) as err:
            check_adapter_folder(folder)
        assert str(folder) in str(err.value)


@FILES
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_any_config_bytes_pass_or_fail_by_name(tmp_path, config, adapter_config):
    folder = tmp_path / "m"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_bytes(config)
    (folder / "adapter_config.json").write_bytes(adapter_config)
    for check in (check_model_folder, check_adapter_folder):
        with pytest.raises(ModelFolderError, match=re.escape(str(folder))):
            check(folder)  # no weights in it: whatever the configs hold, it is refused by name


def test_hf_seats_and_model_options_name_a_folder_that_is_not_a_model(capsys, tmp_path):
    not_model = _model_folder(tmp_path / "not-model", config_dot_json='{"model_type": "llama"}')
    not_adapter = _model_folder(tmp_path / "not-adapter", adapter_config_dot_json="{}")
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps(RECORD) + "\n")
    model, adapter = str(not_model), str(not_adapter)
    probes = [
        (["redteam", "play", "--policy", f"hf:{model}", "--out", str(tmp_path / "a")], "weights"),
        (["finetune", "sft", "--model", model, "--data", str(data)], "weights"),
        (["finetune", "evaluate", "--model", model], "weights"),
        (["finetune", "evaluate", "--model", str(_looks_like_a_model(tmp_path / "m")),
          "--adapter", f"sft={adapter}"], "peft_type"),
        (["finetune", "evaluate", "--model", "org/m"], "no model at org/m"),
        (["finetune", "rloo", "--model", "org/m", "--adapter", adapter, "--data", str(data)],
         "peft_type"),
        (["finetune", "gepa", "--model", model], "weights"),
    ]  # fmt: skip
    for argv, words in probes:
        if argv[0] == "finetune":
            argv = [*argv, "--out", str(tmp_path / "out")]
        err = _fails_cleanly(capsys, argv)
        assert words in err and ("not-model" in err or "not-adapter" in err or "org/m" in err), err
    assert not (tmp_path / "out").exists() and not (tmp_path / "a").exists()


def test_a_folder_with_the_right_names_but_damaged_files_fails_by_name_not_traceback(tmp_path):
    pytest.importorskip("transformers")
    from dilemmax.llm.hf_client import TransformersClient

    fake = _looks_like_a_model(tmp_path / "fake")
    with pytest.raises(ModelFolderError, match="is not a torch device"):
        TransformersClient(fake, device="tpu")  # refused before loading anything
    with pytest.raises(ModelFolderError, match=f"{re.escape(str(fake))} cannot be loaded"):
        TransformersClient(fake)


def test_reward_checks_its_baseline_before_loading_a_model(capsys, tmp_path):
    data = tmp_path / "heldout.jsonl"
    data.write_text(json.dumps(RECORD) + "\n")
    argv = ["finetune", "reward", "--model", "org/none", "--data", str(data), "--split", "heldout"]
    for baseline, words in (
        ({"split": "heldout", "records": 3, "per_prompt": [0, 0, 0]}, "scored 3 heldout records"),
        ({"split": "heldout", "records": 1, "per_prompt": ["x"]}, "'per_prompt' must list 1"),
    ):
        (tmp_path / "b.json").write_text(json.dumps(baseline))
        assert words in _fails_cleanly(capsys, [*argv, "--baseline", str(tmp_path / "b.json")])


def test_lora_module_names_the_model_lacks_are_named_before_training():
    torch = pytest.importorskip("torch")
    from dilemmax.errors import UsageError
    from dilemmax.finetune.common import LoraSettings, check_lora_modules

    model = torch.nn.ModuleDict(
        {"q_proj": torch.nn.Linear(2, 2), "input_layernorm": torch.nn.LayerNorm(2)}
    )
    check_lora_modules(model, LoraSettings(target_modules=("q_proj",), modules_to_save=("norm",)))
    for lora, words in (
        (
            LoraSettings(target_modules=("q_proj", "k_proj")),
            "--lora-targets: the model has no module k_proj",
        ),
        (LoraSettings(target_modules=("proj",)), "no module proj"),  # a target is a whole name
        (LoraSettings(modules_to_save=("head",)), "--lora-save: the model has no module head"),
    ):
        with pytest.raises(UsageError, match=re.escape(words)):
            check_lora_modules(model, lora)


# ------------------------------------------------------------------------ as a user sees it
@pytest.mark.slow
def test_foreign_files_end_in_one_line_without_a_traceback_from_the_shell(files, tmp_path, capsys):
    """One real ``python -m dilemmax.cli`` process (its exit status and stderr as a shell sees
    them); the fine-tuning probe runs through the same main() in-process, where the one-line,
    exit-2 check is the same and no second interpreter imports torch."""
    population = str(files / "random.npz")
    certify = ["redteam", "certify", "--population", population, "--context", "1,5,6:10",
               "--out", str(tmp_path / "case")]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "dilemmax.cli", *certify], capture_output=True, text=True
    )
    err = done.stderr.strip()
    assert done.returncode == 2 and "Traceback" not in err and err.count("\n") == 0, err
    assert population in err, err
    (tmp_path / "bad.jsonl").write_text("{oops\n")
    sft = ["finetune", "sft", "--model", "org/m", "--data", str(tmp_path / "bad.jsonl"),
           "--out", str(tmp_path / "run")]  # fmt: skip
    assert str(tmp_path / "bad.jsonl") in _fails_cleanly(capsys, sft)


def test_a_zip_that_unpacks_to_too_much_is_refused_unread(tmp_path, monkeypatch):
    from dilemmax.redteam import files as F

    monkeypatch.setattr(F, "MAX_UNPACKED_BYTES", 100)
    with zipfile.ZipFile(tmp_path / "big.npz", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("rules.npy", b"\x00" * 1000)
    with pytest.raises(FileFormatError, match="unpacks to 1000 bytes"):
        S.Population.load(tmp_path / "big.npz")
