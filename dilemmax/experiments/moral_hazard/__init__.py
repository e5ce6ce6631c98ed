"""The moral-hazard paper's designs (filled in as they land)."""

DESIGNS: tuple = ()
