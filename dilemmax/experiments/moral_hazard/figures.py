"""Figure 3 of the moral-hazard paper, from an isolation run's results."""

from __future__ import annotations

from collections.abc import Mapping

from dilemmax.experiments.moral_hazard import common


def draw_figure3(payload: Mapping, path: str) -> None:
    """A: empirical 50% boundary per cost (blue) against alpha*(k) (red dashed), the errors as
    gray segments. B: pooled query rate below / at / above the boundary, Wilson 95% whiskers."""
    plt = common.pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    found = payload["boundaries"]
    costs = [x["cost"] for x in found]
    a.plot(costs, [x["alpha_star"] for x in found], "r--", label="predicted α*(k)")
    seen = [x for x in found if x["boundary"] is not None]
    a.plot(
        [x["cost"] for x in seen],
        [x["boundary"] for x in seen],
        "o-",
        color="tab:blue",
        label="empirical 50% boundary",
    )
    for x in seen:
        a.plot([x["cost"]] * 2, [x["alpha_star"], x["boundary"]], color="gray", linewidth=2)
    a.set_xlabel("query cost k")
    a.set_ylabel("private share α_i")
    mae = payload.get("boundary_mae")
    a.set_title("A: boundary" + ("" if mae is None else f" (MAE {mae:.3f})"))
    a.legend(fontsize=8)
    shown = {p: v for p, v in payload["bars"].items() if v["decisions"]}
    rates = [100 * v["rate"] for v in shown.values()]
    errors = [
        [100 * (v["rate"] - v["low"]) for v in shown.values()],
        [100 * (v["high"] - v["rate"]) for v in shown.values()],
    ]
    b.bar(list(shown), rates, yerr=errors, capsize=4, color="tab:blue")
    b.set_ylim(0, 105)
    b.set_ylabel("query rate (%)")
    b.set_title("B: pooled over costs (Wilson 95%)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
