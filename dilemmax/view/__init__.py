"""``dilemmax view``: any run as one self-contained HTML replay page.

:mod:`runs` reads a run (rollout file, play / experiment folder, training run) as episodes,
:mod:`trace` replays each one and stores it compactly, :mod:`page` writes the page and
:mod:`cli` is the command. docs/view.md describes the page.
"""
