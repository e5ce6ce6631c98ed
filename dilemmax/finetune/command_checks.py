"""What the ``dilemmax finetune`` commands share: checks of the folders and protocol options a
command reads or writes (before any model loads), and the torch thread count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dilemmax.commandline import output_folder, user_input
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.finetune.checks import check_adapter, check_model, read_spec
from dilemmax.finetune.datasets import paper_protocol_options
from dilemmax.finetune.processes import is_launched
from dilemmax.runlock import refuse_other_writer


def protocol_options(
    protocol: Mapping[str, Any] | None, data: str | None = None, option: str = "--conditions"
) -> dict:
    """Text-protocol options: the dataset's (``data``) or else the paper's SFT variant, with
    ``protocol`` laid over them (``--protocol brief=true`` keeps the rest); checked by building
    the game's protocol with them."""
    base = dict(read_spec(data, option).protocol_options) if data else paper_protocol_options()
    options = {**base, **dict(protocol or {})}
    with user_input("--protocol"):
        MoralHazardEnv(2).text_protocol(**options)
    return options


def check_run(model: str, adapter: str | None = None, out: str | None = None) -> None:
    """What a training or scoring command reads from elsewhere, checked before any model loads:
    the model and adapter folders and the --out folder."""
    check_model(model)
    check_adapter(adapter)
    if out:
        check_output_folder(out, "--out")


def check_output_folder(path: str, option: str) -> None:
    """The folder a command will write, checked now (a file in the way, a place nobody can
    write); made only to check it, so a command that fails before writing leaves nothing. Under
    a launch it stays: the other processes check it at the same time (a probe file of theirs
    may be inside), and the run fills it next."""
    folder, created = output_folder(path, option)
    if created and not is_launched():
        folder.rmdir()
    refuse_other_writer(folder, "finetune", option)  # a play's, a training's run folder


def set_threads(threads: int) -> None:
    """torch's CPU threads (0: torch's own choice)."""
    if threads:
        import torch  # of the optional llm extra, which only the training commands need

        torch.set_num_threads(threads)
