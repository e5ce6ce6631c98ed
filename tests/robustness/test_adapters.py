"""Issue #35: every adapter a command seats is checked before any play (its config field by
field, its weights' safetensors header against the file's size and the config's rank), so a
copy cut short or an invalid config is one line naming the folder, not a ``SafetensorError``
traceback, and never after a base model has already played."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil

import pytest
from test_cli_errors import _fails_cleanly

from dilemmax.llm import hf_client
from dilemmax.llm.hf_client import ModelFolderError, check_adapter_folder
from dilemmax.llm.tiny import build_tiny_model

# transformers and peft (the optional llm extra) are imported by the fixture and the commands
# when a test runs, not when the suite is collected (tests/test_collection_imports.py).
pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in ("transformers", "peft")),
    reason="needs the llm extra (transformers, peft)",
)

WEIGHTS = "adapter_model.safetensors"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The tiny model, a LoRA adapter of it (r=2), and damaged copies of the adapter."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("adapters")
    tiny = build_tiny_model(root / "tiny")
    base = AutoModelForCausalLM.from_pretrained(tiny)
    config = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(root / "good")
    out = {"tiny": tiny, "good": root / "good"}
    for name, change in DAMAGE.items():
        shutil.copytree(root / "good", root / name)
        change(root / name)
        out[name] = root / name
    return out


def _cut(folder, keep=-100):
    data = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(data[:keep])


def _config(folder, **fields):
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, **fields}))


DAMAGE = {
    "cut": _cut,
    "cut_in_header": lambda f: _cut(f, 20),
    "no_header": lambda f: _cut(f, 5),
    "appended": lambda f: (f / WEIGHTS).write_bytes((f / WEIGHTS).read_bytes() + b"\0" * 8),
    "r_text": lambda f: _config(f, r="eight"),
    "r_zero": lambda f: _config(f, r=0),
    "r_other": lambda f: _config(f, r=4),
    "dropout": lambda f: _config(f, lora_dropout=1.5),
    "targets": lambda f: _config(f, target_modules=5),
    "bias": lambda f: _config(f, bias="some"),
}
WORDS = {
    "cut": "adapter_model.safetensors is cut short: its header declares",
    "cut_in_header": "is not a whole safetensors file",
    "no_header": "is not a whole safetensors file",
    "appended": "has bytes past its tensors",
    "r_text": 'adapter_config.json: r is "eight", not an integer >= 1',
    "r_zero": "adapter_config.json: r is 0",
    "r_other": "has rank 2, but adapter_config.json says r=4",
    "dropout": "lora_dropout is 1.5",
    "targets": "target_modules is 5",
    "bias": 'bias is "some"',
}


def test_a_whole_adapter_passes_and_every_damage_is_named(folders):
    assert check_adapter_folder(folders["good"]) == folders["good"]
    for name, words in WORDS.items():
        with pytest.raises(ModelFolderError, match=re.escape(words)) as err:
            check_adapter_folder(folders[name])
        assert str(folders[name]) in str(err.value) and "\n" not in str(err.value)


def test_every_cut_of_the_weights_is_refused(folders, tmp_path):
    data = (folders["good"] / WEIGHTS).read_bytes()
    shutil.copytree(folders["good"], tmp_path / "a")
    for keep in range(0, len(data), max(1, len(data) // 40)):
        (tmp_path / "a" / WEIGHTS).write_bytes(data[:keep])
        with pytest.raises(ModelFolderError, match="safetensors"):
            check_adapter_folder(tmp_path / "a")


@pytest.fixture
def nothing_loads(monkeypatch):
    """Fails a probe that gets as far as loading a model or playing a method."""

    def loaded(*args, **kwargs):
        raise AssertionError("a model was loaded before every adapter was checked")

    monkeypatch.setattr("dilemmax.llm.providers.hf.TransformersClient", loaded)
    monkeypatch.setattr("dilemmax.finetune.api.evaluate_methods", loaded)
    monkeypatch.setattr(hf_client.TransformersClient, "__init__", loaded)


@pytest.mark.parametrize("damage", ["cut", "r_text", "r_other"])
def test_play_and_finetune_evaluate_refuse_before_any_model_loads(
    folders, tmp_path, capsys, nothing_loads, damage
):
    tiny, bad = folders["tiny"], folders[damage]
    play = ["play", "moral_hazard", "--seat", f"agent_0=hf:{tiny}",
            "--seat", f"agent_1=hf:{tiny},adapter={bad}", "--episodes", "1", "--envs", "1",
            "--out", str(tmp_path / "run"), "--no-progress"]  # fmt: skip
    evaluate = ["finetune", "evaluate", "--model", str(tiny), "--adapter", f"ok={folders['good']}",
                "--adapter", f"sft={bad}", "--out", str(tmp_path / "eval")]  # fmt: skip
    for argv in (play, evaluate):
        err = _fails_cleanly(capsys, argv)
        assert WORDS[damage] in err and str(bad) in err, err
        assert "SafetensorError" not in err
    assert not (tmp_path / "run").exists() and not (tmp_path / "eval").exists()
