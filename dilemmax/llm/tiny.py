"""A tiny causal language model with a locally trained tokenizer, for tests and CPU demos.

No model hub is needed: the tokenizer is a byte-level BPE trained here on a small corpus (the
games' reply formats plus any texts the caller adds, such as rendered prompts), and the model is
a two-layer Llama-style network built from a config with random weights. Both are written with
``save_pretrained``, so every code path that loads a real model from a local path
(``AutoTokenizer.from_pretrained(path)``, ``AutoModelForCausalLM.from_pretrained(path)``, PEFT
adapters on top) runs on it unchanged.

The chat template marks the assistant's turns with ``{% generation %}``, so TRL can compute the
loss on completions only.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SPECIAL_TOKENS = ("<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>")

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|end|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|end|>' }}{% endif %}"
    "{{ '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

# Enough text for the merges to cover the games' vocabulary and reply formats; callers add
# rendered prompts for a closer fit.
_BASE_CORPUS = (
    "ACTION LOCAL A",
    "ACTION LOCAL B",
    "ACTION LOCAL C",
    "ACTION LOCAL D",
    "ACTION QUERY",
    "NOTE CASE 1 UNSAFE A",
    "NOTE CASE 2 UNSAFE B",
    "NOTE CASE 3 UNSAFE C",
    "NO NOTE",
    "FINAL A",
    "FINAL B",
    "FINAL C",
    "FINAL D",
    "RATIONALE: the query reveals which option of my successor's case is unsafe.",
    "CONTRIBUTE 0 1 2 3 4 5 6 7 8 9 10 11 12",
    "VOTE Agent 1 Agent 2 Agent 3",
    '{"reason": "move toward the apples", "mode": "explore", "goal": [3, 4], '
    '"note": {"op": "add", "text": "blue then red cleans"}, "action": "move_up"}',
    "move_up move_down move_left move_right turn_left turn_right stay zap clean fire",
    "You are Agent 1 in a team game. Your successor owns Case 2. The target of a case is its "
    "highest-utility option that is not unsafe. Team reward, local reward, query cost.",
    "The fund needs a threshold of resources. If it falls short, a deployment rule decides who "
    "is eliminated: all-or-nothing, random, vote, poorest, richest.",
    "Apples grow only while the river is clean. Waste, river, orchard, wall, agent, beam.",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 .,;:!?()[]{}<>'\"-_=+*/",
)


def train_tokenizer(texts: Iterable[str] = (), vocab_size: int = 1024):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on the base corpus plus ``texts``."""
    # tokenizers, transformers and torch: the optional llm extra, loaded to build the model.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte stays encodable
        show_progress=False,
    )
    corpus = list(_BASE_CORPUS) + [str(t) for t in texts]
    tokenizer.train_from_iterator(corpus * 4, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<|pad|>",
        eos_token="<|end|>",
        additional_special_tokens=["<|system|>", "<|user|>", "<|assistant|>"],
        padding_side="left",
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def build_tiny_model(
    out_dir: str | Path,
    texts: Iterable[str] = (),
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    max_positions: int = 16384,
    seed: int = 0,
) -> Path:
    """Writes a tiny Llama-style causal LM and its tokenizer to ``out_dir``; returns the path.

    Args:
        out_dir: folder to write (created; existing files are overwritten).
        texts: extra tokenizer training texts (rendered prompts, replies).
        vocab_size: BPE vocabulary size (special tokens included).
        hidden_size, num_layers: model size (about 0.2M parameters at the defaults).
        max_positions: longest sequence the rotary embedding is configured for.
        seed: torch seed of the random weights (the same seed gives the same model).
    """
    import torch  # optional llm extra
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(texts, vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
