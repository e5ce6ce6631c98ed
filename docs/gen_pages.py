"""Writes the generated pages of the docs site from the code: run ``python docs/gen_pages.py``.

- ``docs/games/<game>.md``: one page per registered game, from its env module's and class's
  docstrings and its declared options (every option with its type, default, allowed values and
  meaning), with the shapes of what ``reset`` and ``step`` return (traced with
  ``jax.eval_shape``, so they are the code's own), its scripted policies, its paper, and a
  rendered frame (``docs/games/<game>.png``, grid games) or the first prompt a language model
  reads (text games);
- ``docs/cli.md``: every ``dilemmax`` command's ``--help``, from the argparse parsers;
- ``docs/model_options.md``: the model options, from ``GenerateConfig``'s fields;
- ``docs/training.md``'s table of config fields (the rest of that page is written by hand), from
  ``TrainConfig``'s fields and the games' ``training_defaults``;
- ``docs/llms.txt``: the site's pages with a line each, for readers that are language models.

The pages are committed, so they read on the repository's web view too; ``tests/test_docs.py``
fails when one differs from what this script writes now (``--check`` does the same here).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import io
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
GAMES = DOCS / "games"


def documented_games() -> list[str]:
    """The registered games that declare a docs page (``GameDeclaration.docs_page``), a
    plug-in's included: each has ``games/<id>.md`` on the site, under "Games" in its navigation."""
    from dilemmax.envs.registry import declaration, registered_envs

    return [g for g in registered_envs() if declaration(g).docs_page]


def own_games() -> list[str]:
    """The documented games dilemmax ships: their pages are committed under docs/games/ (a
    plug-in's page is generated as the site is built, docs/hooks.py)."""
    from dilemmax.envs.registry import env_spec

    return [g for g in documented_games() if env_spec(g).entry_point.startswith("dilemmax.")]


def with_games(nav: list, games: list[str] | None = None) -> list:
    """mkdocs.yml's navigation with a page for each of ``games`` (default: every documented
    game) after "The games" (games/index.md), in registration order: the games' entries are not
    written by hand."""
    games = documented_games() if games is None else games
    out = []
    for entry in nav:
        ((section, value),) = entry.items()
        if isinstance(value, list) and {"The games": "games/index.md"} in value:
            at = value.index({"The games": "games/index.md"}) + 1
            entries = [{g: f"games/{g}.md"} for g in games]
            value = [*value[:at], *entries, *value[at:]]
        out.append({section: value})
    return out


# ----------------------------------------------------------------------------- docstrings
_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc):`~?([^`]+)`")
_LITERAL = re.compile(r"``(.+?)``")


def rst_to_markdown(text: str) -> str:
    """The reStructuredText of the docstrings as markdown: roles and double-backquoted
    literals as code, simple tables (``====  ====``) as pipe tables."""
    text = _ROLE.sub(_role, text)
    text = _LITERAL.sub(r"`\1`", text)
    return _tables(text)


def _role(match: re.Match) -> str:
    """``:func:`~a.b.c``` -> ```c```, ``:mod:`a.b``` -> ```a.b```."""
    target = match.group(1)
    return f"`{target.split('.')[-1]}`" if "`~" in match.group(0) else f"`{target}`"


def _tables(text: str) -> str:
    lines, out, i = text.split("\n"), [], 0
    border = re.compile(r"^=+( +=+)+\s*$")
    while i < len(lines):
        if not border.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        starts = [m.start() for m in re.finditer(r"=+", lines[i])]
        rows, i = [], i + 1
        while i < len(lines) and not border.match(lines[i]):
            rows.append(lines[i])
            i += 1
        i += 1  # the closing border, or the border under a one-line header
        header = None
        if len(rows) == 1:
            header, rows = rows[0], []
            while i < len(lines) and not border.match(lines[i]):
                rows.append(lines[i])
                i += 1
            i += 1
        out.extend(_pipe_table(header, rows, starts))
    return "\n".join(out)


def _cells(line: str, starts: list[int]) -> list[str]:
    bounds = [*starts[1:], None]
    return [line[a:b].strip() for a, b in zip(starts, bounds, strict=True)]


def _pipe_table(header: str | None, rows: list[str], starts: list[int]) -> list[str]:
    merged: list[list[str]] = []
    for line in rows:
        if not line.strip():
            continue
        cells = _cells(line, starts)
        if merged and not cells[0]:  # a continuation line: its text joins the row above
            for k, cell in enumerate(cells):
                if cell:
                    merged[-1][k] = f"{merged[-1][k]} {cell}".strip()
        else:
            merged.append(cells)
    head = _cells(header, starts) if header else [""] * len(starts)
    esc = lambda cell: cell.replace("|", "\\|")  # noqa: E731
    table = ["| " + " | ".join(esc(c) for c in head) + " |", "|" + " --- |" * len(starts)]
    table += ["| " + " | ".join(esc(c) for c in row) + " |" for row in merged]
    return ["", *table, ""]


# ----------------------------------------------------------------------------- a game's page
def _shape(leaf) -> str:
    shape = ", ".join(str(d) for d in leaf.shape)
    return f"{leaf.dtype}[{shape}]"


def _tree_rows(tree, prefix: str = "") -> Iterator[tuple[str, str]]:
    import jax

    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = "".join(_path_part(p) for p in path).lstrip(".")
        yield prefix + name, _shape(leaf)


def _path_part(part) -> str:
    if hasattr(part, "name"):  # a dataclass field
        return f".{part.name}"
    if hasattr(part, "key"):  # a dict key
        return f"[{part.key!r}]"
    return f"[{part.idx}]"


def _default_text(value) -> str:
    if value is inspect.Parameter.empty:
        return "required"
    return f"`{value!r}`"


def _first_paragraph(doc: str | None) -> str:
    text = inspect.cleandoc(doc or "").split("\n\n")[0]
    return " ".join(text.split())


def _policy_doc(policy) -> str:
    target = policy.func if isinstance(policy, functools.partial) else policy
    doc = getattr(target, "__doc__", None) if callable(target) else None
    if doc and type(target).__doc__ == doc and not inspect.isfunction(target):
        doc = type(target).__doc__
    return rst_to_markdown(_first_paragraph(doc)) or "(no docstring)"


def options_table(env_id: str) -> list[str]:
    """One row per constructor option, read from its declaration in the constructor's signature
    (``Annotated[type, Option(meaning, ...)]``): name, type, default, allowed values, meaning."""
    from dilemmax.envs.option_declaration import signature_options
    from dilemmax.envs.registry import env_spec

    env_cls = env_spec(env_id).load()
    rows = [
        "| option | type | default | allowed values | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, option in signature_options(env_cls.__init__).items():
        default = _default_text(option.default)
        sentence = option.doc.rstrip(".") + "." if option.doc else ""
        meaning = rst_to_markdown(sentence).replace("|", "\\|")
        allowed = option.spec.describe().replace("|", "\\|")
        rows.append(f"| `{name}` | {option.spec.kind} | {default} | {allowed} | {meaning} |")
    return rows


def _traced(env):
    """Shapes of one reset and one step of ``env`` (traced, not run)."""
    import jax
    import jax.numpy as jnp

    key = jax.random.key(0)
    obs, state = jax.eval_shape(env.reset, key)
    actions = {a: jnp.zeros((), jnp.int32) for a in env.agents}
    step = jax.eval_shape(env.step_env, key, state, actions)
    config = jax.eval_shape(env.sample_config, key)
    return obs, state, step, config


def _first_state(env):
    import jax

    return jax.jit(env.reset)(jax.random.key(0))


def frame_png(env, path: Path) -> None:
    """The first frame of an episode of ``env`` (seed 0), enlarged 3x, as a PNG."""
    import numpy as np
    from PIL import Image

    _, state = _first_state(env)
    pixels = np.asarray(env.render_rgb(state), dtype=np.uint8)
    image = Image.fromarray(pixels).resize(
        (pixels.shape[1] * 3, pixels.shape[0] * 3), Image.NEAREST
    )
    image.save(path, format="PNG", optimize=False)


def first_prompt(env) -> tuple[str, str]:
    """The system and user messages agent_0 reads at the start of an episode (seed 0)."""
    _, state = _first_state(env)
    protocol = env.text_protocol()
    agent = env.agents[0]
    prompt = protocol.turn(state, agent, protocol.new_memory(agent))
    return prompt.system, prompt.user


def _agents_text(env, env_cls) -> str:
    spec = env_cls.option_specs.get("num_agents")
    if spec is None:  # a game whose number of agents is fixed
        return str(env.num_agents)
    return f"{env.num_agents} by default (`num_agents`: {spec.describe()})"


def game_page(env_id: str, images: Path | None = GAMES) -> str:
    """The markdown of ``env_id``'s page; with ``images``, its frame is written there too."""
    import numpy as np

    import dilemmax
    from dilemmax.envs.metrics import axes_text
    from dilemmax.envs.registry import env_spec

    spec = env_spec(env_id)
    env_cls = spec.load()
    env = dilemmax.make(env_id)
    module = sys.modules[env_cls.__module__]
    # The class docstring without the Args: made from the option declarations (the table below).
    intro = (inspect.getdoc(env_cls) or "").partition("\nArgs:\n")[0].rstrip()
    intro = "\n".join(line for line in intro.split("\n") if not line.endswith(":"))
    obs, state, (_, _, rewards, dones, infos), config = _traced(env)
    agent = env.agents[0]
    space = env.observation_space(agent)
    declared = spec.declared
    paper = f"{declared.paper}: {declared.reproduces}" if declared.reproduces else declared.paper
    out = [
        f"# {env_id}",
        "",
        f"_{spec.summary}._",
        "",
        "<!-- Generated by docs/gen_pages.py from the code: edit the env's docstrings and its "
        "constructor's option declarations, not this page. -->",
        "",
        "| | |",
        "| --- | --- |",
        f"| id | `{env_id}` (this version: `{env_id}-v{env_cls.version}`; "
        "[versions](../versions.md)) |",
        f"| class | `{env_cls.__module__}.{env_cls.__name__}` |",
        f"| paper | {paper or 'none'} ([papers](../papers.md)) |",
        f"| agents | {_agents_text(env, env_cls)} |",
        f"| observation | `{np.dtype(space.dtype).name}{list(space.shape)}` per agent |",
        f"| actions | `Discrete({int(env.action_space(agent).n)})` per agent, with a legal-action "
        "mask (`env.action_mask(state)`) |",
        f"| episode | at most {env.max_steps} steps |",
        f"| render modes | {', '.join(f'`{m}`' for m in env.render_modes)} |",
        "",
        "## The game",
        "",
        rst_to_markdown(inspect.cleandoc(module.__doc__ or "")).split("\n", 1)[-1].strip(),
        "",
        rst_to_markdown(intro).strip(),
        "",
        "## Options",
        "",
        "Static options are keyword arguments of `dilemmax.make` (`--set name=value` on the "
        "command line, `env_kwargs.name=value` in a training config); each is checked against "
        "its allowed values before anything is built.",
        "",
        *options_table(env_id),
        "",
        "## What reset and step return",
        "",
        "Shapes with the default options, traced from the code (`n` agents on the agent axis). "
        "`obs, state = env.reset(key)`; "
        "`obs, state, rewards, dones, infos = env.step(key, state, actions)` "
        "(`step_env` is the same step without the automatic reset, and its `infos` are the "
        "game's full event infos listed here; `step` gives JaxMARL's layout unless "
        "`full_infos=True`).",
        "",
        "| value | dtype[shape] |",
        "| --- | --- |",
        *(f"| `obs[{a!r}]` | `{_shape(obs[a])}` |" for a in env.agents[:1]),
        *(f"| `rewards[{a!r}]` | `{_shape(rewards[a])}` |" for a in env.agents[:1]),
        *(f"| `dones[{a!r}]` | `{_shape(dones[a])}` |" for a in [*env.agents[:1], "__all__"]),
        *(f"| `infos{name}` | `{shape}` |" for name, shape in _tree_rows(infos)),
        "",
        "The configuration an episode plays (`env.sample_config(key)`, or passed to "
        "`env.reset_to(key, config)`; a batch of them runs as one `jax.vmap`):",
        "",
        "| field | dtype[shape] |",
        "| --- | --- |",
        *(f"| `{name}` | `{shape}` |" for name, shape in _tree_rows(config)),
        "",
    ]
    grids = env.config_grids()
    if grids:
        out += [
            "Grids of configurations the paper sweeps (`env.config_grids()`): "
            + ", ".join(f"`{name}`" for name in grids)
            + ".",
            "",
        ]
    out += [
        "## Episode metrics",
        "",
        "`env.episode_metrics(rollout)` measures one episode (`dilemmax rollout`, `dilemmax "
        "play`, training evaluations). Each metric's axes are declared beside it "
        "(`env.metric_axes`) and name its entries in `dilemmax play`'s summary "
        "(`gini[trial_1]`, `return[<seat>]`) and in Inspect scores.",
        "",
        "| metric | axes |",
        "| --- | --- |",
        *(f"| `{name}` | {axes_text(axes)} |" for name, axes in env.metric_axes.items()),
        "",
    ]
    out += [
        "## Scripted policies",
        "",
        "By name in `env.scripted_policies()`, `--policy` / `--seat agent_i=<name>` of "
        "`dilemmax rollout`, `scripted:<name>` seats of `dilemmax play`, and training partners; "
        "`random` and `first_legal` play every game.",
        "",
        "| name | what it plays |",
        "| --- | --- |",
        *(
            f"| `{name}` | {_policy_doc(policy).replace('|', chr(92) + '|')} |"
            for name, policy in env.scripted_policies().items()
        ),
        "",
    ]
    out += _picture(env_id, env, images)
    folder = env_cls.__module__.rpartition(".")[0].replace(".", "/")
    out += [
        "## The code",
        "",
        f"`{folder}/`: `env.py` (the class), `types.py` (states and "
        "configurations), `generator.py`, `policies.py`, the text protocol and its rendering. "
        "[The code map](../architecture.md) says how a game is put together.",
        "",
    ]
    return "\n".join(out)


def _picture(env_id: str, env, images: Path | None) -> list[str]:
    if "rgb_array" in env.render_modes:
        if images is not None:
            frame_png(env, images / f"{env_id}.png")
        return [
            "## A frame",
            "",
            f'The first step of an episode (seed 0), as `env.render(state, "rgb_array")` '
            f"draws it; `dilemmax rollout {env_id} --episodes 1 --gif ep.gif` animates one.",
            "",
            f"![{env_id}, first step]({env_id}.png)",
            "",
        ]
    system, user = first_prompt(env)
    system = textwrap.shorten(system, 600, placeholder=" [...]") if system else "(none)"
    return [
        "## What a language model reads",
        "",
        "The first turn of `agent_0` (seed 0), as `env.text_protocol().turn(...)` writes it: "
        "the system message (shortened here) and the user message. `dilemmax play` sends "
        "these and parses the reply into the action.",
        "",
        "```text",
        system,
        "```",
        "",
        "```text",
        user.strip(),
        "```",
        "",
    ]


# ----------------------------------------------------------------------------- the CLI
def cli_page() -> str:
    """Every command's ``--help``, the parsers' own text."""
    from dilemmax.cli import build_parser

    parser = build_parser()
    out = [
        "# Command-line reference",
        "",
        "<!-- Generated by docs/gen_pages.py from the argparse parsers. -->",
        "",
        "Every command's `--help`, as `dilemmax` prints it. A mistake in a command line is one "
        "line on stderr and exit status 2. [Seats](seats.md) and "
        "[model options](model_options.md) explain the options `play`, `experiment`, "
        "`scenarios` and `redteam` share.",
        "",
    ]
    for path, sub in _parsers(parser, ["dilemmax"]):
        out += [f"{'#' * min(len(path) + 1, 4)} `{' '.join(path)}`", "", "```text"]
        out += [_help(sub).rstrip(), "```", ""]
    return "\n".join(out)


def _parsers(parser, path: list[str]) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, [*path, name])


def _help(parser: argparse.ArgumentParser) -> str:
    import os

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: fix it
    try:
        buffer = io.StringIO()
        try:
            parser.print_help(buffer)
        except ValueError as err:  # argparse's %-formatting of a help string
            raise SystemExit(
                f"{parser.prog} --help fails ({err}): a bare % in a help string"
            ) from None
        return buffer.getvalue()
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


# ----------------------------------------------------------------------------- model options
# What a seat option means where it is not a GenerateConfig field (whose help is its meaning).
_OPTION_MEANINGS = {
    "role": "the seat's own text-protocol role (`cooperator` / `defector`, the Schelling designs)",
    "reveal": "the grid games' hidden rules told to this seat alone",
    "adapter": "a PEFT adapter folder loaded over the model",
    "device": "the torch device the local model runs on",
    "max_new_tokens": "reply length cap of a local model",
    "batch_size": "prompts per batched `generate` call",
    "greedy": "the most likely action instead of a sample",
    "trained.seed": "which of the run's training seeds plays",
}


def _allowed(check) -> str:
    if check is None:
        return "text (or a bare flag)"
    if hasattr(check, "describe"):
        return check.describe()
    choices = getattr(check, "values", None)
    if choices:
        return "one of " + ", ".join(f"`{c}`" for c in choices)
    return {
        "Urls": "http(s) addresses (a port in 1..65535) joined by `\\|`",
        "EnvName": "a variable name",
    }.get(type(check).__name__, type(check).__name__)


def model_options_page() -> str:
    """The options of model seats: GenerateConfig's fields (their flags, defaults, ranges and
    meanings, read from the dataclass), and each seat kind's own options."""
    import dataclasses

    from dilemmax.commandline import flag_of
    from dilemmax.llm import seats
    from dilemmax.llm.config import GenerateConfig

    fields = dataclasses.fields(GenerateConfig)
    helps = {f.name: " ".join(f.metadata["help"].split()) for f in fields}
    out = [
        "# Model and generation options",
        "",
        "<!-- Generated by docs/gen_pages.py from dilemmax/llm/config.py (GenerateConfig) and "
        "dilemmax/llm/seats.py. -->",
        "",
        "A model seat (`openai:`, `inspect:`, `hf:`; see [seats](seats.md)) is asked with the "
        "options of one `GenerateConfig` (`dilemmax/llm/config.py`), declared there once: the "
        "flags of `dilemmax play`, `experiment`, `scenarios evaluate`, `redteam play` and "
        "`finetune evaluate` are made from its fields and hold for every model seat; options "
        "after a seat's target (`openai:my-model,temperature=0.7,top_k=20`) hold for that seat "
        "alone and win over the flags; from Python, pass `generate=GenerateConfig(...)` (see "
        "[play](play.md#from-python)). Every value is checked against its range before any "
        "call, and a value out of range is one line naming the option, the value and what is "
        "allowed (the ranges are OpenAI's documented ones, so a value a server would refuse "
        "costs no run of failed calls). What is left unset is the server's default.",
        "",
        "## The options",
        "",
        "| field (seat option) | flag | default | allowed values | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for field in fields:
        default = "" if field.default is None else f"`{field.default}`"
        meaning = helps[field.name].replace("|", "\\|")
        allowed = _allowed(field.metadata["range"])
        out.append(f"| `{field.name}` | `{flag_of(field)}` | {default} | {allowed} | {meaning} |")
    out += [
        "",
        "`--no-structured-output` is the old spelling of `--output-mode text`.",
        "",
        "## Which seat takes which",
        "",
    ]
    for kind, options in seats.model_seat_options().items():
        shared = [name for name in options if name in helps]
        taken = "every option above" if len(shared) == len(helps) else (
            ", ".join(f"`{name}`" for name in shared) + " of the options above")  # fmt: skip
        if len(shared) == len(helps) - 1:
            left_out = next(name for name in helps if name not in shared)
            taken = f"every option above but `{left_out}`"
        out += [f"**`{kind}:`** takes {taken}, and:", "", "| option | allowed values | meaning |",
                "| --- | --- | --- |"]  # fmt: skip
        for name, check in options.items():
            if name in helps:
                continue
            meaning = _OPTION_MEANINGS.get(f"{kind}.{name}", _OPTION_MEANINGS.get(name, ""))
            meaning = meaning.replace("|", "\\|")
            out.append(f"| `{name}` | {_allowed(check)} | {meaning} |")
        out.append("")
    out += [
        "An `hf:` seat reads `--max-tokens` (as `max_new_tokens`), `--temperature`, `--top-p` "
        "and `--model-seed` where its spec does not set them. `scripted:` seats take no "
        "options. For example:",
        "",
        "<!-- docs-test: skip needs model servers -->",
        "```bash",
        "dilemmax play moral_hazard --seats openai:my-model --base-url http://localhost:8000/v1 \\",
        "    --temperature 0.7 --max-tokens 256 \\",
        "    --seat 'agent_1=openai:other-model,base_url=http://gpu1:8000/v1|http://gpu2:8000/v1,"
        "top_k=20,output=text'",
        "```",
        "",
    ]
    return "\n".join(out)


# ----------------------------------------------------------------------------- training config
# The generated block of docs/training.md, between these two lines (the rest is written by hand).
TRAINING_START = (
    "<!-- Generated by docs/gen_pages.py from dilemmax/train/config.py (TrainConfig) and the "
    "games' training_defaults: edit the declarations, not this table. -->"
)
TRAINING_END = "<!-- End of the generated table. -->"


def _value_text(value) -> str:
    """A config value as `--set` writes it (lists and dicts in JSON syntax)."""
    import json

    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, list | dict):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def training_fields() -> list[str]:
    """Every TrainConfig field (name, type, default, allowed values, meaning), read from its
    declaration, and each game's own defaults (its env class's ``training_defaults``)."""
    from dilemmax.train.config import describe_fields
    from dilemmax.train.configure import game_defaults

    esc = lambda text: text.replace("|", "\\|")  # noqa: E731
    out = [
        TRAINING_START,
        "",
        "Each field is declared once in `dilemmax/train/config.py`, with its default, the values "
        "its check allows and its meaning; `dilemmax train --help` lists the same.",
        "",
        "| field | type | default | allowed values | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    fields = describe_fields()
    for field in fields:
        default = _value_text(field.default)
        out.append(
            f"| `{field.name}` | {esc(field.type)} | {esc(default)} | {esc(field.allowed)} | "
            f"{esc(field.doc)} |"
        )
    games = own_games()
    own = {g: game_defaults(g) for g in games}
    out += [
        "",
        "A game's own defaults (its env class's `training_defaults`, and its `evaluation_options` "
        "as `eval_env_kwargs`) replace these for that game; `--set` replaces both:",
        "",
        "| field | " + " | ".join(games) + " |",
        "| --- |" + " --- |" * len(games),
    ]
    for field in fields:
        if any(field.name in own[g] for g in games):
            cells = [esc(_value_text(own[g][field.name])) if field.name in own[g] else ""
                     for g in games]  # fmt: skip
            out.append(f"| `{field.name}` | " + " | ".join(cells) + " |")
    return [*out, "", TRAINING_END]


def training_page() -> str:
    """docs/training.md with its table of config fields made anew (the rest as written)."""
    text = (DOCS / "training.md").read_text()
    head, start, rest = text.partition(TRAINING_START)
    _, end, tail = rest.partition(TRAINING_END)
    if not (start and end):
        raise SystemExit("docs/training.md lost the markers of its generated table")
    return head + "\n".join(training_fields()) + tail


# ----------------------------------------------------------------------------- llms.txt
def llms_txt() -> str:
    """The site map for language models (https://llmstxt.org): every page with its first line."""
    import yaml  # mkdocs's own dependency

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_IgnoreTags)
    out = [
        "# dilemmax",
        "",
        "> Multi-agent social dilemmas in pure JAX for MARL and language-model research: four "
        "games from three papers, each a jit- and vmap-able environment with the JaxMARL API, "
        "PettingZoo and Gymnasium views, a text interface through which language models play the "
        "very same steps, scripted reference policies, trained agents and the papers' metrics.",
        "",
        "Every page below is markdown in the repository's docs/ folder; README.md is the overview.",
        "",
    ]
    # The committed file lists the games dilemmax ships, whatever else this process registered.
    for section, pages in _nav(with_games(config["nav"], own_games())):
        out += [f"## {section}", ""]
        for title, page in pages:
            source = ROOT / "CHANGELOG.md" if page == "changes.md" else DOCS / page
            out.append(f"- [{title}]({page}): {_page_summary(source)}")
        out.append("")
    return "\n".join(out)


class _IgnoreTags(__import__("yaml").SafeLoader):
    """mkdocs.yml's ``!!python/name:`` tags read as plain strings."""


_IgnoreTags.add_multi_constructor("", lambda loader, suffix, node: None)


def _nav(nav) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    for entry in nav:
        ((section, value),) = entry.items()
        if isinstance(value, str):
            yield section, [(section, value)]
        else:
            yield section, [next(iter(item.items())) for item in value]


def _page_summary(path: Path) -> str:
    for block in path.read_text().split("\n\n")[1:]:
        text = " ".join(block.split())
        if text and not text.startswith(("<!--", "|", "#", "```", "!")):
            return textwrap.shorten(text.strip("_"), 160, placeholder="...")
    return ""


# ----------------------------------------------------------------------------- main
def pages(check: bool = False) -> dict[Path, Callable[[], str]]:
    """Each generated file and what writes it (``check``: write no image)."""
    images = None if check else GAMES
    made = {GAMES / f"{g}.md": functools.partial(game_page, g, images) for g in own_games()}
    made[DOCS / "cli.md"] = cli_page
    made[DOCS / "model_options.md"] = model_options_page
    made[DOCS / "training.md"] = training_page
    made[DOCS / "llms.txt"] = llms_txt
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if a page is out of date")
    parser.add_argument(
        "--game", help="write only this registered game's page (a plug-in's) into --out"
    )
    parser.add_argument("--out", type=Path, default=GAMES, help="the folder --game writes to")
    args = parser.parse_args(argv)
    if args.game:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.game}.md").write_text(game_page(args.game, args.out).rstrip() + "\n")
        print(f"wrote {args.out / f'{args.game}.md'}")
        return 0
    GAMES.mkdir(exist_ok=True)
    stale = []
    for path, make in pages(args.check).items():
        text = make().rstrip("\n") + "\n"
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.relative_to(ROOT))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("out of date (run python docs/gen_pages.py):", *stale, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
