"""OpenSocialJax's language-model designs for open_cleanup and open_harvest (filled in as they land)."""

DESIGNS: tuple = ()
