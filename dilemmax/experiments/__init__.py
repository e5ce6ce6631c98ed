"""The papers' experiments as named designs, run by ``dilemmax experiment <game>/<design>``."""
