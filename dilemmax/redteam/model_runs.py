"""A red-teaming command with a language model in the seats (``redteam play`` and ``ablate``):
its run folder checked before any model is loaded, its transcript (the identity of the run, and
every call, so ``--resume`` replays what was paid for) held under the folder's lock while it runs,
and the prompt variant's flags as one-line errors.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from tqdm import tqdm

from dilemmax.commandline import output_folder
from dilemmax.errors import UsageError
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.transcript import Transcript
from dilemmax.runlock import RunLock


def sampling_identity(generate: GenerateConfig) -> list:
    """The sampling values a model run's transcript identity names (as runs always named them)."""
    return [generate.temperature, generate.top_p, generate.max_tokens, generate.seed]


@contextlib.contextmanager
def protocol_input():
    """A bad prompt variant (``goal=bogus``) as a one-line UsageError naming --protocol."""
    try:
        yield
    except UsageError:
        raise
    except (ValueError, TypeError) as error:
        raise UsageError(f"--protocol: {error}") from None


def run_folder(out: str | Path | None, resume: bool) -> Path | None:
    """The run folder of a language-model run, checked before any model is loaded: writable,
    and holding the transcript to continue when ``resume`` asks to (else every call would be
    paid for again, silently). None: no folder (no transcript kept)."""
    if out is None:
        if resume:
            raise UsageError("--resume needs the --out folder of the run to continue")
        return None
    if resume and not (Path(out) / "transcript.jsonl").is_file():
        raise UsageError(
            f"--resume: {out} holds no transcript.jsonl to continue; "
            "leave --resume out to start this run"
        )
    folder, created = output_folder(out, "--out")
    if created:  # made only to check it: a setup that fails after this leaves nothing behind
        folder.rmdir()
    return folder


@contextlib.contextmanager
def model_run(out: Path | None, what: str, identity: dict, resume: bool, progress: bool,
               total: int):  # fmt: skip
    """(transcript or None, progress bar) of a language-model run in the folder ``out``, held
    locked while it runs; ``resume`` continues the transcript there."""
    with contextlib.ExitStack() as stack:
        transcript = None
        if out is not None:
            stack.enter_context(RunLock(out, what))
            transcript = stack.enter_context(
                Transcript(out / "transcript.jsonl", identity, resume=resume)
            )
        bar = stack.enter_context(
            tqdm(total=total, unit="episode", disable=not progress, file=sys.stderr)
        )
        yield transcript, bar
