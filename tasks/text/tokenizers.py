"""Tokenizers: ``str -> list[str]``, pure functions, one per convention of the papers' data.

    >>> words("Where is Mary?")
    ['where', 'is', 'mary', '?']
    >>> whitespace("a e r _ b a n k")          # char-level PTB files are space-separated
    ['a', 'e', 'r', '_', 'b', 'a', 'n', 'k']
    >>> characters("我爱 北京")                   # CLUE: one token per character
    ['我', '爱', '北', '京']
    >>> characters("the  cat", keep_spaces=True)
    ['t', 'h', 'e', ' ', 'c', 'a', 't']
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
