"""A cost report (``python -m pytest --cost-json PATH``, tests/cost_report.py) as a markdown
table: the run's totals, its 20 most expensive tests and files, and (reports since 3250afc) its
10 most expensive program names and the machine-speed probe.

    python benchmarks/suite/report.py COST_JSON --title TITLE  # appended to the results page
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TOP = 20
TOP_PROGRAMS = 10


def table(rows: dict[str, dict], title: str) -> list[str]:
    lines = [
        f"| wall s | programs | cache hits | compile s | trace s | {title} |",
        "| ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    ranked = sorted(rows.items(), key=lambda kv: -kv[1]["wall_s"])[:TOP]
    for name, row in ranked:
        lines.append(
            f"| {row['wall_s']:.1f} | {int(row['programs'])} | {int(row['cache_hits'])} | "
            f"{row['compile_s']:.1f} | {row['trace_s'] + row['lower_s']:.1f} | `{name}` |"
        )
    return lines


def collected(cost: dict) -> str:
    """What collecting the tests compiled, which no test's row holds (reports since e193e09)."""
    if "collection" not in cost:
        return ""
    return f"; collecting the tests compiled {int(cost['collection'].get('programs', 0))} more"


def speed(cost: dict) -> str:
    """The speed probe's line (reports since a0ae6eb): the run's wall time reads next to it."""
    probe = cost.get("speed_probe")
    if not probe:
        return ""
    return (
        f" Speed probe: median {probe['median_ms']:.1f} ms of CPU for the fixed workload "
        f"({probe['samples']} samples, {probe['min_ms']:.1f}-{probe['max_ms']:.1f})."
    )


def program_table(cost: dict) -> list[str]:
    """The program names that cost most (compiling + tracing + lowering), with the files that
    spent most on each; nothing for reports without them."""
    rows = cost.get("programs") or []
    if not rows:
        return []
    lines = [
        f"The {TOP_PROGRAMS} most expensive program names:",
        "",
        "| s | programs | compile s | trace s | name | where most (programs) |",
        "| ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows[:TOP_PROGRAMS]:
        trace = row["trace_s"] + row["lower_s"]
        where = ", ".join(f"`{f['file']}` ({int(f['programs'])})" for f in row["files"][:3])
        lines.append(
            f"| {row['compile_s'] + trace:.1f} | {int(row['programs'])} | "
            f"{row['compile_s']:.1f} | {trace:.1f} | `{row['name']}` | {where} |"
        )
    return [*lines, ""]


def report(cost: dict, title: str) -> str:
    t = cost["totals"]
    lines = [
        f"## {title}",
        "",
        f"Run wall time {cost['wall_s']:.0f} s; {int(t['tests'])} tests, {t['wall_s']:.0f} s of "
        f"test time summed over the workers; {int(t['programs'])} programs compiled "
        f"({int(t['cache_hits'])} from the persistent cache), {t['compile_s']:.0f} s compiling, "
        f"{t['trace_s'] + t['lower_s']:.0f} s tracing and lowering"
        + collected(cost)
        + "."
        + speed(cost),
        "",
        f"The {TOP} most expensive tests:",
        "",
        *table(cost["tests"], "test"),
        "",
        f"The {TOP} most expensive files:",
        "",
        *table(cost["files"], "file"),
        "",
        *program_table(cost),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cost_json", type=Path)
    parser.add_argument("--title", required=True)
    args = parser.parse_args()
    try:
        cost = json.loads(args.cost_json.read_text())
        text = report(cost, args.title)
    except (OSError, ValueError) as err:
        parser.error(f"{args.cost_json}: cannot read it ({err})")
    except (KeyError, TypeError, AttributeError) as err:
        parser.error(f"{args.cost_json}: not a --cost-json report ({type(err).__name__}: {err})")
    print(text)


if __name__ == "__main__":
    main()
