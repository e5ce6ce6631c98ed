"""The moral-hazard paper's language-model experiments, run by ``dilemmax experiment``:

- ``moral_hazard/grid``: the 15 one-at-a-time conditions, Table 2 (and, combined over runs of
  several models and methods, Tables 2, 5, 17 and 18);
- ``moral_hazard/sweeps``: the autonomous k, w_T and n sweeps of Appendix D.1 (Figure 2);
- ``moral_hazard/isolation``: incentive isolation with scripted partners and the probes
  (Section 2.2, Appendix D.2, Figure 3, Table 8).
"""

from dilemmax.experiments.moral_hazard import grid, isolation, sweeps

DESIGNS = (grid.DESIGN, sweeps.DESIGN, isolation.DESIGN)
