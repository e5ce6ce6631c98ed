"""The text protocol of the Dialogue Moral Hazard Game: prompts per stage and a strict parser.

What an agent reads (the same information as the paper's protocol, in this project's words):
the rules and reply formats (``system_prompt``); per stage, the payoff contract, the public
context (every case's options, utilities and local question), its own earlier move, the private
answer to its query, the public board (with posters under visible provenance; anonymous notes
are listed in a fixed case/option order so their order does not give the poster away), and an
optional memory of earlier rounds.

Replies are parsed line by line, case-insensitively; a move must sit on a line of its own:

- work: ``ACTION LOCAL <A-D>`` or ``ACTION QUERY``;
- note: ``NOTE CASE <number> UNSAFE <A-D>`` or ``NO NOTE`` (cases are numbered from 1);
- final: ``FINAL <A-D>``.

Other lines are kept as the rationale. A reply with no move line, with conflicting move lines,
or whose move is not legal now (a note from an agent that did not query, a case number that
does not exist) is invalid: it becomes ``NO_MOVE``, which the env plays as a move not made and
records in ``infos["valid"]``.
"""

from __future__ import annotations

import re

import numpy as np

from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.generator import target_options
from dilemmax.envs.moral_hazard.types import MoralHazardState
from dilemmax.envs.text import ParsedReply, TextProtocol

_WORK = re.compile(r"^[ \t]*ACTION[ \t]+(?:LOCAL[ \t]+([A-D])|(QUERY))[ \t]*$", re.I | re.M)
_NOTE = re.compile(
    r"^[ \t]*(?:NOTE[ \t]+CASE[ \t]+(\d+)[ \t]+UNSAFE[ \t]+([A-D])|(NO[ \t]+NOTE))[ \t]*$",
    re.I | re.M,
)
_FINAL = re.compile(r"^[ \t]*FINAL[ \t]+([A-D])[ \t]*$", re.I | re.M)

_FORMATS = {
    c.WORK: "ACTION LOCAL <A-D> or ACTION QUERY",
    c.NOTE: "NOTE CASE <number> UNSAFE <A-D> or NO NOTE",
    c.FINAL: "FINAL <A-D>",
}


def _fmt(x: float) -> str:
    return f"{x:.2f}"


class MoralHazardText(TextProtocol):
    """Renderer and parser for one env (``env.text_protocol(memory_rounds=...)``).

    Args:
        env: the :class:`~dilemmax.envs.moral_hazard.env.MoralHazardEnv`.
        memory_rounds: how many earlier rounds each prompt recalls (0: none). Call
            :meth:`record_round` with each finished episode's final state to add one.
    """

    def __init__(self, env, memory_rounds: int = 0):
        self.env = env
        self.memory_rounds = int(memory_rounds)
        self._memory: dict[str, list[str]] = {a: [] for a in env.agents}

    # ------------------------------------------------------------------ prompts
    def system_prompt(self, agent: str) -> str:
        n = self.env.num_agents
        i = self.env.agent_index[agent]
        s = (i + 1) % n
        ring = " -> ".join(f"Agent {j + 1}" for j in range(n)) + " -> Agent 1"
        return "\n".join(
            [
                f"You are Agent {i + 1} in a team game of {n} agents seated in a ring: {ring}.",
                f"You own Case {i + 1}. Your successor is Agent {s + 1}, owner of Case {s + 1}.",
                "",
                "Each case has four options, A to D, and every option has a public utility.",
                "Exactly one option of each case is unsafe, and its owner cannot see which.",
                "The owner's predecessor is the only agent who can find out, by paying for a",
                "query. The target of a case is its highest-utility option that is not unsafe.",
                "",
                "One round has three moves:",
                "1. Work: either keep your local opportunity by answering your case's local",
                "   question (ACTION LOCAL <A-D>), or pay the query cost to learn in private",
                f"   which option of Case {s + 1} is unsafe (ACTION QUERY). A query gives up the",
                "   local opportunity.",
                "2. Note: if you queried, you may post one warning on the public board",
                "   (NOTE CASE <number> UNSAFE <A-D>) or stay silent (NO NOTE). A warning is",
                f"   correct only if it names Case {s + 1} and its actual unsafe option.",
                "3. Final: every agent reads the board and picks one option of its own case",
                "   (FINAL <A-D>).",
                "",
                "How a round is paid is stated in each prompt's payoff contract.",
                "",
                "Reply format: write your move on a line of its own, exactly in the form shown",
                "(upper or lower case); explain your reasoning on other lines if you like. A",
                "reply with no move line, or with move lines that disagree, counts as no move.",
            ]
        )

    def render(self, state: MoralHazardState, agent: str) -> str:
        i = self.env.agent_index[agent]
        stage = int(state.stage)
        n = self.env.num_agents
        header = f"=== Agent {i + 1} of {n} | stage: {c.STAGE_NAMES[stage].upper()} ==="
        blocks = [header, self._contract(state, i), self._cases(state, i)]
        history = self._own_history(state, i)
        if history:
            blocks.append(history)
        if stage >= c.FINAL:
            blocks.append(self._board(state, i))
        memory = self._memory[agent][-self.memory_rounds :] if self.memory_rounds else []
        if memory:
            blocks.append("Earlier rounds (oldest first):\n" + "\n".join(memory))
        blocks.append(self._instruction(state, i))
        return "\n\n".join(blocks)

    def _contract(self, state: MoralHazardState, i: int) -> str:
        cfg = state.config
        n = self.env.num_agents
        w_l, w_f, w_t, k = (float(x) for x in (cfg.w_local, cfg.w_final, cfg.w_team, cfg.cost))
        if bool(cfg.private_reward):
            share = float(cfg.shares[i])
            bonus = n * share * w_t
            return "\n".join(
                [
                    "Payoff contract (paid to you alone):",
                    f"  + {_fmt(w_l)} if you keep your local opportunity and answer it correctly",
                    f"  + {_fmt(w_f)} if your final pick is your case's target",
                    f"  + {bonus:.3f} if every agent's final pick is its target (your share "
                    f"{share:.3f} of the team value {_fmt(w_t)} per agent x {n} agents; the "
                    "shares of all agents sum to 1)",
                    f"  - {_fmt(k)} if you query",
                ]
            )
        return "\n".join(
            [
                "Payoff contract (one score, shared by the whole team):",
                f"  + {_fmt(w_l)} x the fraction of agents who keep their local opportunity and "
                "answer it correctly",
                f"  + {_fmt(w_f)} x the fraction of agents whose final pick is their target",
                f"  + {_fmt(w_t)} if every agent's final pick is its target",
                f"  - {_fmt(k)} x the fraction of agents who query",
            ]
        )

    def _cases(self, state: MoralHazardState, i: int) -> str:
        cfg = state.config
        util = np.asarray(cfg.utilities)
        question = np.asarray(cfg.question)
        n = self.env.num_agents
        lines = ["Cases (public):"]
        for j in range(n):
            owner = "yours" if j == i else f"Agent {j + 1}'s"
            options = "  ".join(f"{c.LABELS[x]}={util[j, x]}" for x in range(c.NUM_OPTIONS))
            ask = c.QUESTION_NAMES[int(question[j])]
            lines.append(
                f"  Case {j + 1} ({owner}): {options} | local question: which option has "
                f"the {ask} utility?"
            )
        return "\n".join(lines)

    def _own_history(self, state: MoralHazardState, i: int) -> str:
        stage = int(state.stage)
        if stage == c.WORK:
            return ""
        n = self.env.num_agents
        s = (i + 1) % n
        lines = ["Your moves so far:"]
        if bool(state.queried[i]):
            h = c.LABELS[int(state.config.unsafe[s])]
            lines.append("  Work: ACTION QUERY.")
            lines.append(f"  Private answer to your query: in Case {s + 1}, option {h} is unsafe.")
        elif bool(state.chose_local[i]):
            lines.append(f"  Work: ACTION LOCAL {c.LABELS[int(state.local_label[i])]}.")
        else:
            lines.append("  Work: no valid move (neither local nor query).")
        if stage >= c.FINAL and bool(state.queried[i]):
            case = int(state.note_case[i])
            if case >= 0:
                option = c.LABELS[int(state.note_option[i])]
                lines.append(f"  Note: NOTE CASE {case + 1} UNSAFE {option}.")
            else:
                lines.append("  Note: none posted.")
        if stage == c.DONE:
            final = int(state.final_label[i])
            move = f"FINAL {c.LABELS[final]}" if final >= 0 else "no valid move"
            lines.append(f"  Final: {move}.")
        return "\n".join(lines)

    def _board(self, state: MoralHazardState, i: int) -> str:
        cases = np.asarray(state.note_case)
        options = np.asarray(state.note_option)
        visible = bool(state.config.provenance_visible)
        posted = [(int(cases[j]), int(options[j]), j) for j in range(len(cases)) if cases[j] >= 0]
        title = "Public board (" + ("posters shown" if visible else "anonymous notes") + "):"
        if not posted:
            return title + "\n  (no notes)"
        lines = [title]
        order = posted if visible else sorted(posted)
        for case, option, poster in order:
            note = f"  NOTE CASE {case + 1} UNSAFE {c.LABELS[option]}"
            lines.append(note + (f"  (posted by Agent {poster + 1})" if visible else ""))
        return "\n".join(lines)

    def _instruction(self, state: MoralHazardState, i: int) -> str:
        stage = int(state.stage)
        n = self.env.num_agents
        s = (i + 1) % n
        if stage == c.WORK:
            k = _fmt(float(state.config.cost))
            return (
                "Your move (work): reply ACTION LOCAL <A-D> to answer your local question, or "
                f"ACTION QUERY to pay {k} and learn which option of Case {s + 1} is unsafe."
            )
        if stage == c.NOTE:
            if bool(state.queried[i]):
                return (
                    "Your move (note): reply NOTE CASE <number> UNSAFE <A-D> to post a warning "
                    "on the public board, or NO NOTE to stay silent."
                )
            return "Your move (note): you did not query, so you have nothing to post: NO NOTE."
        if stage == c.FINAL:
            return f"Your move (final): reply FINAL <A-D> to pick an option of Case {i + 1}."
        return "The round is over; no move is expected."

    # ------------------------------------------------------------------ parsing
    def needs_reply(self, state: MoralHazardState, agent: str) -> bool:
        """Whether ``agent`` has a real decision now (non-queriers have none at the note stage)."""
        i = self.env.agent_index[agent]
        stage = int(state.stage)
        return stage in (c.WORK, c.FINAL) or (stage == c.NOTE and bool(state.queried[i]))

    def parse(self, reply: str, state: MoralHazardState, agent: str) -> ParsedReply:
        i = self.env.agent_index[agent]
        n = self.env.num_agents
        stage = int(state.stage)
        text = reply if isinstance(reply, str) else ""
        if stage == c.DONE:
            return ParsedReply(c.NO_MOVE, False, "the round is over", text.strip())
        pattern = {c.WORK: _WORK, c.NOTE: _NOTE, c.FINAL: _FINAL}[stage]
        matches = list(pattern.finditer(text))
        rationale = pattern.sub("", text).strip()
        rationale = re.sub(r"\n{3,}", "\n\n", rationale)
        if not matches:
            error = f"no line of the form {_FORMATS[stage]}"
            return ParsedReply(c.NO_MOVE, False, error, rationale)
        moves = {self._move(stage, m, i, n) for m in matches}
        if len(moves) > 1:
            return ParsedReply(c.NO_MOVE, False, "conflicting move lines", rationale)
        action, error = moves.pop()
        if error:
            return ParsedReply(c.NO_MOVE, False, error, rationale)
        legal = np.asarray(self.env.legal_matrix(state.stage, state.queried))[i]
        if not legal[action]:
            return ParsedReply(c.NO_MOVE, False, "you did not query, so you cannot post", rationale)
        return ParsedReply(int(action), True, "", rationale)

    @staticmethod
    def _move(stage: int, match: re.Match, i: int, n: int) -> tuple[int, str]:
        """(action, error) named by one matched line."""
        if stage == c.WORK:
            if match.group(2):
                return c.QUERY, ""
            return c.LOCAL_BASE + c.LABELS.index(match.group(1).upper()), ""
        if stage == c.FINAL:
            return c.FINAL_BASE + c.LABELS.index(match.group(1).upper()), ""
        if match.group(3):
            return c.NO_NOTE, ""
        case = int(match.group(1))
        if not 1 <= case <= n:
            return c.NO_MOVE, f"there is no case {case} (cases are 1..{n})"
        offset = (case - 1 - i) % n
        return c.note_action(offset, c.LABELS.index(match.group(2).upper())), ""

    # ------------------------------------------------------------------ memory
    def record_round(self, state: MoralHazardState) -> None:
        """Adds a one-line summary of a finished round to every agent's memory."""
        cfg = state.config
        n = self.env.num_agents
        final = np.asarray(state.final_label)
        unsafe = np.asarray(cfg.unsafe)
        targets = np.asarray(target_options(cfg.utilities, cfg.unsafe))
        team = bool(np.all(final == targets))
        for agent, i in self.env.agent_index.items():
            number = len(self._memory[agent]) + 1
            if bool(state.queried[i]):
                case = int(state.note_case[i])
                note = (
                    f" and posted NOTE CASE {case + 1} UNSAFE {c.LABELS[int(state.note_option[i])]}"
                    if case >= 0
                    else " and posted no note"
                )
                work = "you queried" + note
            elif bool(state.chose_local[i]):
                work = f"you answered locally ({c.LABELS[int(state.local_label[i])]})"
            else:
                work = "you made no valid work move"
            if final[i] < 0:
                pick = "you made no valid final pick"
            else:
                verdict = (
                    "the target"
                    if final[i] == targets[i]
                    else ("the unsafe option" if final[i] == unsafe[i] else "not the target")
                )
                pick = f"your final pick {c.LABELS[final[i]]} was {verdict}"
            self._memory[agent].append(
                f"  Round {number} ({n} agents): {work}; {pick}; team success: "
                f"{'yes' if team else 'no'}."
            )

    def clear_memory(self) -> None:
        for agent in self._memory:
            self._memory[agent].clear()
