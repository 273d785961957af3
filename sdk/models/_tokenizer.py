"""A byte-level BPE tokenizer trained locally, so no tokenizer file is ever downloaded."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

__all__ = ["DEFAULT_CORPUS", "train_tokenizer"]

# A small built-in English corpus: the tokenizer must cover ordinary prompts and answers even
# when the caller passes no texts of its own (byte-level BPE never produces unknown tokens).
DEFAULT_CORPUS: tuple[str, ...] = (
    "What is shown in the image? Which option is correct? Answer with the letter.",
    "The red circle is left of the blue square. The green triangle is above the yellow star.",
    "Which bar is the tallest? Which slice of the pie chart is the largest? Read the value.",
    "A detailed description: the picture contains several shapes, colors, words and numbers.",
    "Be careful: this may be a hazard. Keep a safe distance. Do not touch. Warning, danger.",
    "yes no left right above below top bottom first second third one two three four five",
    "red green blue yellow orange purple black white gray pink brown cyan",
    "circle square triangle star bar chart table row column cell text word title poster",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 A B C D (A) (B) (C) (D)",
    "the a an of in on at to is are was with and or for this that it there how many what",
)
"""Sentences the locally built tokenizer is trained on when no corpus is given."""


def train_tokenizer(
    corpus: Iterable[str],
    special_tokens: Sequence[str],
    *,
    vocab_size: int = 1024,
    pad_token: str,
    eos_token: str,
    chat_template: str,
    extra_attributes: dict[str, str] | None = None,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE over ``corpus`` and wrap it as a transformers fast tokenizer."""
    texts = [*DEFAULT_CORPUS, *corpus]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=pad_token,
        eos_token=eos_token,
        additional_special_tokens=[t for t in special_tokens if t not in (pad_token, eos_token)],
        model_max_length=100_000,
        chat_template=chat_template,
    )
    for key, value in (extra_attributes or {}).items():
        setattr(wrapped, key, value)
    return wrapped
