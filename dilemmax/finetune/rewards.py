"""The RLOO reward of the paper (Appendix B): 0.05 format + 0.10 rationale + 0.85 target match.

Each part is its own function of (reply, prompt) so it can be tested and logged on its own:

- :func:`format_reward`: ``FORMAT_WEIGHT`` if the game's strict parser accepts the reply
  (``parse_reply(...).valid``: one move line, in the stage's format, legal now);
- :func:`rationale_reward`: ``RATIONALE_WEIGHT`` if the reply has the protocol's step rationale
  (FACTS / ACCOUNTING / DECISION lines, :mod:`~dilemmax.finetune.rationale`);
- :func:`target_reward`: ``TARGET_WEIGHT`` if the strict parse of the reply is exactly the
  target (the cooperative teacher's action in that state).

The parts are independent: a reply with the right move and no rationale earns 0.05 + 0.85, the
rationale alone earns 0.10. :func:`trl_reward_functions` wraps them as TRL reward functions over
the dataset's columns (``context``, ``legal``, ``num_agents``, ``protocol``, ``target``), and the
trainer sums them (reward weights 1: the weights are inside).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from dilemmax.envs.text import ParsedReply, Prompt
from dilemmax.finetune.datasets import decode_context, protocol_for
from dilemmax.finetune.rationale import structure_for

FORMAT_WEIGHT = 0.05
RATIONALE_WEIGHT = 0.10
TARGET_WEIGHT = 0.85


def completion_text(completion: Any) -> str:
    """The reply text of a completion: a string, or TRL's ``[{"role", "content"}]`` messages
    (their contents joined). Anything else is the empty reply."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence):
        parts = [m.get("content") for m in completion if isinstance(m, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def parse(protocol, reply: str, prompt: Prompt) -> ParsedReply:
    """The game's parse of ``reply``; a parser that raises counts as an invalid reply."""
    try:
        return protocol.parse_reply(reply, prompt)
    except Exception as err:  # noqa: BLE001 - the reward must be total over any reply
        return ParsedReply(action=-1, valid=False, error=f"parser raised {err!r}")


def format_reward(protocol, reply: str, prompt: Prompt) -> float:
    """``FORMAT_WEIGHT`` if the strict parser accepts ``reply``, else 0."""
    return FORMAT_WEIGHT if parse(protocol, reply, prompt).valid else 0.0


def rationale_reward(protocol, reply: str, prompt: Prompt) -> float:
    """``RATIONALE_WEIGHT`` if ``reply`` has the protocol's rationale structure, else 0."""
    del prompt  # the structure is the same at every stage
    return RATIONALE_WEIGHT if structure_for(protocol).check(reply) else 0.0


def target_reward(protocol, reply: str, prompt: Prompt, target: int) -> float:
    """``TARGET_WEIGHT`` if the strict parser accepts ``reply`` and reads exactly ``target``
    (a move only recovered by lenient extraction is not an exact match), else 0."""
    parsed = parse(protocol, reply, prompt)
    return TARGET_WEIGHT if parsed.valid and parsed.action == int(target) else 0.0


def total_reward(protocol, reply: str, prompt: Prompt, target: int) -> float:
    """The sum of the three parts (in [0, 1])."""
    return (
        format_reward(protocol, reply, prompt)
        + rationale_reward(protocol, reply, prompt)
        + target_reward(protocol, reply, prompt, target)
    )


# --------------------------------------------------------------------------- TRL glue
@lru_cache(maxsize=4096)
def _prompt(context: str, num_agents: int, legal: tuple[int, ...]) -> Prompt:
    """What the parser needs of a record's prompt (its context and legal actions)."""
    return Prompt(system="", user="", legal=legal, context=decode_context(context, num_agents))


def _rows(kwargs) -> list[tuple[Any, Prompt]]:
    """(protocol, prompt) per completion from the dataset columns TRL passes along."""
    contexts, sizes, legal = kwargs["context"], kwargs["num_agents"], kwargs["legal"]
    options = kwargs.get("protocol") or ["{}"] * len(contexts)
    return [
        (protocol_for(int(n), opts or "{}"), _prompt(ctx, int(n), tuple(int(a) for a in acts)))
        for ctx, n, acts, opts in zip(contexts, sizes, legal, options, strict=True)
    ]


def _batched(part: Callable, name: str, needs_target: bool = False) -> Callable:
    def reward(completions, **kwargs) -> list[float]:
        rows = _rows(kwargs)
        targets = kwargs["target"] if needs_target else [None] * len(rows)
        out = []
        for completion, (protocol, prompt), target in zip(completions, rows, targets, strict=True):
            args = (protocol, completion_text(completion), prompt)
            out.append(part(*args, target) if needs_target else part(*args))
        return out

    reward.__name__ = name
    reward.__qualname__ = name
    return reward


def trl_reward_functions() -> list[Callable]:
    """The three parts as TRL reward functions (``reward_funcs=`` of ``RLOOTrainer``)."""
    return [
        _batched(format_reward, "format_reward"),
        _batched(rationale_reward, "rationale_reward"),
        _batched(target_reward, "target_reward", needs_target=True),
    ]


def reply_rewards(records, replies: Sequence[str]) -> dict[str, list[float]]:
    """Each part and the total, per reply: ``{part name: [reward of reply j]}``, ``"reward"``
    the sum of the parts (reply j answers ``records[j]``)."""
    columns = {k: [r[k] for r in records] for k in ("context", "num_agents", "target", "legal")}
    columns["protocol"] = [r.get("protocol", "{}") for r in records]
    parts = {fn.__name__: fn(list(replies), **columns) for fn in trl_reward_functions()}
    parts["reward"] = [sum(values) for values in zip(*parts.values(), strict=True)]
    return parts


def score_records(records, replies: Sequence[str]) -> dict[str, float]:
    """Mean of each part and of the total over ``records`` answered by ``replies``."""
    n = max(len(replies), 1)
    return {name: sum(values) / n for name, values in reply_rewards(records, replies).items()}


def check_records(records, num: int = 8) -> None:
    """Raises ValueError unless the teacher's own replies in the first ``num`` records earn the
    full reward under the current protocol: a dataset rendered by another version of the game's
    protocol (other prompt context, other rationale labels) would otherwise score every reply 0
    in silence."""
    sample = list(records[:num])
    replies = [completion_text(r["completion"]) for r in sample]
    columns = {k: [r[k] for r in sample] for k in ("context", "num_agents", "target", "legal")}
    columns["protocol"] = [r.get("protocol", "{}") for r in sample]
    parts = [fn(replies, **columns) for fn in trl_reward_functions()]
    totals = [sum(values) for values in zip(*parts, strict=True)]
    bad = [i for i, total in enumerate(totals) if abs(total - 1.0) > 1e-6]
    if bad:
        raise ValueError(
            f"the teacher's reply to record {bad[0]} earns {totals[bad[0]]:.2f}, not 1.0, under "
            "the current text protocol: the dataset was rendered by another protocol version; "
            "regenerate it with `dilemmax finetune data`"
        )
