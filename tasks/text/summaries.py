"""Summarization text helpers: sentence splitting, the LEAD-k baseline, repetition rate.

    >>> split_sentences('Mr. Smith went to the U.S. in May. He stayed. "Why?" he asked.')
    ['Mr. Smith went to the U.S. in May.', 'He stayed.', '"Why?" he asked.']
    >>> lead(['One.', 'Two.', 'Three.', 'Four.'], k=3)
    'One.\\nTwo.\\nThree.'

``lead(split_sentences(article), 3)`` is LEAD-3, the extractive baseline of See et al.
(2017) and the RUM paper: its sentences are separated by ``"\\n"`` as ROUGE-Lsum (the
``rouge`` evaluator) expects. ``repetition_rate`` (from :mod:`rumjax.evaluators.rouge`, whose evaluator reports it)
measures the repeated trigrams of decoded summaries (what the coverage mechanism reduces).
"""

import re
from typing import Sequence

from rumjax.evaluators.rouge import repetition_rate  # noqa: F401  (re-exported)

# Sentence end candidates: terminal punctuation, closing quotes/brackets, then whitespace.
_CANDIDATE = re.compile(r"([.!?]+)([\"'\u201d\u2019)\]]*)\s+")
# What may start the next sentence besides an uppercase letter or a digit: an opening quote.
_OPENING_QUOTES = "\"'\u201c\u2018\u00ab"
# Dotted initialisms and initials: U.S., U.N., a.m., J. (never a sentence end, by rule).
_INITIALISM = re.compile(r"(?:[A-Za-z]\.)+")
# Abbreviations (lowercase, without the dot) that precede a name or a number and so almost
# never end a sentence. Ones that often do ("etc.", "Inc.", "Co.") are not listed.
ABBREVIATIONS = frozenset("""
    mr mrs ms dr prof rev fr sr jr st mt ft
    gen lt col maj capt cpt sgt cpl adm cmdr gov sen rep pres supt insp det
    no nos vol vols pp fig figs approx vs
    jan feb mar apr jun jul aug sep sept oct nov dec
""".split())


def _is_abbreviation(text: str, end: int) -> bool:
  """Whether the word that ends just before the ``.`` at ``end`` is an abbreviation."""
  start = end
  while start > 0 and not text[start - 1].isspace():
    start -= 1
  word = text[start:end].lstrip("\"'\u201c\u2018([")
  if not word:
    return False
  if _INITIALISM.fullmatch(word + "."):
    return True
  return word.lower() in ABBREVIATIONS


def _split_line(line: str) -> list[str]:
  out, start = [], 0
  for m in _CANDIDATE.finditer(line):
    nxt = m.end()
    if nxt >= len(line):
      break
    ch = line[nxt]
    if not (ch.isupper() or ch.isdigit() or ch in _OPENING_QUOTES):
      continue
    if m.group(1) == "." and not m.group(2) and _is_abbreviation(line, m.start()):
      continue
    out.append(line[start:m.end()].strip())
    start = nxt
  out.append(line[start:].strip())
  return [s for s in out if s]


def split_sentences(text: str) -> list[str]:
  """Splits cased English prose into sentences by a simple rule.

  The rule:

  * a line break always ends a sentence (news stories have one paragraph per line; a
    headline or dateline without a full stop stays its own sentence); empty lines are
    dropped and sentences are stripped of surrounding whitespace;
  * inside a line, a sentence ends after one or more of ``. ! ?`` (with any closing quotes
    or brackets right after them) followed by whitespace and then an uppercase letter, a
    digit or an opening quote;
  * except after a single ``.`` that ends an abbreviation: a dotted initialism or initial
    (``U.S.``, ``U.N.``, ``a.m.``, ``J.``) or a word of :data:`ABBREVIATIONS` (titles such
    as ``Mr.``, ``Dr.``, ``Lt.``, ``Sen.``, ``St.``, months such as ``Jan.``, ``No.``).

  Known limits of so simple a rule: a sentence that really ends with an initialism or a
  listed abbreviation (``... moved to the U.S. Then ...``) is not split; lowercased text
  (e.g. the tokenized, lowercased CNN/DailyMail files) splits only before digits and
  quotes; ``"Yes!" she said.`` is split after ``"Yes!"`` only when the next word is
  capitalised.

  Args:
    text: the text; ``"\\n"`` separates lines (paragraphs).

  Returns:
    The sentences, in order.
  """
  if not isinstance(text, str):
    raise TypeError(f"split_sentences takes a string, got {type(text).__name__}.")
  out = []
  for line in text.splitlines():
    out.extend(_split_line(line))
  return out


def lead(sentences: Sequence[str], k: int = 3) -> str:
  """LEAD-k: the first ``k`` sentences joined by ``"\\n"`` (all if there are fewer)."""
  if isinstance(sentences, str):
    raise TypeError("lead takes a list of sentences, not a string; use "
                    "lead(split_sentences(text), k).")
  if not isinstance(k, int) or isinstance(k, bool) or k < 0:
    raise ValueError(f"k={k!r} must be an integer >= 0.")
  return "\n".join(list(sentences)[:k])
