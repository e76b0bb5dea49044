"""dew's fast CLIP tokenizer gives the reference CLIP tokenizer's ids."""

from importlib import resources

import numpy as np
import pytest

from dew.data.tokenize import CONTEXT_LENGTH, END_ID, START_ID, tokenize

from .clip_reference_tokenizer import SimpleTokenizer
from .clip_reference_tokenizer import tokenize as reference_tokenize

STRINGS = [
    "a photo of a cat",
    "This is a photo of a pink-yellow dahlia? flower",
    "A photo of a colt's foot flower",
    "Hello, World!!! ... (really?)",
    "don't won't I'd we'll they've you're she's",
    "numbers 12345 and 3.14159",
    "naïve café résumé",
    "ÉCOLE Straße İstanbul",
    "日本語のテキスト",
    "Ωμέγα and Кириллица",
    "emoji 🌸🌼 flowers",
    "  lots   of\twhite\nspace  ",
    "tab\tand\r\nnewline",
    "&amp;lt;b&amp;gt; html entities &quot;",
    "it’s “curly” quotes",
    "Ｆｕｌｌｗｉｄｔｈ letters",
    "ﬁne ﬂower ligatures",
    "mojibake: cafÃ©",
    "CamelCaseWords_with_underscores",
    "x<|endoftext|>y <|startoftext|>",
    "a\u00a0non-breaking space",
    "ʻokina and a zero\u200bwidth space",
    "",
    "word " * 100,
    "x" * 300,
]


@pytest.fixture(scope="module")
def reference():
    vocab = resources.files("dew.data") / "vocab" / "bpe_simple_vocab_16e6.txt.gz"
    return SimpleTokenizer(str(vocab))


def test_the_known_ids():
    ids, mask = tokenize("a photo of a cat")
    expected = [49406, 320, 1125, 539, 320, 2368, 49407]
    assert ids.tolist() == expected + [0] * (CONTEXT_LENGTH - len(expected))
    assert mask.tolist() == [1] * len(expected) + [0] * (CONTEXT_LENGTH - len(expected))
    assert ids.dtype == mask.dtype == np.int32


@pytest.mark.parametrize("text", STRINGS, ids=range(len(STRINGS)))
def test_ids_equal_the_reference(reference, text):
    ids, mask = tokenize(text)
    assert ids.tolist() == reference_tokenize(reference, text)
    assert mask.tolist() == (ids != 0).astype(int).tolist()


def test_a_long_text_is_cut_and_keeps_its_end_token():
    ids, mask = tokenize("flower " * 200)
    assert ids[0] == START_ID and ids[-1] == END_ID
    assert mask.all()
