"""``dilemmax view PATH``: a run as one self-contained HTML replay page.

PATH is a ``dilemmax rollout --out`` file, a ``dilemmax play`` or ``dilemmax experiment`` run
folder (or its transcript.jsonl), or a ``dilemmax train`` run folder (whose checkpoint plays
--episodes evaluation episodes from --seed here; ``dilemmax evaluate`` writes into the same
folder). The page is written beside PATH (``<PATH>.html``, or ``<folder>/view.html``) unless
--out names it, and its path is printed; --open also opens it in the default browser.
"""

from __future__ import annotations

import argparse
import webbrowser
from pathlib import Path

from dilemmax.commandline import output_file, positive_int, seed_int, writing
from dilemmax.errors import UsageError
from dilemmax.runlock import refuse_run_file
from dilemmax.view.page import is_page, write_page
from dilemmax.view.runs import read_run

HELP = "a run as one self-contained HTML replay page (--open to open it)"

# Episodes one page replays at most (each is replayed and stored; 256 of 2,000 steps is the
# measured size, docs/view.md).
MAX_EPISODES = 1024
PAGE_SUFFIXES = (".html", ".htm")  # no other command writes such a file into its run folder


def default_out(path: Path) -> Path:
    return path / "view.html" if path.is_dir() else path.with_suffix(".html")


def _cmd_view(args) -> int:
    path = Path(args.path)
    out = output_file(args.out or default_out(path), "--out")
    _check_not_anothers(out)
    if args.episodes > MAX_EPISODES:
        raise UsageError(f"--episodes {args.episodes}: at most {MAX_EPISODES} per page")
    run = read_run(path, episodes=args.episodes, seed=args.seed)
    total = len(run.episodes)
    run.episodes = run.episodes[:MAX_EPISODES]
    with writing(out, "--out"):
        write_page(run, out)
    print(f"view: {out.resolve()}")
    if total > MAX_EPISODES:
        print(f"  (the first {MAX_EPISODES} of its {total} episodes: a page holds at most that)")
    if args.open and not webbrowser.open(out.resolve().as_uri()):
        print("  (no default browser here: open the file above in one)")
    return 0


def _check_not_anothers(out: Path) -> None:
    """--out replaces only a page of its own (a re-render): never a file another command or
    the user wrote (a transcript, a run's config.json), and inside another command's run
    folder it writes only a page (``.html``), not a name that run's files may take."""
    if out.exists() and not is_page(out):
        raise UsageError(
            f"--out {out} holds a file that is not a page of dilemmax view, which view replaces "
            "only when it wrote it; choose another --out"
        )
    if out.suffix.lower() not in PAGE_SUFFIXES:
        refuse_run_file(out, "view", "--out")


def add_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "view", help=HELP, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("path", help="a rollout --out file, a play / experiment / train run folder")
    p.add_argument("--out", help="the page to write (default: beside PATH)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p.add_argument(
        "--episodes", type=positive_int, default=4, help="a training run: episodes to play (4)"
    )
    p.add_argument("--seed", type=seed_int, default=0, help="a training run: their seed (0)")
    p.set_defaults(func=_cmd_view)
