"""Fine-tuning language models for the moral-hazard game (paper Appendix B).

- :mod:`~dilemmax.finetune.datasets`: the scripted cooperative teacher's decisions over the
  condition grid, rendered with the prompts a playing model sees (reproducible, split by episode);
- :mod:`~dilemmax.finetune.rewards`: the RLOO reward (format, rationale structure, target match);
- :mod:`~dilemmax.finetune.sft`, :mod:`~dilemmax.finetune.rloo`: LoRA SFT and RLOO through TRL;
- :mod:`~dilemmax.finetune.gepa`: prompt optimisation against R_game (optional ``gepa`` extra);
- :mod:`~dilemmax.finetune.evaluate`: base vs adapters on the 15-condition grid (Table 3 form);
- :mod:`~dilemmax.finetune.cli`: ``dilemmax finetune ...``.

Only :mod:`datasets` and :mod:`rewards` import without torch; the trainers import TRL lazily.
"""
