"""The replay page: one self-contained HTML file (script, style and data inline).

The page holds a small index (the run's title, one entry per env with its agents, action names,
palette and agent colours, one entry per episode with its label, group, seats and metrics) and
one compressed payload per episode (:func:`dilemmax.view.trace.pack`), inflated by the page
only when that episode is picked. It loads nothing: no network request, works from file://.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from pathlib import Path

from dilemmax.view.runs import Run
from dilemmax.view.trace import env_info, finite, pack, trace


def _asset(name: str) -> str:
    return resources.files("dilemmax.view").joinpath("assets", name).read_text(encoding="utf-8")


def _script_safe(text: str) -> str:
    """Script text that cannot end the <script> element it sits in."""
    return text.replace("</", "<\\/")


# What JSON inside a <script> element must not hold as itself: "<" begins "<!--", "<script" and
# "</script", each of which changes how the HTML parser reads the rest of the page (a "<!--" then
# "<script" keeps the element open past its own end tag, swallowing the page's script), ">" and
# "&" complete such markup, and U+2028 / U+2029 end a line in older JavaScript. They occur only
# inside JSON strings, where the \uXXXX escape is the same character.
_JSON_IN_SCRIPT = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


def script_json(value) -> str:
    """``value`` as JSON that stays data inside a <script> element, whatever its strings hold
    (a model name, a reply, a folder name): ``JSON.parse`` of the element's text gives it back."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.translate(_JSON_IN_SCRIPT)


# The page template's slots, filled in one pass: text put into one slot is never read for
# another's name (a title or seat holding "%SCRIPT%" stays as written).
_SLOTS = re.compile(r"%(TITLE|STYLE|INDEX|EPISODES|SCRIPT)%")


def build_page(run: Run) -> str:
    """The page's HTML for ``run``: every episode replayed, traced and packed."""
    envs: list[dict] = []
    env_index: dict[int, int] = {}
    entries, payloads = [], []
    for n, episode in enumerate(run.episodes):
        payload, _, first = trace(episode)
        if id(episode.env) not in env_index:
            env_index[id(episode.env)] = len(envs)
            envs.append(env_info(episode.env, first))
        entries.append(
            {
                "label": episode.label,
                "group": episode.group or envs[env_index[id(episode.env)]]["game"],
                "env": env_index[id(episode.env)],
                "steps": payload["steps"],
                "seats": episode.seats,
                "metrics": finite(episode.metrics),
            }
        )
        payloads.append(f'<script type="text/plain" id="ep-{n}">{pack(payload)}</script>')
    index = {"title": run.title, "kind": run.kind, "envs": envs, "episodes": entries}
    slots = {
        "TITLE": html.escape(run.title),
        "STYLE": _asset("view.css"),
        "INDEX": script_json(index),
        "EPISODES": "\n".join(payloads),
        "SCRIPT": _script_safe(_asset("view.js")),
    }
    return _SLOTS.sub(lambda slot: slots[slot.group(1)], _asset("view.html"))


# What marks a file as a page of `dilemmax view` (in its head), so that --out replaces only
# its own pages: a re-render, never a transcript or config.json named by mistake.
MARKER = '<meta name="generator" content="dilemmax view">'


def is_page(path: Path) -> bool:
    """Whether ``path`` holds a page ``dilemmax view`` wrote (its marker near the start)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(1024)
    except OSError:
        return False
    return MARKER.encode() in head


def write_page(run: Run, out: str | Path) -> Path:
    out = Path(out)
    out.write_text(build_page(run), encoding="utf-8")
    return out
