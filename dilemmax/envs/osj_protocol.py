"""The OpenSocialJax agent protocol both grid games share: now the :mod:`dilemmax.envs.osj`
package (the skeleton, memory, blocks, reply parsers, view helpers and prompt files).

This module keeps the names it used to define importable from here.
"""

from dilemmax.envs.osj.blocks import (
    EARLIER_EVENTS,
    actions_block,
    earlier_trials_block,
    last_step_block,
    notes_block,
    plan_block,
    recent_block,
    reflect_prompt,
)
from dilemmax.envs.osj.memory import (
    EARLIER_GOALS,
    MAX_NOTES,
    RECENT_STEPS,
    AgentMemory,
    Goal,
    Sighting,
    apply_note,
    close_plan_at_trial_end,
    end_trial_notes,
    open_next_trial,
    remember_reply,
    start_trial_notes,
    update_plan,
)
from dilemmax.envs.osj.protocol import OSJProtocol
from dilemmax.envs.osj.replies import (
    GOAL_WHY_CHARS,
    MAX_LESSONS,
    NOTE_CHARS,
    NOTE_OPS,
    REFLECT_SCHEMA,
    WHY_CHARS,
    explore_share,
    parse_reflect_reply,
    parse_reflection,
    parse_step_reply,
    reply_schema,
)
from dilemmax.envs.osj.view import (
    DIRECTION_DELTAS,
    FACING_NAMES,
    agent_letter,
    beam_cells,
    manhattan,
    view_cells,
)

__all__ = [
    "DIRECTION_DELTAS", "EARLIER_EVENTS", "EARLIER_GOALS", "FACING_NAMES", "GOAL_WHY_CHARS",
    "MAX_LESSONS", "MAX_NOTES", "NOTE_CHARS", "NOTE_OPS", "RECENT_STEPS", "REFLECT_SCHEMA",
    "WHY_CHARS", "AgentMemory", "Goal", "OSJProtocol", "Sighting", "actions_block", "agent_letter",
    "apply_note", "beam_cells", "close_plan_at_trial_end", "earlier_trials_block",
    "end_trial_notes", "explore_share", "last_step_block", "manhattan", "notes_block",
    "open_next_trial", "parse_reflect_reply", "parse_reflection", "parse_step_reply", "plan_block",
    "recent_block", "reflect_prompt", "remember_reply", "reply_schema", "start_trial_notes",
    "update_plan", "view_cells",
]  # fmt: skip
