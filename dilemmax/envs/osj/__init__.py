"""The OpenSocialJax agent protocol, the parts both grid games share (paper, Appendix A).

Every step an agent gets its game's system prompt and one user message built from its own
memory and view: RULES YOU KNOW (kept by the harness from the agent's own observations), YOUR
NOTES (written by the agent, one edit per step), EARLIER TRIALS (one summary per finished trial),
OTHER AGENTS (only as far as they were in view), YOUR PLAN (current and earlier goals), LAST STEP
and RECENT STEPS, NOW (position, hand or status, the 11 x 11 view) and ACTIONS NOW. The agent
replies with one JSON object::

    {"why_this_move": "...", "mode": "...",
     "goal": {"type": "...", "cell": [row, col], "why": "..."},
     "note": {"op": "none" | "add" | "replace" | "delete", "id": 0, "text": ""},
     "action": <integer from ACTIONS NOW>}

When a trial ends (and another follows) the agent is asked to rewrite its notes into a short
list of lessons and plans (a ``kind="reflect"`` prompt); only that list is carried into the next
trial, and a failed rewrite leaves the agent without notes. An invalid reply means "stay". A
frozen agent is not called. Protocol options: ``role`` (item 1.5 of the system prompt, the
Schelling-diagram runs) and ``reveal`` (the hidden rules told from the first turn, under HIDDEN
RULES; off by default).

Modules: ``protocol`` (the skeleton a game subclasses), ``memory`` (the shared memory and its
rules), ``blocks`` (the blocks both games show alike, the trial-end request), ``replies`` (the
reply schema and parsers, :func:`explore_share`), ``view`` (window and beam cells, agent
letters), ``prompts`` (the system prompts, read from each game's ``prompts/`` folder).
"""

from dilemmax.envs.osj.memory import AgentMemory, Goal, Sighting
from dilemmax.envs.osj.protocol import OSJProtocol
from dilemmax.envs.osj.replies import explore_share, parse_reflection, parse_step_reply
from dilemmax.envs.osj.view import agent_letter

__all__ = [
    "AgentMemory",
    "Goal",
    "OSJProtocol",
    "Sighting",
    "agent_letter",
    "explore_share",
    "parse_reflection",
    "parse_step_reply",
]
