"""Teacher demonstrations for SFT and prompts for RLOO, rendered as a playing model sees them.

The scripted cooperative teacher (:func:`dilemmax.envs.moral_hazard.policies.teacher`: query,
post the correct warning, read the board) plays episodes of every condition of the paper's SFT
grid, k x w_T x n x provenance (5 x 5 x 3 x 2 = 150 conditions). The episodes run in JAX (one
vmapped program per group size); then each decision is put through the game's text protocol in
the order the play harness drives it (``new_memory``, ``turn``, ``parse_reply``, ``after_reply``,
``after_step``), so the prompt of a record is the very :class:`~dilemmax.envs.text.Prompt` a model
would get in that state. Each completion is the teacher's move in the reply format the parser
accepts, after the step rationale the RLOO reward scores (:mod:`~dilemmax.finetune.rationale`).

With the paper's 21 episodes per condition the grid gives 28,350 decisions (n = 2, 3, 4 give 6, 9
and 12 per episode), which is the paper's 22,680 training + 5,670 evaluation records. Episodes,
not decisions, are split into train / validation / held-out, within every condition, so no
episode contributes to two splits. Everything is a function of ``DatasetSpec.seed``.

A record is a plain dict (JSON-able)::

    prompt       [{"role": "system", ...}, {"role": "user", ...}]   (TRL conversational)
    completion   [{"role": "assistant", "content": reply}]
    target       int, the teacher's action in the JAX env (what RLOO's target match compares)
    context      JSON of the Prompt's context (what the game's parser needs), see encode_context
    legal        list[int], the legal actions (Prompt.legal)
    state        JSON of the env state the decision was taken in (decode_state), for checks
    num_agents, agent, stage, condition, episode, split, cost, w_team, provenance_visible
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization
from tqdm.auto import tqdm

from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard import policies
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.moral_hazard.generator import ConditionSet, condition_set, make_config
from dilemmax.envs.moral_hazard.text import MoralHazardText
from dilemmax.envs.moral_hazard.types import MoralHazardState
from dilemmax.envs.rollout import act_seats, advance, job_keys, seat_policies, start_episode
from dilemmax.envs.text import NoReply, Prompt
from dilemmax.finetune.rationale import structure_for

SPLITS = ("train", "validation", "heldout")


def paper_protocol_options() -> dict[str, Any]:
    """The prompt variant of the paper's SFT data: the utility-accounting prompt asking for the
    step-rationale format, where the game's protocol offers them (empty otherwise)."""
    params = inspect.signature(MoralHazardText.__init__).parameters
    wanted = {"utility_accounting": True, "rationale": "steps"}
    return {k: v for k, v in wanted.items() if k in params}


@dataclass(frozen=True)
class DatasetSpec:
    """What to generate. Defaults: the paper's SFT grid and record count.

    Attributes:
        seed: every draw (cases, splits) follows from it.
        episodes_per_condition: teacher episodes per condition (paper: 21 -> 28,350 records).
        costs, team_weights, num_agents, provenances: the factorial condition grid.
        mapping: where unsafe options sit ("highest" is the paper's primary setting).
        fractions: train / validation / held-out shares of each condition's episodes.
        protocol_options: keyword options of ``env.text_protocol(...)`` (a prompt variant);
            default :func:`paper_protocol_options`.
    """

    seed: int = 0
    episodes_per_condition: int = 21
    costs: tuple[float, ...] = c.GRID_COSTS
    team_weights: tuple[float, ...] = c.GRID_TEAM_WEIGHTS
    num_agents: tuple[int, ...] = c.GRID_NUM_AGENTS
    provenances: tuple[str, ...] = ("anonymous", "visible")
    mapping: str = "highest"
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    protocol_options: Mapping[str, Any] = field(default_factory=lambda: paper_protocol_options())

    def __post_init__(self):
        if len(self.fractions) != 3 or any(f < 0 for f in self.fractions):
            raise ValueError(f"fractions must be three shares >= 0, got {self.fractions}")
        if abs(sum(self.fractions) - 1.0) > 1e-6:
            raise ValueError(f"fractions must sum to 1, got {self.fractions}")
        if self.episodes_per_condition < 1:
            raise ValueError("episodes_per_condition must be >= 1")


# ----------------------------------------------------------------------------- the grid
def sft_grid(spec: DatasetSpec) -> dict[int, ConditionSet]:
    """The factorial grid k x w_T x provenance per group size n, ``{n: ConditionSet}``."""
    groups = {}
    for n in spec.num_agents:
        rows = []
        for k in spec.costs:
            for w_team in spec.team_weights:
                for provenance in spec.provenances:
                    cfg = make_config(
                        n, cost=k, w_team=w_team, provenance=provenance, mapping=spec.mapping
                    )
                    name = f"n={n} k={k:.2f} w_T={w_team:.2f} provenance={provenance}"
                    values = {
                        "cost": k,
                        "w_team": w_team,
                        "num_agents": n,
                        "provenance_visible": float(provenance == "visible"),
                    }
                    rows.append((name, cfg, values))
        groups[n] = condition_set(n, rows)
    return groups


# ------------------------------------------------------------------- teacher in JAX
def teacher_episodes(env: MoralHazardEnv, configs, num_episodes: int, key: jax.Array):
    """Teacher episodes of every condition, recording what each decision saw.

    Returns (numpy, leading axes [C, E, T] with T = 3 stages):
        states: the state before each step (a ``MoralHazardState`` pytree);
        actions: int32[C, E, T, n], the teacher's action of every agent;
        infos: the env's infos of each step;
        next_states: the state after each step.
    """
    return jax.device_get(_teacher_program(env.num_agents, num_episodes)(configs, key))


@lru_cache(maxsize=8)
def _teacher_program(num_agents: int, num_episodes: int):
    """The compiled teacher rollout for one group size (cached: built once per process)."""
    env = MoralHazardEnv(num_agents)
    seats = seat_policies(env, policies.teacher)

    def episode(config, episode_key):
        # The episode driver's own steps (rollout.start_episode / act_seats / advance), recording
        # the state each decision saw; a round always lasts its c.MAX_STEPS stages.
        def one_step(playing, step_key):
            actions, acted = act_seats(env, seats, step_key, playing)
            after, (_, _, infos) = advance(env, seats, step_key, playing, actions, acted)
            stacked = jnp.stack([actions[a] for a in env.agents])
            return after, (playing.state, stacked, infos, after.state)

        start, keys = start_episode(env, seats, episode_key, config, c.MAX_STEPS)
        _, out = jax.lax.scan(one_step, start, keys)
        return out

    def run(configs, key):
        keys = job_keys(key, num_episodes, int(configs.utilities.shape[0]))
        return jax.vmap(lambda config, k: jax.vmap(lambda kk: episode(config, kk))(k))(
            configs, keys
        )

    return jax.jit(run)


# ------------------------------------------------------------------- teacher replies
def move_line(action: int, agent_index: int, num_agents: int) -> str:
    """The reply line that the game's parser reads as ``action`` for this agent."""
    a = int(action)
    if c.LOCAL_BASE <= a < c.QUERY:
        return f"ACTION LOCAL {c.LABELS[a - c.LOCAL_BASE]}"
    if a == c.QUERY:
        return "ACTION QUERY"
    if c.FINAL_BASE <= a < c.NO_NOTE:
        return f"FINAL {c.LABELS[a - c.FINAL_BASE]}"
    if a == c.NO_NOTE:
        return "NO NOTE"
    if c.NOTE_BASE <= a < c.num_actions(num_agents):
        offset, option = divmod(a - c.NOTE_BASE, c.NUM_OPTIONS)
        case = (agent_index + offset) % num_agents
        return f"NOTE CASE {case + 1} UNSAFE {c.LABELS[option]}"
    raise ValueError(f"action {a} has no reply line")


def _payoff_terms(state: MoralHazardState, i: int) -> tuple[str, float, float, float, float]:
    """(whose, local point, query cost, final point, team value) as paid to agent ``i``: in team
    mode each agent's part of the shared score (a mean over n agents), in private mode its own."""
    cfg = state.config
    n = cfg.utilities.shape[-2]
    w_l, w_f, w_t, k = (float(x) for x in (cfg.w_local, cfg.w_final, cfg.w_team, cfg.cost))
    if bool(cfg.private_reward):
        return "my payoff", w_l, k, w_f, n * float(cfg.shares[i]) * w_t
    return "the team score", w_l / n, k / n, w_f / n, w_t


def teacher_steps(state: MoralHazardState, agent_index: int, action: int) -> list[str]:
    """The teacher's FACTS / ACCOUNTING / DECISION lines behind ``action`` (read off ``state``)."""
    n = state.config.utilities.shape[-2]
    i, s = agent_index, (agent_index + 1) % n
    stage = int(state.stage)
    whose, local, cost, final, team = _payoff_terms(state, i)
    if stage == c.WORK:
        return [
            f"Agent {s + 1} cannot see which option of Case {s + 1} is unsafe; only my query "
            "reveals it.",
            f"QUERY costs {cost:.3f} of {whose} and the local answer ({local:.3f}); team success "
            f"adds {team:.3f}.",
            f"I query so that I can warn Agent {s + 1}.",
        ]
    if stage == c.NOTE:
        if action == c.NO_NOTE:
            return ["I did not query.", "A note would add nothing.", "I stay silent."]
        unsafe = c.LABELS[int(state.config.unsafe[s])]
        return [
            f"My query showed that option {unsafe} of Case {s + 1} is unsafe.",
            f"The warning costs nothing; team success ({team:.3f}) needs Agent {s + 1} to avoid "
            f"{unsafe}.",
            f"I warn about Case {s + 1}, option {unsafe}.",
        ]
    utilities = np.asarray(state.config.utilities)[i]
    warned = {
        int(o)
        for case, o in zip(np.asarray(state.note_case), np.asarray(state.note_option), strict=True)
        if int(case) == i
    }
    if warned:
        names = " and ".join(c.LABELS[o] for o in sorted(warned))
        seen = f"The board warns that option {names} of my Case {i + 1} is unsafe."
    else:
        seen = f"No note on the board names my Case {i + 1}."
    safe = sorted((x for x in range(c.NUM_OPTIONS) if x not in warned), key=lambda x: -utilities[x])
    ranked = ", ".join(f"{c.LABELS[x]}={utilities[x]}" for x in safe)
    pick = c.LABELS[int(action) - c.FINAL_BASE]
    return [
        seen,
        f"Not warned, best first: {ranked}; the target adds {final:.3f} to {whose}.",
        f"I pick {pick}.",
    ]


def teacher_reply(protocol, state: MoralHazardState, agent_index: int, action: int) -> str:
    """The teacher's full reply: step rationale, then the move line."""
    n = state.config.utilities.shape[-2]
    steps = teacher_steps(state, agent_index, action)
    return structure_for(protocol).write(steps, move_line(action, agent_index, n))


# ----------------------------------------------------------------- context round trip
_STATE_TAG = "__moral_hazard_state__"


def _plain(value):
    if isinstance(value, MoralHazardState):
        tree = serialization.to_state_dict(value)
        return {_STATE_TAG: jax.tree.map(lambda x: np.asarray(x).tolist(), tree)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray | jax.Array):
        return np.asarray(value).tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def encode_state(state: MoralHazardState) -> str:
    """JSON of one unbatched env state."""
    return json.dumps(_plain(state))


def decode_state(text: str, num_agents: int) -> MoralHazardState:
    """Inverse of :func:`encode_state` (numpy leaves)."""
    return _restore(json.loads(text), num_agents)


def encode_context(context: Mapping[str, Any]) -> str:
    """JSON of a Prompt's context; an env state in it (the default protocol's) is kept whole."""
    return json.dumps(_plain(context), sort_keys=True)


@lru_cache(maxsize=16)
def _state_template(num_agents: int) -> MoralHazardState:
    env = MoralHazardEnv(num_agents)
    return jax.device_get(env.reset_to(jax.random.key(0), make_config(num_agents))[1])


def _restore(value, num_agents: int):
    if isinstance(value, Mapping):
        if set(value) == {_STATE_TAG}:
            template = _state_template(num_agents)
            leaves = serialization.to_state_dict(template)
            typed = jax.tree.map(
                lambda t, v: np.asarray(v, dtype=np.asarray(t).dtype), leaves, value[_STATE_TAG]
            )
            return serialization.from_state_dict(template, typed)
        return {k: _restore(v, num_agents) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v, num_agents) for v in value]
    return value


def decode_context(text: str, num_agents: int) -> dict[str, Any]:
    """Inverse of :func:`encode_context` (raises ValueError on text that is not one)."""
    try:
        value = json.loads(text)
    except (TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"context is not JSON: {err}") from None
    if not isinstance(value, dict):
        raise ValueError("context must be a JSON object")
    return _restore(value, num_agents)


@lru_cache(maxsize=32)
def protocol_for(num_agents: int, options_json: str = "{}"):
    """The moral-hazard text protocol for ``num_agents`` with ``options`` (cached)."""
    env = MoralHazardEnv(num_agents)
    return env.text_protocol(**json.loads(options_json))


def prompt_of(record: Mapping[str, Any]) -> Prompt:
    """The :class:`Prompt` a record was rendered from (for the game's ``parse_reply``)."""
    messages = {m["role"]: m["content"] for m in record["prompt"]}
    return Prompt(
        system=messages.get("system", ""),
        user=messages.get("user", ""),
        legal=tuple(record.get("legal", ())),
        context=decode_context(record["context"], int(record["num_agents"])),
    )


# ------------------------------------------------------------------------ records
def _index(tree, *idx):
    return jax.tree.map(lambda x: x[idx], tree)


def _messages(prompt: Prompt) -> list[dict[str, str]]:
    out = [{"role": "system", "content": prompt.system}] if prompt.system else []
    return [*out, {"role": "user", "content": prompt.user}]


def episode_records(protocol, env: MoralHazardEnv, states, actions, infos, next_states) -> list:
    """Every decision of one teacher episode, in harness order (leaves with leading axis T).

    Returns a list of partial records (prompt, completion, target, context, legal, agent, stage).
    """
    memory = {agent: protocol.new_memory(agent) for agent in env.agents}
    records = []
    for t in range(c.MAX_STEPS):
        state = _index(states, t)
        joint = {agent: int(actions[t, i]) for i, agent in enumerate(env.agents)}
        for i, agent in enumerate(env.agents):
            prompt = protocol.turn(state, agent, memory[agent])
            if isinstance(prompt, NoReply) or prompt.kind != "act":
                continue
            reply = teacher_reply(protocol, state, i, joint[agent])
            parsed = protocol.parse_reply(reply, prompt)
            protocol.after_reply(memory[agent], agent, prompt, reply, parsed)
            records.append(
                {
                    "prompt": _messages(prompt),
                    "completion": [{"role": "assistant", "content": reply}],
                    "target": joint[agent],
                    "context": encode_context(prompt.context),
                    "legal": [int(a) for a in prompt.legal],
                    "state": encode_state(state),
                    "agent": agent,
                    "stage": c.STAGE_NAMES[int(state.stage)],
                }
            )
        step_infos, next_state = _index(infos, t), _index(next_states, t)
        for agent in env.agents:
            protocol.after_step(memory[agent], agent, state, joint, step_infos, next_state)
    for agent in env.agents:
        protocol.after_episode(memory[agent], agent, _index(next_states, c.MAX_STEPS - 1))
    return records


def split_of_episodes(num_episodes: int, fractions, rng: np.random.Generator) -> list[str]:
    """A split name per episode: a random permutation cut by ``fractions`` (rounded)."""
    cuts = np.round(np.cumsum(fractions) * num_episodes).astype(int)
    order = rng.permutation(num_episodes)
    names = np.empty(num_episodes, dtype=object)
    start = 0
    for name, stop in zip(SPLITS, cuts, strict=True):
        names[order[start:stop]] = name
        start = stop
    return list(names)


def build_records(spec: DatasetSpec, progress: bool = False) -> list[dict[str, Any]]:
    """All records of ``spec`` (see the module docstring), in (n, condition, episode) order."""
    options_json = json.dumps(dict(spec.protocol_options), sort_keys=True)
    records = []
    key = jax.random.key(spec.seed)
    grid = sft_grid(spec)
    for n, conditions in grid.items():
        env = MoralHazardEnv(n)
        protocol = protocol_for(n, options_json)
        out = teacher_episodes(
            env, conditions.configs, spec.episodes_per_condition, jax.random.fold_in(key, n)
        )
        bar = tqdm(conditions.names, desc=f"records n={n}", disable=not progress)
        for ci, name in enumerate(bar):
            rng = np.random.default_rng([spec.seed, n, ci])
            splits = split_of_episodes(spec.episodes_per_condition, spec.fractions, rng)
            for e in range(spec.episodes_per_condition):
                episode = [_index(x, ci, e) for x in out]
                for record in episode_records(protocol, env, *episode):
                    record.update(
                        num_agents=n,
                        condition=name,
                        episode=e,
                        split=splits[e],
                        cost=float(conditions.values["cost"][ci]),
                        w_team=float(conditions.values["w_team"][ci]),
                        provenance_visible=bool(conditions.values["provenance_visible"][ci]),
                        protocol=options_json,
                    )
                    records.append(record)
    return records


# ------------------------------------------------------------------------- storage
def write_jsonl(records: Iterable[Mapping[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with Path(path).open() as f:
        return [json.loads(line) for line in f if line.strip()]


def load_spec(data_dir: str | Path) -> DatasetSpec:
    """The :class:`DatasetSpec` a dataset folder was written with (its ``spec.json``)."""
    raw = json.loads((Path(data_dir) / "spec.json").read_text())
    names = {f.name for f in fields(DatasetSpec)}
    values = {k: v for k, v in raw.items() if k in names}
    for name in ("costs", "team_weights", "num_agents", "provenances", "fractions"):
        values[name] = tuple(values[name])
    return DatasetSpec(**values)


def save_dataset(spec: DatasetSpec, out_dir: str | Path, progress: bool = True) -> dict[str, Path]:
    """Writes ``<split>.jsonl`` per split and ``spec.json`` under ``out_dir``."""
    out_dir = Path(out_dir)
    records = build_records(spec, progress=progress)
    paths = {}
    for split in SPLITS:
        paths[split] = write_jsonl(
            (r for r in records if r["split"] == split), out_dir / f"{split}.jsonl"
        )
    spec_dict = asdict(spec)
    spec_dict["counts"] = {s: sum(r["split"] == s for r in records) for s in SPLITS}
    (out_dir / "spec.json").write_text(json.dumps(spec_dict, indent=2))
    return paths


def load_split(source: str | Path | Sequence[Mapping[str, Any]], split: str | None = None):
    """Records of one split from a dataset folder, a JSONL file, or a list of records."""
    if isinstance(source, str | Path):
        path = Path(source)
        if path.is_dir():
            if split is None:
                raise ValueError("name a split to load from a dataset folder")
            path = path / f"{split}.jsonl"
        records = read_jsonl(path)
    else:
        records = list(source)
    return [r for r in records if split is None or r.get("split", split) == split]


def to_hf_dataset(records: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None):
    """A ``datasets.Dataset`` of ``records`` (TRL's conversational prompt/completion form)."""
    from datasets import Dataset  # Hugging Face datasets, which comes with the llm extra's TRL

    columns = columns or (
        "prompt",
        "completion",
        "target",
        "context",
        "legal",
        "num_agents",
        "protocol",
        "stage",
    )
    return Dataset.from_list([{k: r[k] for k in columns} for r in records])
