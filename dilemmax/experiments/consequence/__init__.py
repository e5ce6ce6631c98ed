"""The consequence-allocation (IABench-CA) paper's designs, run by ``dilemmax experiment``.

* ``consequence/grid`` (:mod:`.grid`): the 228 contexts x 5 rules sweep; Tables 2 and 3, maps,
  stakes profile, rationale labels.
* ``consequence/ablations`` (:mod:`.ablations`): the prompt-only ablation suite; Table 4.
"""

from dilemmax.experiments.consequence import ablations, grid

DESIGNS = (grid.DESIGN, ablations.DESIGN)
