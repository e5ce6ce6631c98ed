"""The games as Inspect AI evaluations (the optional ``inspect`` extra).

``inspect eval dilemmax/<task> --model <provider>/<model>`` plays dilemmax episodes with any
model Inspect reaches. One sample is one episode; the solver (:mod:`dilemmax.evals.solver`)
drives the same JAX env, key schedule, text protocol and parser as ``dilemmax play``, so the
same replies give the same actions and metrics; the scorer (:mod:`dilemmax.evals.scoring`)
reports the game's own metrics with Inspect's mean and standard error. The tasks
(:mod:`dilemmax.evals.tasks`, registered in :mod:`dilemmax.evals._registry`) are built from the
same :class:`~dilemmax.experiments.design.Plan` parts that ``dilemmax experiment`` plays.

Every module here imports ``inspect_ai`` at its top: this package is the extra, and nothing
below it in the layers (``import dilemmax`` included) imports it.
"""
