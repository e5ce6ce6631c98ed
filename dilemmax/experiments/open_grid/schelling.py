"""The Schelling diagram of a grid game (OpenSocialJax Appendix C.1, Figure 7).

Five copies of one model; k = 0..5 of them are cooperators and the rest defectors, the role
stated as item 1.5 of each seat's own system prompt (the ``role`` protocol option of that seat
alone). Which seats cooperate rotates over the seeds: on seed s the cooperators are seats
s, s + 1, ..., s + k - 1 (mod 5). Each (k, seed) is one part of one episode on that seed's
configuration, the roles kept for the whole episode.

C(x) and D(x) are the mean return of a cooperator and of a defector (per agent, averaged over
the trials) when x of its four co-players cooperate: C(x) from the runs with k = x + 1, D(x)
from those with k = x. The sequential-social-dilemma conditions read off them (Section 3.1):
mutual cooperation beats mutual defection, C(4) > D(0); it beats being exploited, C(4) > C(0);
and fear, D(0) > C(0), or greed, D(4) > C(4), holds (4 = n - 1 co-players with n agents).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dilemmax.commandline import headless_pyplot
from dilemmax.errors import UsageError
from dilemmax.experiments import catalogue
from dilemmax.experiments.design import Design, Plan, Report, SessionOptions
from dilemmax.experiments.open_grid import common
from dilemmax.redteam.figures import markdown_table

COOPERATOR, DEFECTOR = "cooperator", "defector"


def roles_for(num_agents: int, cooperators: int, seed: int) -> list[str]:
    """The role of each seat with ``cooperators`` cooperators on seed ``seed`` (rotating)."""
    chosen = {(seed + j) % num_agents for j in range(cooperators)}
    return [COOPERATOR if i in chosen else DEFECTOR for i in range(num_agents)]


def plan_schelling(game: str, params: common.OpenGridParams, run: SessionOptions) -> Plan:
    env = common.design_env(game, params)
    n = env.num_agents
    if n < 2:
        raise UsageError("the Schelling design needs at least two agents (--set num_agents)")
    parts, roles = [], {}
    for k in range(n + 1):
        for seed in range(common.seeds_of(params)):
            name = f"k={k}/seed{seed}"
            seat_roles = roles_for(n, k, seed)
            options = {a: {"role": r} for a, r in zip(env.agents, seat_roles, strict=True)}
            parts.append(common.seed_part(name, env, run, seed, seat_protocol_options=options))
            roles[name] = {"cooperators": k, "seed": seed, "roles": seat_roles}
    return Plan(parts, {"game": game, "roles": roles})


def curves(plan: Plan, results: Sequence) -> dict:
    """C(x), D(x) for x = 0..n-1 (None where no run gives one) with the returns behind them."""
    n = plan.parts[0].env.num_agents
    coop: dict[int, list[float]] = {x: [] for x in range(n)}
    defect: dict[int, list[float]] = {x: [] for x in range(n)}
    for part, result in zip(plan.parts, results, strict=True):
        entry = plan.context["roles"][part.name]
        k, seat_roles = entry["cooperators"], entry["roles"]
        per_trial = np.asarray(result.metrics["return_per_trial"], np.float64)  # [E, K, A]
        for e in range(per_trial.shape[0]):
            returns = per_trial[e].mean(axis=0)  # [A], averaged over the trials
            for i, role in enumerate(seat_roles):
                if role == COOPERATOR:
                    coop[k - 1].append(float(returns[i]))  # its co-players: k - 1 cooperate
                else:
                    defect[k].append(float(returns[i]))
    mean = lambda xs: float(np.mean(xs)) if xs else None  # noqa: E731
    return {
        "x": list(range(n)),
        "C": [mean(coop[x]) for x in range(n)],
        "D": [mean(defect[x]) for x in range(n)],
        "C_returns": [coop[x] for x in range(n)],
        "D_returns": [defect[x] for x in range(n)],
    }


def _greater(a, b) -> bool | None:
    return None if a is None or b is None else bool(a > b)


def conditions(c: Sequence, d: Sequence) -> dict:
    """The sequential-social-dilemma conditions read off C(x), D(x) (module docstring)."""
    last = len(c) - 1
    out = {
        "mutual_cooperation_over_mutual_defection": _greater(c[last], d[0]),
        "mutual_cooperation_over_exploitation": _greater(c[last], c[0]),
        "fear": _greater(d[0], c[0]),
        "greed": _greater(d[last], c[last]),
        "defecting_pays": [_greater(dx, cx) for cx, dx in zip(c, d, strict=True)],
    }
    parts = [out["mutual_cooperation_over_mutual_defection"],
             out["mutual_cooperation_over_exploitation"]]  # fmt: skip
    either = (
        None if out["fear"] is None and out["greed"] is None else bool(out["fear"] or out["greed"])
    )
    out["sequential_social_dilemma"] = (
        None if None in parts or either is None else bool(all(parts) and either)
    )
    return out


def _cell(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _flag(value) -> str:
    return "-" if value is None else ("yes" if value else "no")


def analyse_schelling(game: str, plan: Plan, results) -> Report:
    found = curves(plan, results)
    ssd = conditions(found["C"], found["D"])
    columns = zip(found["x"], found["C"], found["D"], ssd["defecting_pays"], strict=True)
    rows = [[x, _cell(cx), _cell(dx), _flag(pays)] for x, cx, dx, pays in columns]
    table = markdown_table(["x (cooperating co-players)", "C(x)", "D(x)", "D(x) > C(x)"], rows)
    last = len(found["x"]) - 1
    checks = [
        (f"mutual cooperation over mutual defection: C({last}) > D(0)",
         ssd["mutual_cooperation_over_mutual_defection"]),
        (f"mutual cooperation over being exploited: C({last}) > C(0)",
         ssd["mutual_cooperation_over_exploitation"]),
        ("fear: D(0) > C(0)", ssd["fear"]),
        (f"greed: D({last}) > C({last})", ssd["greed"]),
        ("sequential social dilemma", ssd["sequential_social_dilemma"]),
    ]  # fmt: skip
    table += "\n" + markdown_table(["condition", "holds"], [[n, _flag(v)] for n, v in checks])
    unit = "apples per agent per trial" if game == "open_cleanup" else "points per agent per trial"
    results_json = {"game": game, **found, "conditions": ssd, "unit": unit}
    figure = lambda path: _draw(found, unit, path)  # noqa: E731
    return Report(results_json, {"schelling": table}, {"schelling": figure})


def _draw(found: Mapping, unit: str, path: str) -> None:
    plt = headless_pyplot()

    figure, axis = plt.subplots(figsize=(4.5, 3.2))
    for key, label, colour in (("C", "cooperator", "tab:blue"), ("D", "defector", "tab:orange")):
        xs = [x for x, v in zip(found["x"], found[key], strict=True) if v is not None]
        ys = [v for v in found[key] if v is not None]
        axis.plot(xs, ys, marker="o", label=label, color=colour)
    axis.set_xlabel("number of other agents who cooperate")
    axis.set_ylabel(unit)
    axis.set_xticks(found["x"])
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def schelling_design(game: str) -> Design:
    return Design(
        name=f"{game}/schelling",
        **catalogue.described(f"{game}/schelling"),
        params=common.OpenGridParams,
        plan=lambda params, run: plan_schelling(game, params, run),
        analyse=lambda plan, results, params, run, extra: analyse_schelling(game, plan, results),
    )
