"""``python -m dilemmax``: the ``dilemmax`` command (what ``accelerate launch -m dilemmax`` runs)."""

from dilemmax.cli import main

raise SystemExit(main())
