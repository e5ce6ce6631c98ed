"""The consequence-allocation threshold game (IABench-CA): env id ``consequence``.

A whole sweep (228 contexts x 5 rules x replications) is one compiled, vmapped call::

    import jax, dilemmax
    from dilemmax.envs.consequence import metrics
    from dilemmax.envs.consequence.generator import context_grid, cross_rules
    from dilemmax.envs.rollout import run_episodes

    env = dilemmax.make("consequence")
    configs = cross_rules(context_grid(total=12, num_agents=3))       # 1140 configurations
    policy = env.scripted_policies()["starve_then_cover"]
    _, m = run_episodes(env, policy, jax.random.key(0), 4, configs=configs)   # [1140, 4]
    per = metrics.per_rule_context(m)                                  # [5 rules, 228 contexts]
    safest, worst = metrics.decisive_rules(per["fatality"])

``generator.make_config(resources=(1, 5, 6), threshold=10, rule="RP")`` builds one configuration
(the paper's canonical red-team instance); ``env.text_protocol(clause=..., goal=...)`` gives the
prompt an agent reads and the parser of its reply.
"""

from dilemmax.envs.game_declaration import lazy_exports

# The exports are imported on first use: reading the game's declaration (its declaration.py,
# which imports this package first) imports none of the game's code.
__getattr__ = lazy_exports(
    __name__,
    {
        "ConsequenceEnv": "env",
        "SCRIPTED_POLICIES": "policies",
        "ConsequenceText": "text",
        "ConsequenceConfig": "types",
        "ConsequenceState": "types",
    },
)

# Every game folder exports the same five names (tests/test_game_layout.py); everything else is
# imported from its module (generator, metrics, policies, ...).
__all__ = [
    "SCRIPTED_POLICIES",
    "ConsequenceConfig",
    "ConsequenceEnv",
    "ConsequenceState",
    "ConsequenceText",
]
