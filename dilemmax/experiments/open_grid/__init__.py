"""OpenSocialJax's language-model experiments on OpenCleanup and OpenHarvest, as designs.

For each game (``open_cleanup/<design>``, ``open_harvest/<design>``): ``homogeneous`` (five
copies of one model; Appendix C Tables 3-5, one row per model), ``arena`` (one model per seat),
``schelling`` (Appendix C.1: k = 0..5 cooperators, C(x), D(x) and the SSD conditions) and
``reveal`` (the homogeneous team with the hidden rules revealed vs hidden). Modules: ``common``
(options, env, seeds, parts), ``events`` (what a played episode gives the tables), ``tables``
(Tables 3-5), ``teams`` (homogeneous, reveal), ``arena``, ``schelling``.
"""

from dilemmax.experiments.open_grid.arena import arena_design
from dilemmax.experiments.open_grid.common import GAMES
from dilemmax.experiments.open_grid.schelling import schelling_design
from dilemmax.experiments.open_grid.teams import homogeneous_design, reveal_design

DESIGNS: tuple = tuple(
    make(game)
    for game in GAMES
    for make in (homogeneous_design, arena_design, schelling_design, reveal_design)
)

__all__ = ["DESIGNS"]
