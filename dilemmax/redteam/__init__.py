"""Institutional red-teaming of consequence rules (the red-teaming paper's pipeline, Sections 4-6).

Modules:

* :mod:`~dilemmax.redteam.reference`: the cooperative-refinement reference, subgame-perfect
  equilibria by backward induction with the selection (survivors, then no exploitation) and exact
  trembling-hand values UR_ref; also a seatable arena policy.
* :mod:`~dilemmax.redteam.statistics`: per-episode populations, per-(rule, context) means,
  bootstrap CIs over contexts, sign-flip and population x rule permutation tests, decisive rules,
  stakes profiles.
* :mod:`~dilemmax.redteam.gap`: IAG = UR_pop - UR_ref with its statistics and figures, as one
  report.
* :mod:`~dilemmax.redteam.figures`: heat maps, stakes profiles, rule-ranking bars (PNG + CSV/MD).
* :mod:`~dilemmax.redteam.ablations`: named vs anonymous (R = 1 and 3), neutral wording and
  goal frames against a matched control, for any population callable (LLM harness included).
* :mod:`~dilemmax.redteam.safety_case`: certified rule region Phi(c, P) and the structured
  safety case (Markdown + JSON).
* :mod:`~dilemmax.redteam.populations`: play a policy (scripted, reference, trained) on the grid.
* :mod:`~dilemmax.redteam.files`: population and reference ``.npz`` files read and checked
  before use (a one-line error naming the file and what was wrong).
* :mod:`~dilemmax.redteam.inputs`: the redteam commands' rates and files checked against each
  other before any work.
* :mod:`~dilemmax.redteam.api`: the commands as typed functions for Python (options objects in,
  typed results out).
* :mod:`~dilemmax.redteam.model_runs`: a command's run folder and transcript when a language
  model plays (checked before the model loads, locked while it runs, resumable).
* :mod:`~dilemmax.redteam.cli`: ``dilemmax redteam reference | play | gap | ablate | label |
  certify``, a thin layer over :mod:`~dilemmax.redteam.api`.

A typical run::

    dilemmax redteam reference --out ref.npz
    dilemmax redteam play --policy starve_then_cover --out stc.npz
    dilemmax redteam gap --reference ref.npz --population stc.npz --out gap/
    dilemmax redteam certify --population stc.npz --context 1,5,6:10 --out case

An LLM transcript enters as a :class:`~dilemmax.redteam.statistics.Population`: per-episode
metric arrays (the env's ``episode_metrics`` names) with each episode's rule and context index.
"""
