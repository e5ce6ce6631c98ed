"""``python -m dilemmax``: the ``dilemmax`` command (``accelerate launch -m dilemmax`` runs it)."""

from dilemmax.cli import main

raise SystemExit(main())
