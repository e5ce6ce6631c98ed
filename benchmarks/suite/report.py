"""A cost report (``python -m pytest --cost-json PATH``, tests/cost_report.py) as a markdown
table: the run's totals and its 20 most expensive tests and files.

    python benchmarks/suite/report.py COST_JSON --title TITLE  # appended to the results page
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TOP = 20


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


def report(cost: dict, title: str) -> str:
    t = cost["totals"]
    lines = [
        f"## {title}",
        "",
        f"Run wall time {cost['wall_s']:.0f} s; {int(t['tests'])} tests, {t['wall_s']:.0f} s of "
        f"test time summed over the workers; {int(t['programs'])} programs compiled "
        f"({int(t['cache_hits'])} from the persistent cache), {t['compile_s']:.0f} s compiling, "
        f"{t['trace_s'] + t['lower_s']:.0f} s tracing and lowering" + collected(cost) + ".",
        "",
        f"The {TOP} most expensive tests:",
        "",
        *table(cost["tests"], "test"),
        "",
        f"The {TOP} most expensive files:",
        "",
        *table(cost["files"], "file"),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cost_json", type=Path)
    parser.add_argument("--title", required=True)
    args = parser.parse_args()
    print(report(json.loads(args.cost_json.read_text()), args.title))


if __name__ == "__main__":
    main()
