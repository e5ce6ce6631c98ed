"""dilemmax-commons-plugin: a plug-in of dilemmax written against its public API only.

The suite's evidence that a game and a model provider can live outside dilemmax (issue 46, and
docs/plugins.md, which walks through this package). It holds:

- :mod:`.shared_well`: the Shared Well, a two-to-four-agent common-pool game, laid out as
  dilemmax's own games are (``constants``, ``types``, ``generator``, ``env``, ``metrics``,
  ``policies``, ``text``, ``rendering``);
- :mod:`.provider`: the ``localtest:`` seat kind, a small client of an OpenAI-compatible chat
  server (dilemmax's test server on 127.0.0.1 in the suite).

Nothing in dilemmax names either: they are found through the package's entry points
(``"dilemmax.games"`` and ``"dilemmax.seats"`` in its ``entry_points.txt``), as a package a user
installs with pip would be.
"""
