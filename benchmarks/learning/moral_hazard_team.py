"""Team reward, every agent learning: does the learned query rate match rational play?

Setup: moral_hazard, n = 2, team reward (every agent is paid R_game), both seats learn with
IPPO (shared parameters, agent-id input), one training run per (mapping, w_T, k, seed), one
after another. Settings: the three unsafe-option mappings at the primary w_T = 0.5, and
the uninformative mapping at w_T = 1.0 (where querying pays for small k); k swept over
{0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4}.

Prediction (``dilemmax.envs.moral_hazard.theory.rational_team_query_rate``): with m of the n
agents querying (and warning correctly) and the others answering locally, the expected score is
V(m) = w_L (n - m)/n + w_F (m + (n - m) a)/n + w_T a^(n - m) - k m/n, where a is the chance
that an agent without a warning still picks its target from the public utilities: 1 under the
highest-unsafe mapping (the second-best option is always safe), 1 under the lowest-unsafe
mapping, 3/4 under the uninformative one. The rational team query rate is argmax_m V(m) / n. The
paper's k* = w_F + w_T - w_L = 0.30 is the same comparison with a = 0 (no guessing), which a
learner is not bound by; both predictions are listed.

Measured after training (sampled actions, fresh episodes): query rate, final accuracy, team
success, score, and whether the team took the no-query shortcut (query rate < 0.1 with final
accuracy > 0.9, i.e. targets found from utilities alone).

``--followup scripted`` learns only the work move (LOCAL / QUERY): after a query the correct
warning is posted and every final choice reads the board (``with_scripted_followup``), so the
learners play exactly the game V(m) describes, whose pure equilibria are
``theory.team_equilibria``. Comparing the two modes separates "the work incentive is
misjudged" from "warnings never become worth reading" (the babbling equilibrium).

    python benchmarks/learning/moral_hazard_team.py
    python benchmarks/learning/moral_hazard_team.py --followup scripted --settings uninformative:1.0
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from common import RESULTS, command_line, machine_note, run_grid, table

from dilemmax.envs.moral_hazard import constants as mh
from dilemmax.envs.moral_hazard.theory import (
    board_rule_accuracy,
    guess_accuracy,
    rational_team_query_rate,
    team_equilibria,
    team_route_values,
)
from dilemmax.train.configure import make_config
from dilemmax.train.ppo import make_train

SETTINGS = [("highest", 0.5), ("uninformative", 0.5), ("lowest", 0.5), ("uninformative", 1.0)]
SCRIPTED_FOLLOWUP = "dilemmax.envs.moral_hazard.policies:with_scripted_followup"


def parse_setting(text: str) -> tuple[str, float]:
    """A setting written mapping:w_T, e.g. uninformative:1.0."""
    mapping, _, w_team = text.partition(":")
    if mapping not in mh.MAPPING_NAMES or not w_team:
        raise argparse.ArgumentTypeError(
            f"setting {text!r} must be mapping:w_T with mapping in {mh.MAPPING_NAMES}"
        )
    return mapping, float(w_team)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--costs", type=float, nargs="+", default=[0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4]
    )
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--timesteps", type=int, default=98_304)
    parser.add_argument("--eval-episodes", type=int, default=256)
    parser.add_argument("--followup", choices=["learned", "scripted"], default="learned")
    parser.add_argument(
        "--settings", type=parse_setting, nargs="+", default=SETTINGS, help="mapping:w_T ..."
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.out is None:
        suffix = "" if args.followup == "learned" else "_scripted_followup"
        args.out = str(RESULTS / f"learning_moral_hazard_team{suffix}.md")

    config = make_config(
        "moral_hazard",
        "ippo",
        {
            "env_kwargs": {"num_agents": 2, "payoff": "team"},
            "train_grid": None,
            "eval_grid": None,
            "total_timesteps": args.timesteps,
            "eval_episodes": args.eval_episodes,
            "progress": False,
            "learner_transform": SCRIPTED_FOLLOWUP if args.followup == "scripted" else None,
        },
    )
    train = make_train(config)
    trainer = train.trainer

    def train_run(key, env_config):
        state, _ = train(key, env_config)
        return state, {}

    def eval_run(params, env_config, key):
        outcomes = trainer.evaluate(params, env_config, jax.random.fold_in(key, 7))
        names = ("query_rate", "final_accuracy", "team_success", "score", "local_reward")
        return {k: outcomes[k].mean() for k in names}

    runs = [(m, w, k) for m, w in args.settings for k in args.costs]
    env_config = {
        "mapping": jnp.asarray([mh.MAPPING_NAMES.index(m) for m, _, _ in runs], jnp.int32),
        "w_team": jnp.asarray([w for _, w, _ in runs], jnp.float32),
        "cost": jnp.asarray([k for _, _, k in runs], jnp.float32),
        # Cases are redrawn at reset under the overridden mapping (sample_config drew them
        # under the env's default mapping).
        "sample_cases": jnp.ones(len(runs), bool),
    }
    keys = jax.random.split(jax.random.PRNGKey(2024), len(runs) * args.seeds)
    keys = keys.reshape(len(runs), args.seeds, -1)
    t0 = time.perf_counter()
    out = run_grid(train_run, eval_run, keys, env_config)  # {name: float64[G, S]}
    seconds = time.perf_counter() - t0
    print(f"{len(runs) * args.seeds} runs in {seconds:.0f}s", flush=True)

    rows, raw = [], []
    for i, (m, w, k) in enumerate(runs):
        # What an unwarned agent hits: its own learned guess (the best guess from the
        # utilities) or, with scripted follow-ups, the read-the-board rule's.
        a = guess_accuracy(m) if args.followup == "learned" else board_rule_accuracy(m)
        low, high = rational_team_query_rate(2, k, w_team=w, accuracy=a)
        equilibria = team_equilibria(2, k, w_team=w, accuracy=a)
        paper_low, paper_high = rational_team_query_rate(2, k, w_team=w, mapping=None)
        best = float(np.max(team_route_values(2, k, w_team=w, accuracy=a)))
        q = out["query_rate"][i]
        acc = out["final_accuracy"][i]
        match = low - 0.1 <= q.mean() <= high + 0.1
        at_equilibrium = min(abs(q.mean() - e) for e in equilibria) <= 0.1
        shortcut = q.mean() < 0.1 and acc.mean() > 0.9
        rows.append(
            [m, f"{w:.1f}", f"{k:.2f}", _span(low, high), _span(paper_low, paper_high),
             ", ".join(f"{e:.1f}" for e in equilibria),
             float(q.mean()), " / ".join(f"{x:.2f}" for x in q), float(acc.mean()),
             float(out["team_success"][i].mean()), float(out["score"][i].mean()), best,
             "yes" if match else "NO", "yes" if at_equilibrium else "NO",
             "yes" if shortcut else "no"]
        )  # fmt: skip
        raw.append(
            {"mapping": m, "w_team": w, "cost": k, "rational": [low, high],
             "paper": [paper_low, paper_high], "equilibria": equilibria, "best_score": best,
             **{name: out[name][i].tolist() for name in out}}
        )  # fmt: skip
    write_report(args, config, rows, raw, seconds)


def _span(low: float, high: float) -> str:
    return f"{low:.1f}" if low == high else f"{low:.1f}-{high:.1f}"


def write_report(args, config, rows, raw, seconds) -> None:
    header = [
        "mapping", "w_T", "k", "rational rate", "paper (a=0)", "work-game equilibria",
        "learned rate", "per seed", "final acc.", "team success", "score", "best V",
        "matches optimum", "at an equilibrium", "no-query shortcut",
    ]  # fmt: skip
    matched = sum(r[-3] == "yes" for r in rows)
    stable = sum(r[-2] == "yes" for r in rows)
    learned = (
        "work move, warning and final choice"
        if args.followup == "learned"
        else ("work move only (warning and final choice scripted: `with_scripted_followup`)")
    )
    text = f"""# Learning evidence: moral_hazard team reward, both agents learning (IPPO)

Learned decisions: {learned}.

Command: `{command_line()}`

Machine: {machine_note()}. {len(rows) * args.seeds} training runs (one after another),
{seconds:.0f} s wall; each run {config.num_updates} updates x {config.num_envs} envs x
{config.num_steps} steps; seeds per row: {args.seeds} (keys split from `PRNGKey(2024)`).
Evaluation: {args.eval_episodes} fresh episodes per run, sampled actions.

How the prediction is computed: every agent is paid R_game, so a rational team plays the profile
that maximises V(m) = w_L (n - m)/n + w_F (m + (n - m) a)/n + w_T a^(n - m) - k m/n over the
number m of querying agents, where a is the probability that an agent without a warning picks
its target from the public utilities alone: a = 1 under the highest-unsafe mapping (the
second-highest option is always the target), a = 1 under the lowest-unsafe mapping (the top
option is), a = 3/4 under the uninformative mapping (the top option is the target unless it is
the unsafe one). With scripted follow-ups an unwarned agent plays the read-the-board rule (the
top-utility option), so a = 0 / 3/4 / 1 under the highest / uninformative / lowest mapping
instead. "rational rate" = argmax_m V(m) / n from the env's information structure;
"paper (a=0)" = the paper's comparison, which assumes an unwarned agent always misses and gives
the k* = w_F + w_T - w_L switch. "best V" = the rational team's expected score. A row "matches"
when the learned rate is within 0.1 of the rational rate (interval). "work-game equilibria":
the query rates m/n where V(m) is a local maximum (`theory.team_equilibria`: no single agent
gains by switching when warnings are written and read correctly); "at an equilibrium" when the
learned rate is within 0.1 of one. With learned warnings and final choices, "nobody queries and
nobody reads the board" is a further (babbling) equilibrium for every k, since an unread warning
is worth nothing and a query forgoes w_L. "no-query shortcut": the
team queries < 10% of the time yet final accuracy > 0.9, i.e. it reads safety off the
utilities, as the paper reports prompt optimisation discovering.

{matched} of {len(rows)} rows match the team-optimal prediction; {stable} of {len(rows)} sit at a
work-game equilibrium.

{table(header, rows)}

Raw numbers: `{args.out.replace(".md", ".json").split("/")[-1]}`.
"""
    with open(args.out, "w") as f:
        f.write(text)
    with open(args.out.replace(".md", ".json"), "w") as f:
        json.dump(raw, f, indent=1)
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
