"""Every design's name, paper section, one-line summary and model calls at the paper's sizes,
without importing any design.

``dilemmax experiment --list`` and ``dilemmax experiment --help`` read this module only: the
designs themselves import their analysis stacks (JAX configurations, the red-teaming statistics
and reference, matplotlib's helpers), which took the listing from about the time of ``dilemmax
list`` to minutes. Each design takes its section and summary from here (:func:`described`), so
they are written once; ``test_catalogue.py`` checks that every registered design has its entry
and that each entry's call count is what the design's plan at its default options gives.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One design as ``--list`` shows it.

    Attributes:
        name: ``<game>/<design>``.
        section: the paper and section it reproduces.
        summary: one line on what it plays and reports.
        calls: model calls of its plan at the paper's sizes (the plan's upper bound).
        calls_note: said beside the count (what it leaves out, or what it depends on).
    """

    name: str
    section: str
    summary: str
    calls: int
    calls_note: str = ""

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of its calls: the calls times its game's mean prompt
        (:data:`PROMPT_TOKENS_PER_CALL`); ``--plan`` counts a run's own."""
        return self.calls * PROMPT_TOKENS_PER_CALL[self.name.split("/")[0]]


# Mean prompt tokens of one call of each game's default protocol, as characters / 4, measured
# on stand-in runs at the papers' sizes (an open-world call's prompt grows over a seed, from
# about 2,000 to 4,100 tokens). Only --list reads these: a run's plan renders its own prompts.
PROMPT_TOKENS_PER_CALL = {
    "consequence": 351,
    "moral_hazard": 522,
    "open_cleanup": 3234,
    "open_harvest": 3635,
}


# OpenSocialJax's sizes: 5 agents, 5 trials of at most 400 steps, 3 seeds; every agent is asked
# every step, plus one rewrite per agent between trials (open_grid.common.calls_per_episode).
_OSJ_EPISODE = 5 * (5 * 400 + 5 - 1)
_OSJ_SEEDS = 3


def _open_grid(game: str) -> tuple[Entry, ...]:
    tables = "Tables 3 and 4" if game == "open_cleanup" else "Table 5"
    return (
        Entry(
            f"{game}/homogeneous",
            f"OpenSocialJax Section 4.2, Appendix C.3-C.5 ({tables})",
            "five copies of one model on every seed; one table row per model",
            _OSJ_SEEDS * _OSJ_EPISODE,
        ),
        Entry(
            f"{game}/arena",
            "OpenSocialJax Section 4.4 (mixed-model arena, Figure 6)",
            "one model per seat (--seat agent_i=<spec>, each with its own endpoint), seats "
            "rotated across seeds",
            _OSJ_SEEDS * _OSJ_EPISODE,
            "needs a model in every seat",
        ),
        Entry(
            f"{game}/schelling",
            "OpenSocialJax Appendix C.1 (Schelling diagrams, Figure 7)",
            "k = 0..5 cooperators among five copies of one model; C(x), D(x), SSD conditions",
            6 * _OSJ_SEEDS * _OSJ_EPISODE,
        ),
        Entry(
            f"{game}/reveal",
            "OpenSocialJax reference harness: hidden rules revealed (upper bound)",
            "the homogeneous team with the hidden rules hidden and revealed, same seeds",
            2 * _OSJ_SEEDS * _OSJ_EPISODE,
        ),
    )


ENTRIES: tuple[Entry, ...] = (
    Entry(
        "moral_hazard/grid",
        "moral-hazard paper, Section 3.1, Table 2, Figure 4 (Appendix E.1 random control)",
        "the 15 one-at-a-time conditions, 3 replicates x 15 episodes, model in every seat, "
        "with the random control: Table 2's row and Figure 4",
        4455,
    ),
    Entry(
        "moral_hazard/sweeps",
        "moral-hazard paper, Section 2.2, Figure 2, Appendix D.1 (Tables 6 and 7)",
        "autonomous sweeps of k (0..0.40), w_T (7 values) and n (2..9), 3 replicates x 15 "
        "episodes per condition: Tables 6-7 and Figure 2",
        10260,
    ),
    Entry(
        "moral_hazard/isolation",
        "moral-hazard paper, Section 2.2, Figure 3, Appendix D.2 (Table 8)",
        "focal model vs scripted partners, 9 costs x private shares (67 cells) x 45 "
        "decisions: 50% boundaries vs alpha*(k), boundary_mae; plus 16 probe calls per cell "
        "(1,072 at the paper's size, not in the call count)",
        9045,
        "and 1,072 probe calls",
    ),
    Entry(
        "consequence/grid",
        "Institutional red-teaming, Sections 5.1-5.2 and 12 (Tables 2, 3)",
        "228 contexts x 5 rules, 4 replicates, self-play; IAG, raw outcomes, rationales",
        34656,
    ),
    Entry(
        "consequence/ablations",
        "Institutional red-teaming, Section 5.3 and Appendix 12 (Table 4)",
        "anonymous (R=1, R=3), neutral, cooperative / survival frames vs named control",
        4896,
    ),
    *_open_grid("open_cleanup"),
    *_open_grid("open_harvest"),
)


def entries() -> dict[str, Entry]:
    """name -> entry, in the papers' order."""
    return {entry.name: entry for entry in ENTRIES}


def described(name: str) -> dict[str, str]:
    """The ``section`` and ``summary`` of design ``name`` (for its ``Design``)."""
    entry = entries()[name]
    return {"section": entry.section, "summary": entry.summary}


def listing_line(entry: Entry) -> str:
    """The design's line in ``dilemmax experiment --list``."""
    note = f" ({entry.calls_note})" if entry.calls_note else ""
    tokens = f"~{entry.prompt_tokens / 1e6:,.1f}M prompt tokens"
    return (
        f"{entry.name:28s} {entry.calls:>9,d} calls, {tokens:>24s}{note}  {entry.section}: "
        f"{entry.summary}"
    )
