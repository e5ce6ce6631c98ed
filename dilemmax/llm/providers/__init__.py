"""The model providers dilemmax ships, one module each: ``openai``, ``inspect`` and ``hf``.

A provider is everything one kind of model seat needs that no other kind shares: its options
and their ranges, its target's form, how its client is built from the seat's options over the
run's :class:`~dilemmax.llm.config.GenerateConfig`, which key variable it reads and what it
checks before any call, and what decides its replies (the response cache's key). It is declared
as a :class:`~dilemmax.llm.seats.ModelProvider` and made a seat kind by
:func:`~dilemmax.llm.seats.model_seat_kind`, named by an entry point of the ``dilemmax.seats``
group::

    [project.entry-points."dilemmax.seats"]
    openai = "dilemmax.llm.providers.openai:SEAT"

A provider of another package is written the same way, in its own package: nothing in dilemmax
names it. :mod:`dilemmax.llm.providers.api_seat` holds what the providers of a model behind an
API share (their options, settings, key check and reply identity).
"""
