"""Tokenizers: ``str -> list[str]``, pure functions, one per convention of the papers' data.

    >>> words("Where is Mary?")
    ['where', 'is', 'mary', '?']
    >>> whitespace("a e r _ b a n k")          # char-level PTB files are space-separated
    ['a', 'e', 'r', '_', 'b', 'a', 'n', 'k']
    >>> characters("我爱 北京")                   # CLUE: one token per character
    ['我', '爱', '北', '京']
    >>> characters("the  cat", keep_spaces=True)
    ['t', 'h', 'e', ' ', 'c', 'a', 't']
    >>> treebank_words("A man's dog doesn't swim.")   # SNLI: clitics split as in the PTB
    ['a', 'man', "'s", 'dog', 'does', "n't", 'swim', '.']
"""

import re

_WORD_OR_PUNCT = re.compile(r"[\w']+|[^\w\s]")
_SPACES = re.compile(r"\s+")


def words(text: str) -> list[str]:
  """Lower-cased words and single punctuation marks (the bAbI tokenizer).

  A word is a run of letters, digits, ``_`` and apostrophes (``"don't"`` stays one
  token); every other non-space character is a token of its own; whitespace separates.

  Example: ``"Where is Mary?"`` -> ``["where", "is", "mary", "?"]``.
  """
  return _WORD_OR_PUNCT.findall(text.lower())


def whitespace(text: str) -> list[str]:
  """The text split on runs of whitespace, case kept (PTB's pre-tokenized files).

  Example: ``"The <unk> of N"`` -> ``["The", "<unk>", "of", "N"]``; ``""`` -> ``[]``.
  """
  return text.split()


def characters(text: str, *, keep_spaces: bool = False) -> list[str]:
  """One token per character (Chinese CLUE text, character-level language modelling).

  Args:
    text: any string.
    keep_spaces: if False (default) whitespace is dropped; if True every run of
      whitespace (spaces, tabs, newlines) becomes one ``" "`` token and leading or
      trailing whitespace is dropped, so the tokens never hold a newline or a tab (a
      :class:`tasks.text.Vocabulary` file can store them).

  Returns:
    The characters in order, e.g. ``characters("a b", keep_spaces=True)`` ->
    ``["a", " ", "b"]``.
  """
  if keep_spaces:
    return list(_SPACES.sub(" ", text.strip()))
  return [ch for ch in text if not ch.isspace()]


# A clitic as the Penn Treebank splits it ("does n't", "man 's"), a word (letters, digits,
# "_"; inner "-" or "." kept: "well-known", "3.5"), or one other non-space character.
_TREEBANK = re.compile(r"\w+(?=n't\b)|n't\b|'(?:s|re|ve|d|ll|m)\b|\w+(?:[-.]\w+)*|[^\w\s]")


def treebank_words(text: str, *, lower: bool = True) -> list[str]:
  """Words and punctuation split roughly as the Penn Treebank tokenizer does (SNLI).

  Lower-cased (unless ``lower=False``); every punctuation mark is a token, except the ``-``
  and ``.`` inside a word or number; the clitics ``n't``, ``'s``, ``'re``, ``'ve``,
  ``'d``, ``'ll``, ``'m`` are tokens of their own, as in SNLI's parses, SST's trees and
  GloVe's vocabulary. A simple regex, not the Stanford tokenizer: ``"U.S."`` gives
  ``["u.s", "."]`` and ``"..."`` three ``"."``. On SNLI's dev set it gives the tokens of
  the corpus's own (Stanford parser) parses, lower-cased, for 99.5% of the sentences (most
  others differ in quotes: ``"`` where the parser writes two backquotes or apostrophes).

  Example: ``"A man's dog doesn't swim."`` ->
  ``["a", "man", "'s", "dog", "does", "n't", "swim", "."]``.
  """
  return _TREEBANK.findall(text.lower() if lower else text)
