"""``dilemmax finetune``: every default is the paper's and every one is overridable."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dilemmax.cli import build_parser
from dilemmax.finetune.cli import _rloo_fields, _run_settings
from dilemmax.finetune.generation import EVALUATE_GENERATE, GEPA_GENERATE, RLOO_GENERATE
from dilemmax.finetune.gepa import GEPASettings
from dilemmax.finetune.rloo import RLOOSettings
from dilemmax.finetune.scoring_cli import adapter_methods
from dilemmax.finetune.sft import SFTSettings
from dilemmax.llm.cli import generate_config

BASE = ["--model", "m", "--data", "d", "--out", "o"]


def parse(*argv):
    return build_parser().parse_args(["finetune", *argv])


def test_sft_defaults_are_the_papers():
    args = parse("sft", *BASE)
    s = _run_settings(args, SFTSettings, max_length=args.max_length)
    assert (s.max_steps, s.learning_rate, s.batch_size, s.grad_accum, s.warmup_steps) == (
        2000,
        2e-4,
        2,
        8,
        20,
    )
    assert (s.lora.r, s.lora.alpha, s.lora.dropout) == (16, 32, 0.05)
    assert s.max_length == 16384 and s.resume and not s.wandb and s.precision == "auto"


def test_rloo_defaults_are_the_papers():
    args = parse("rloo", *BASE)
    s = _run_settings(args, RLOOSettings, **_rloo_fields(args))
    assert (s.num_generations, s.temperature, s.top_p, s.beta, s.max_completion_length) == (
        5,
        1.0,
        1.0,
        0.03,
        128,
    )
    assert (s.learning_rate, s.batch_size, s.grad_accum, s.max_steps) == (1e-6, 5, 1, 2000)


def test_overrides_reach_the_settings():
    args = parse(
        "sft", *BASE, "--steps", "7", "--lr", "0.01", "--lora-r", "4", "--lora-save",
        "lm_head,norm", "--lora-targets", "q_proj,v_proj", "--set", "lr_scheduler_type=constant",
        "--no-resume", "--wandb", "--precision", "fp32",
    )  # fmt: skip
    s = _run_settings(args, SFTSettings, max_length=args.max_length)
    assert (s.max_steps, s.learning_rate, s.lora.r) == (7, 0.01, 4)
    assert s.lora.modules_to_save == ("lm_head", "norm")
    assert s.lora.target_modules == ("q_proj", "v_proj")
    assert s.overrides == {"lr_scheduler_type": "constant"}
    assert not s.resume and s.wandb and s.precision == "fp32"


def test_sft_rloo_and_data_parse():
    args = parse("sft-rloo", *BASE)
    assert (args.sft_steps, args.rloo_steps, args.rloo_lr, args.rloo_batch) == (1000, 1000, 1e-6, 5)
    args = parse("data", "out", "--costs", "0,0.1", "--num-agents", "2")
    assert args.costs == (0.0, 0.1) and args.num_agents == (2,) and args.episodes == 21


def test_adapter_specs():
    assert adapter_methods(["sft=a/b", "rloo=c"]) == {"base": None, "sft": "a/b", "rloo": "c"}
    with pytest.raises(SystemExit, match="name=folder"):
        adapter_methods(["no-equals"])


def test_protocol_options_lay_over_the_papers_or_the_datasets(tmp_path):
    import json
    from dataclasses import asdict

    from dilemmax.commandline import parse_assignments
    from dilemmax.finetune.command_checks import protocol_options as _protocol_options
    from dilemmax.finetune.datasets import DatasetSpec

    args = parse("data", "out", "--protocol", "brief=true")
    assert _protocol_options(parse_assignments(args.protocol)) == {
        "utility_accounting": True,
        "rationale": "steps",
        "brief": True,
    }
    spec = asdict(DatasetSpec(protocol_options={"brief": True, "rationale": "steps"}))
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    args = parse("evaluate", "--model", "m", "--out", "o", "--protocol", "memory_rounds=2")
    assert _protocol_options(parse_assignments(args.protocol), str(tmp_path)) == {
        "brief": True,
        "rationale": "steps",
        "memory_rounds": 2,
    }
    args = parse("evaluate", "--model", "m", "--out", "o")
    assert _protocol_options(parse_assignments(args.protocol))["utility_accounting"]


def test_reward_names_a_missing_dataset_or_a_bad_baseline_before_loading_a_model(tmp_path, capsys):
    from dilemmax.cli import main

    argv = ["finetune", "reward", "--model", str(tmp_path / "no-model")]
    assert main(argv + ["--data", str(tmp_path / "no-data")]) == 2
    assert "--data" in capsys.readouterr().err
    (tmp_path / "b.json").write_text("[1]")
    assert main(argv + ["--data", "x", "--baseline", str(tmp_path / "b.json")]) == 2
    assert "expected a JSON object" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, named",
    [
        (["reward", "--model", "m", "--data", "d"], RLOO_GENERATE),
        (["evaluate", "--out", "o"], EVALUATE_GENERATE),
        (["gepa", "--model", "m", "--out", "o"], GEPA_GENERATE),
    ],
)
def test_the_scoring_commands_sample_as_their_named_config(argv, named):
    """Each command's model flags are made from its named GenerateConfig: their defaults are
    its values, and a flag given goes over it (the rest stays the named config's)."""
    assert generate_config(parse(*argv), named) == named
    given = generate_config(parse(*argv, "--temperature", "0.5", "--max-tokens", "7"), named)
    assert given == replace(named, temperature=0.5, max_tokens=7)


def test_the_named_configs_are_the_papers():
    assert (RLOO_GENERATE.max_tokens, RLOO_GENERATE.temperature, RLOO_GENERATE.top_p) == (
        128,
        1.0,
        1.0,
    )
    assert (EVALUATE_GENERATE.max_tokens, EVALUATE_GENERATE.temperature) == (128, 0.0)
    assert (GEPA_GENERATE.max_tokens, GEPA_GENERATE.temperature) == (512, 1.0)
    assert GEPASettings(model="m", out="o").generate == GEPA_GENERATE


def test_a_sampling_flag_out_of_range_is_one_line_naming_it(capsys):
    from dilemmax.cli import main

    assert main(["finetune", "reward", "--model", "m", "--data", "d", "--temperature", "9"]) == 2
    err = capsys.readouterr().err
    assert "--temperature=9.0: expected a number in 0..2" in err and err.count("\n") == 1
