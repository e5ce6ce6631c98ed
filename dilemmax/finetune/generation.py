"""How fine-tuning's commands sample a model unless told otherwise, each set declared once as a
:class:`~dilemmax.llm.config.GenerateConfig` (the paper's Appendix B).

The commands' flags are made from these (:func:`dilemmax.llm.cli.add_model_arguments` with the
config as the defaults), and the Python functions and settings take them as their defaults:

- :data:`RLOO_GENERATE`: RLOO's sampling (K completions of at most 128 tokens at temperature
  1.0, top-p 1.0), which ``finetune rloo`` trains with and ``finetune reward`` scores with, so a
  reward measures what RLOO optimised;
- :data:`EVALUATE_GENERATE`: ``finetune evaluate``'s greedy replies of at most 128 tokens (a move
  line is short, and the paper scores greedy replies);
- :data:`GEPA_GENERATE`: GEPA's task and reflection models, sampled at temperature 1.0 with room
  for a reflection (512 tokens).
"""

from __future__ import annotations

from dilemmax.llm.config import GenerateConfig

RLOO_GENERATE = GenerateConfig(max_tokens=128, temperature=1.0, top_p=1.0)
EVALUATE_GENERATE = GenerateConfig(max_tokens=128, temperature=0.0)
GEPA_GENERATE = GenerateConfig(max_tokens=512, temperature=1.0)
