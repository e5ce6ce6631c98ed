"""OpenCleanup (OpenSocialJax): a public-goods dilemma with hidden tool recipes.

``dilemmax.make("open_cleanup")`` builds :class:`~dilemmax.envs.open_cleanup.env.OpenCleanupEnv`.
Modules: ``constants`` (codes and numbers), ``types`` (state, configuration, layout, rule),
``generator`` (layout and rule pools, configurations), ``dynamics`` (the parts of a step),
``observation``, ``metrics``, ``policies``, ``rendering``; the text protocol: ``text`` (the
:class:`~dilemmax.envs.osj.protocol.OSJProtocol` subclass), ``view_text`` (state -> text),
``ledger`` (the typed per-agent memory) and ``prompts/`` (the system prompt files).
"""
