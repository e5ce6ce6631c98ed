"""OpenCleanup (OpenSocialJax): a public-goods dilemma with hidden tool recipes.

``dilemmax.make("open_cleanup")`` builds :class:`~dilemmax.envs.open_cleanup.env.OpenCleanupEnv`.
Modules: ``constants`` (codes and numbers), ``types`` (state, configuration, layout, rule),
``generator`` (layout and rule pools, configurations), ``dynamics`` (the parts of a step),
``observation``, ``metrics``, ``policies``, ``text``, ``rendering``.
"""
