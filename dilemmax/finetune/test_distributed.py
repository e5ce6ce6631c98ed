"""``dilemmax finetune`` under ``accelerate launch``: two CPU processes (DDP over gloo) train the
tiny model to the adapter one process gets from the same global batch; only the main process
writes and prints; a run resumes under two processes; ``sft-rloo`` chains across the processes;
a process that fails makes the launch end instead of leaving the other waiting.

One launch (this file run as the launched script, see :func:`drive`) plays every phase in turn,
so the processes start and import torch once. That launch is most of this file's time: each
training process imports torch, transformers, TRL and dilemmax (about 10 s of CPU apiece, the
launcher about 2 s more) before its first step, and the four phases after that take a few
seconds. So every test that reads it is marked slow; the fast tier keeps the checks that need
no launch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dilemmax.cli import main
from dilemmax.errors import UsageError
from dilemmax.finetune import processes
from dilemmax.finetune.common import LoraSettings, check_world
from dilemmax.finetune.sft import SFTSettings, train_sft

# trl, accelerate, transformers and torch (the optional llm extra) are imported when a test or
# the launched script runs, not when the suite is collected (tests/test_collection_imports.py).
pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in ("trl", "accelerate")),
    reason="needs the llm extra (trl, accelerate)",
)

REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLES = REPOSITORY / "examples" / "accelerate"
# The example CPU config (distributed_type MULTI_GPU: accelerate's "one process per device
# through torchrun"; on a machine without GPUs `--num_processes 2` alone starts one process).
LAUNCH = ("--config_file", str(EXAMPLES / "cpu_two_processes.yaml"), "--num_processes", "2")
# Two SFT steps of 2 records per process = the one-process batch of 4; dropout off, since each
# process draws its own masks (the one-process run draws one mask over all four records).
SFT_FLAGS = ("--accum", "1", "--warmup", "0", "--logging-steps", "1", "--max-records", "8")
SFT_FLAGS += ("--lora-dropout", "0", "--threads", "1")
# The tolerance of the two-process adapter. Both runs see the same records and the same token
# counts (the Trainer averages the loss over the tokens of all processes), so they differ only by
# float32 summation order (per-process partial sums and gloo's all-reduce): ~1e-7 relative in
# the gradients, measured at most 7.5e-9 in the weights. Adam's update is about lr = 2e-4 per
# step whatever the gradient's scale, so a real fault (each process training alone on its half, a
# missing gradient mean, another data split) moves weights by ~1e-4: 1e-6 lies between the two.
ADAPTER_ATOL = 1e-6


def step_file(path: Path):
    """A callback that writes to ``path`` how many optimiser steps this process took in this run
    (not the ones restored)."""
    from transformers import TrainerCallback

    class StepFile(TrainerCallback):
        def __init__(self):
            self.steps = 0

        def on_step_end(self, args, state, control, **kwargs):
            self.steps += 1
            path.write_text(str(self.steps))

    return StepFile()


def drive(root: Path, model: str, data: str) -> int:
    """The launched script: every phase in turn on each process, its exit code in
    ``<root>/<phase>.<rank>``; the last phase fails on process 1 only."""
    import dilemmax.finetune.rloo as rloo_module
    import dilemmax.finetune.sft as sft_module

    rank = processes.process_rank()
    phase = {"name": ""}
    for module in (sft_module, rloo_module):  # count each run's steps (the CLI shows none)
        original = module.run_trainer

        def counted(trainer, settings, tokenizer, original=original):
            name = f"{phase['name']}-{Path(settings.out).name}.{rank}.steps"
            trainer.add_callback(step_file(root / name))
            return original(trainer, settings, tokenizer)

        module.run_trainer = counted
    base = ["--model", model, *SFT_FLAGS]
    phases = {
        "sft2": ["sft", *base, "--data", data, "--out", f"{root}/sft", "--steps", "2",
                 "--save-steps", "2", "--batch", "2"],
        "sft3": ["sft", *base, "--data", data, "--out", f"{root}/sft", "--steps", "3",
                 "--save-steps", "3", "--batch", "2"],
        "chain": ["sft-rloo", *base, "--data", data, "--out", f"{root}/chain", "--sft-steps",
                  "1", "--rloo-steps", "1", "--batch", "2", "--rloo-batch", "2",
                  "--generations", "2", "--max-completion", "4", "--save-steps", "1"],
        "dies": ["sft", *base, "--data", data if rank == 0 else f"{root}/missing", "--out",
                 f"{root}/dies", "--steps", "50", "--batch", "2"],
    }  # fmt: skip
    for name, argv in phases.items():
        phase["name"] = name
        code = main(["finetune", *argv])
        (root / f"{name}.{rank}").write_text(str(code))
        if code:
            return code
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def launched(tiny_model_dir, small_data_dir, tmp_path_factory):
    """(root folder, finished process, wall seconds) of the one two-process launch."""
    root = tmp_path_factory.mktemp("launched")
    env = {k: v for k, v in os.environ.items() if k not in processes.LAUNCH_VARIABLES}
    # No user accelerate config (it lives under HF_HOME) and one thread per process.
    env.update(HF_HOME=str(root / "hf"), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    command = [sys.executable, "-m", "accelerate.commands.launch", *LAUNCH]
    # As a module from the repository root: run as a file, its folder would come first on the
    # path and this package's datasets.py would hide the `datasets` library.
    command += ["--main_process_port", str(free_port()), "-m", "dilemmax.finetune.test_distributed"]
    command += [str(root), str(tiny_model_dir), str(small_data_dir)]
    start = time.monotonic()
    return root, run_group(command, env, timeout=300), time.monotonic() - start


def run_group(command: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``command`` in a session of its own; past ``timeout`` (a hang) the launcher and every
    process it started are killed, and the test fails on the timeout."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        cwd=REPOSITORY, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def phase_codes(root: Path, name: str) -> list[str | None]:
    return [
        (root / f"{name}.{r}").read_text() if (root / f"{name}.{r}").exists() else None
        for r in (0, 1)
    ]


@pytest.mark.slow
def test_two_processes_train_the_adapter_of_one_with_the_same_global_batch(
    launched, tiny_model_dir, small_data_dir, tmp_path
):
    import torch
    from safetensors.torch import load_file

    root, done, _ = launched
    assert phase_codes(root, "sft2") == ["0", "0"], done.stderr[-3000:]
    one = SFTSettings(
        model=str(tiny_model_dir),
        data=str(small_data_dir),
        out=str(tmp_path / "one"),
        max_steps=2,
        save_steps=2,
        batch_size=4,
        grad_accum=1,
        warmup_steps=0,
        logging_steps=1,
        max_train_records=8,
        lora=LoraSettings(dropout=0.0),
    )
    torch.set_num_threads(1)
    single = load_file(train_sft(one) / "adapter_model.safetensors")
    # The two-process weights after step 2 (adapter/ holds step 3, from the resume).
    double = load_file(root / "sft" / "checkpoint-2" / "adapter_model.safetensors")
    assert single.keys() == double.keys() and len(single) > 0
    for name, weight in single.items():
        torch.testing.assert_close(double[name], weight, atol=ADAPTER_ATOL, rtol=0)
    logged = json.loads((root / "sft" / "checkpoint-2" / "trainer_state.json").read_text())
    assert [h["step"] for h in logged["log_history"] if "loss" in h] == [1, 2]


@pytest.mark.slow
def test_only_the_main_process_writes_and_prints(launched):
    root, done, _ = launched
    settings = json.loads((root / "sft" / "settings.json").read_text())
    assert settings["launch"] == {"processes": 2, "distributed_type": "MULTI_CPU"}
    lines = done.stdout.splitlines()
    # sft2, sft3, chain: one line each (two for the chain), not one per process
    assert sum(line.startswith("SFT adapter:") for line in lines) == 3
    assert sum(line.startswith("SFT+RLOO adapter:") for line in lines) == 1
    checkpoint = root / "sft" / "checkpoint-2"
    assert sorted(p.name for p in checkpoint.glob("rng_state*")) == [
        "rng_state_0.pth",
        "rng_state_1.pth",
    ]  # each process's RNG, for an exact resume
    assert (root / "sft" / "adapter" / "tokenizer.json").exists()


@pytest.mark.slow  # shares the launch (see the module docstring)
def test_a_run_resumes_under_two_processes(launched):
    root, done, _ = launched
    assert phase_codes(root, "sft3") == ["0", "0"], done.stderr[-3000:]
    # each process took step 3 only; steps 1-2 came from checkpoint-2
    assert [(root / f"sft3-sft.{r}.steps").read_text() for r in (0, 1)] == ["1", "1"]
    state = json.loads((root / "sft" / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3


@pytest.mark.slow  # shares the launch (see the module docstring)
def test_sft_then_rloo_chain_across_the_processes(launched):
    root, done, _ = launched
    assert phase_codes(root, "chain") == ["0", "0"], done.stderr[-3000:]
    for stage in ("sft", "rloo"):
        assert [(root / f"chain-{stage}.{r}.steps").read_text() for r in (0, 1)] == ["1", "1"]
        assert (root / "chain" / stage / "adapter" / "adapter_model.safetensors").exists()


@pytest.mark.slow  # shares the launch (see the module docstring)
def test_a_process_that_fails_ends_the_launch(launched):
    root, done, wall = launched
    assert done.returncode != 0
    assert phase_codes(root, "dies") == [None, "2"]  # process 0 never finished its run
    assert "dilemmax finetune: error: --data" in done.stderr  # process 1's own one-line reason
    assert "ChildFailedError" in done.stderr  # the launcher's summary of who failed
    assert wall < 240  # ended by the failure, far before the 30 min collective timeout


def test_the_example_configs_are_accelerate_configs():
    from accelerate.commands.config.config_args import load_config_from_file

    kinds = {
        path.stem: load_config_from_file(str(path)) for path in sorted(EXAMPLES.glob("*.yaml"))
    }
    assert {k: v.distributed_type.value for k, v in kinds.items()} == {
        "cpu_two_processes": "MULTI_GPU",
        "ddp": "MULTI_GPU",
        "deepspeed_zero2": "DEEPSPEED",
        "deepspeed_zero3": "DEEPSPEED",
        "fsdp": "FSDP",
        "multinode_ddp": "MULTI_GPU",
    }
    assert kinds["deepspeed_zero3"].deepspeed_config["zero3_init_flag"] is True
    assert kinds["fsdp"].fsdp_config["fsdp_version"] == 2
    assert (kinds["multinode_ddp"].num_machines, kinds["multinode_ddp"].num_processes) == (2, 16)
    # precision is dilemmax's --precision, never the launcher's
    assert {v.mixed_precision for v in kinds.values()} == {"no"}


def test_check_world_refuses_a_launch_the_trainer_does_not_see(monkeypatch):
    trainer = SimpleNamespace(
        args=SimpleNamespace(world_size=1), accelerator=SimpleNamespace(distributed_type="NO")
    )
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UsageError, match="started 2 processes .* trains on 1"):
        check_world(trainer)
    monkeypatch.setenv("WORLD_SIZE", "1")
    check_world(trainer)
    monkeypatch.setenv("RANK", "first")
    with pytest.raises(UsageError, match="RANK='first'"):
        processes.is_main_process()
    for name in processes.LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")  # mpirun's names, as accelerate reads them
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    assert (processes.world_size(), processes.process_rank(), processes.local_rank()) == (4, 3, 1)
    assert processes.is_launched() and not processes.is_main_process()


def test_one_process_commands_refuse_a_launch(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")
    argv = ["finetune", "evaluate", "--model", str(tmp_path), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "runs in one process (WORLD_SIZE=2)" in capsys.readouterr().err


def test_vllm_generation_is_refused_without_the_package(
    capsys, tmp_path, tiny_model_dir, small_data_dir
):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here: nothing to refuse")
    base = ["finetune", "rloo", "--model", str(tiny_model_dir), "--data", str(small_data_dir)]
    base += ["--out", str(tmp_path / "o")]
    assert main([*base, "--vllm", "colocate"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--vllm colocate: the vllm package is not installed (pip install vllm)")
    assert len(err.splitlines()) == 1
    assert main([*base, "--vllm-server", "http://h:8000"]) == 2
    assert "--vllm-server needs --vllm server" in capsys.readouterr().err
    argv = ["finetune", "sft-rloo", *base[2:], "--vllm", "server", "--vllm-server", "h:8000"]
    assert main(argv) == 2  # before the SFT half starts
    assert "expected http://host:port" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_trl_config_refusals_are_one_line_before_the_model_loads(
    capsys, tmp_path, tiny_model_dir, small_data_dir, monkeypatch
):
    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the config was checked")

    monkeypatch.setattr("dilemmax.finetune.rloo.load_model", no_loading)
    argv = ["finetune", "rloo", "--model", str(tiny_model_dir), "--data", str(small_data_dir)]
    argv += ["--out", str(tmp_path / "o"), "--batch", "3", "--generations", "2"]
    assert main(argv) == 2  # 3 completions per step cannot hold whole groups of 2
    err = capsys.readouterr().err.strip()
    assert "TRL's RLOOConfig refuses these settings:" in err and "divisible" in err
    assert len(err.splitlines()) == 1


@pytest.mark.slow  # shares the launch (see the module docstring)
def test_a_two_process_checkpoint_resumes_in_one_process(launched, tmp_path, capsys):
    root, _, _ = launched
    shutil.copytree(root / "sft", tmp_path / "sft")  # the other tests read the original
    settings = json.loads((tmp_path / "sft" / "settings.json").read_text())
    fields = {k: v for k, v in settings.items() if k not in ("launch", "lora", "overrides")}
    resumed = SFTSettings(
        **{**fields, "out": str(tmp_path / "sft"), "max_steps": 4, "save_steps": 4},
        lora=LoraSettings(**{**settings["lora"], "modules_to_save": ()}),
    )
    train_sft(resumed)
    assert "resuming" in capsys.readouterr().out  # the one line: the global batch changes
    state = json.loads((tmp_path / "sft" / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert [h["step"] for h in state["log_history"] if "loss" in h] == [1, 2, 3, 4]
    launch = json.loads((tmp_path / "sft" / "settings.json").read_text())["launch"]
    assert launch == {"processes": 1, "distributed_type": "NO"}


if __name__ == "__main__":
    sys.exit(drive(Path(sys.argv[1]), sys.argv[2], sys.argv[3]))
