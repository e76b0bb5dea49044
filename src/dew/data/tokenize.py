"""CLIP BPE tokenization to 77 ids, offline, with HF `tokenizers` built from the vendored
vocabulary (vocab/bpe_simple_vocab_16e6.txt.gz, MIT, see vocab/LICENSE).

Ids equal OpenAI CLIP's SimpleTokenizer: text is cleaned the same way first (ftfy, HTML
unescaped twice, whitespace collapsed, lowercased), then split with CLIP's regex and
byte-level BPE with the `</w>` end-of-word suffix. Sequences are <start> ids <end>,
padded with 0; a text too long is cut and keeps <end> as its last id (CLIP's truncate).
"""

from __future__ import annotations

import functools
import gzip
import html
from importlib import resources

import ftfy
import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers

CONTEXT_LENGTH = 77
START_ID = 49406
END_ID = 49407
PAD_ID = 0
# CLIP's pre-tokenization pattern (without its special-token alternatives).
_CLIP_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
_MERGES = 49152 - 256 - 2


@functools.cache
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's reversible map from bytes to printable characters."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


@functools.cache
def fast_clip_tokenizer() -> Tokenizer:
    """The HF Tokenizer for CLIP: vocabulary ids laid out exactly as CLIP lays them."""
    vocab_file = resources.files("dew.data") / "vocab" / "bpe_simple_vocab_16e6.txt.gz"
    lines = gzip.decompress(vocab_file.read_bytes()).decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1 : _MERGES + 1]]
    symbols = list(_byte_to_unicode().values())
    tokens = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {token: i for i, token in enumerate(tokens)}
    assert vocab["<|startoftext|>"] == START_ID and vocab["<|endoftext|>"] == END_ID
    tokenizer = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            continuing_subword_prefix="",
            end_of_word_suffix="</w>",
            fuse_unk=False,
        )
    )
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_CLIP_SPLIT), behavior="removed", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    # CLIP matches its two special tokens in the (lowercased) text too.
    tokenizer.add_tokens(
        [AddedToken(t, normalized=True, special=True) for t in ("<|startoftext|>", "<|endoftext|>")]
    )
    return tokenizer


def clean_text(text: str) -> str:
    """CLIP's basic_clean: what the reference does before it splits."""
    return html.unescape(html.unescape(ftfy.fix_text(text))).strip()


def tokenize(text: str, context_length: int = CONTEXT_LENGTH) -> tuple[np.ndarray, np.ndarray]:
    """(ids, mask), each int32[context_length]: CLIP ids padded with 0, and 1 where an id is."""
    ids = fast_clip_tokenizer().encode(clean_text(text), add_special_tokens=False).ids
    ids = [START_ID, *ids[: context_length - 2], END_ID]
    out = np.full(context_length, PAD_ID, np.int32)
    out[: len(ids)] = ids
    mask = np.zeros(context_length, np.int32)
    mask[: len(ids)] = 1
    return out, mask
