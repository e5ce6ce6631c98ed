"""The consequence-allocation (IABench-CA) paper's designs (filled in as they land)."""

DESIGNS: tuple = ()
