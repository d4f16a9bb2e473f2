"""An immutable token <-> id vocabulary, its text file, and pointer-generator OOV ids.

    >>> vocab = Vocabulary.build([["a", "b", "a"], ["c", "a", "b"]], min_count=2)
    >>> vocab.tokens
    ('<pad>', '<unk>', '<bos>', '<eos>', 'a', 'b')
    >>> vocab.encode(["a", "c"])                  # unknown -> unk
    array([4, 1], dtype=int32)
    >>> vocab.to_text([4, 5, 3, 0])               # stops at eos, drops pad/bos/eos
    'a b'

Ids: the special tokens come first, in the order pad, unk, bos, eos (those that are not
``None``; so ``<pad>`` is id 0 when present), then the corpus tokens by count,
descending, ties broken by the token (Python string order), so a build is deterministic.

Special tokens are roles given to token strings (``pad="<pad>"``, ``unk="<unk>"``,
``bos="<bos>"``, ``eos="<eos>"``; ``None`` for none). A role exists when its token is in
the vocabulary; ``pad_id``/``unk_id``/``bos_id``/``eos_id`` are ``None`` otherwise. A
corpus may hold a special token itself (PTB's ``<unk>``, an ``<eos>`` appended to every
line): it then keeps its reserved id and its corpus count. Examples:

* bAbI: ``Vocabulary.build(texts, unk=None, bos=None, eos=None)`` (only ``<pad>``=0);
* word-level PTB: ``Vocabulary.build(lines, pad=None, bos=None)`` with ``<unk>`` and
  ``<eos>`` in the corpus (ids 0 and 1);
* summarization: the defaults and ``max_size=50_000`` (See et al. 2017).

File format (:meth:`Vocabulary.save` / :meth:`Vocabulary.load`, meant to live next to
the prepared TFDS data): UTF-8, one token per line in id order, either ``token`` or
``token<TAB>count`` on every line; tokens are non-empty and hold no tab or newline.

Article OOVs (See et al. 2017, ``article2ids``/``abstract2ids``/``outputids2words`` of
their ``data.py``): :meth:`encode_extended` gives each distinct out-of-vocabulary word of
an article a temporary id ``len(vocab) + k`` (``k`` its order of first appearance), so
the pointer-generator can copy it; :meth:`encode_with_oovs` gives a reference summary's
words those ids when they occur in the article (other OOVs -> unk);
``to_text(ids, oovs=oovs)`` maps them back to the article's words.
"""

import collections
import dataclasses
import os
from typing import Iterable, Optional, Sequence

import numpy as np

from rumjax import utils

ROLES = ("pad", "unk", "bos", "eos")


@dataclasses.dataclass(frozen=True, repr=False)
class Vocabulary:
  """Tokens in id order, optional corpus counts, and the special-token roles.

  Build one with :meth:`build` (from a corpus) or :meth:`load` (from a file); the
  constructor takes the tokens in id order. Two vocabularies are equal when their
  tokens, counts and roles are.

  Attributes:
    tokens: the token of every id, ``tokens[i]`` for id ``i``.
    counts: the corpus count of every id (``None`` if unknown), same length as tokens.
    pad, unk, bos, eos: the token of each role, or ``None`` when the vocabulary has no
      such token (a role whose token is not in ``tokens`` is set to ``None``).
  """
  tokens: tuple
  counts: Optional[tuple] = None
  pad: Optional[str] = "<pad>"
  unk: Optional[str] = "<unk>"
  bos: Optional[str] = "<bos>"
  eos: Optional[str] = "<eos>"
  _index: dict = dataclasses.field(init=False, repr=False, compare=False)

  def __post_init__(self):
    tokens = tuple(self.tokens)
    for i, token in enumerate(tokens):
      _check_token(token, f"token id {i}")
    index = {t: i for i, t in enumerate(tokens)}
    if len(index) != len(tokens):
      dup = next(t for t, n in collections.Counter(tokens).items() if n > 1)
      raise ValueError(f"token {dup!r} occurs more than once; every token needs one id.")
    counts = None if self.counts is None else tuple(int(c) for c in self.counts)
    if counts is not None and len(counts) != len(tokens):
      raise ValueError(f"counts has {len(counts)} entries but there are {len(tokens)} "
                       "tokens; give one count per token or counts=None.")
    object.__setattr__(self, "tokens", tokens)
    object.__setattr__(self, "counts", counts)
    object.__setattr__(self, "_index", index)
    for role in ROLES:
      if getattr(self, role) not in index:
        object.__setattr__(self, role, None)

  # ---------------------------------------------------------------------- building

  @classmethod
  def build(cls, token_lists: Iterable[Sequence[str]], *, min_count: int = 1,
            max_size: Optional[int] = None, pad: Optional[str] = "<pad>",
            unk: Optional[str] = "<unk>", bos: Optional[str] = "<bos>",
            eos: Optional[str] = "<eos>") -> "Vocabulary":
    """The vocabulary of a corpus.

    Args:
      token_lists: the corpus, an iterable of token lists (e.g. one per line).
      min_count: corpus tokens seen fewer times are left out (specials never are).
      max_size: the largest ``len(vocab)``, specials included (``None``: no limit);
        the most frequent tokens are kept, ties broken by the token.
      pad, unk, bos, eos: the special tokens (``None`` to have none), given the first
        ids in this order.

    Returns:
      The vocabulary, with the corpus count of every token (0 for specials absent
      from the corpus).
    """
    if not isinstance(min_count, int) or min_count < 1:
      raise ValueError(f"min_count={min_count!r} must be an integer >= 1.")
    specials = [t for t in (pad, unk, bos, eos) if t is not None]
    if len(set(specials)) != len(specials):
      raise ValueError(f"special tokens {specials} must be distinct.")
    if max_size is not None and (not isinstance(max_size, int) or max_size < len(specials)):
      raise ValueError(f"max_size={max_size!r} must be an integer >= {len(specials)} (the "
                       "number of special tokens), or None for no limit.")
    counter = collections.Counter()
    for tokens in token_lists:
      if isinstance(tokens, str):
        raise ValueError(f"token_lists holds the string {tokens[:20]!r}; give lists of "
                         "tokens (e.g. [tokenizers.words(line) for line in lines]).")
      counter.update(tokens)
    special_set = set(specials)
    rest = sorted((t for t, c in counter.items() if c >= min_count and t not in special_set),
                  key=lambda t: (-counter[t], t))
    if max_size is not None:
      rest = rest[:max_size - len(specials)]
    tokens = specials + rest
    return cls(tuple(tokens), tuple(counter[t] for t in tokens), pad=pad, unk=unk, bos=bos,
               eos=eos)

  def save(self, path: str) -> None:
    """Writes the file format of the module docstring (with counts when known),
    atomically (:func:`rumjax.utils.write_text`: a crash or a second writer never leaves
    half a vocabulary next to the prepared data)."""
    lines = (token if self.counts is None else f"{token}\t{self.counts[i]}"
             for i, token in enumerate(self.tokens))
    utils.write_text(os.path.expanduser(path), "".join(line + "\n" for line in lines))

  @classmethod
  def load(cls, path: str, *, pad: Optional[str] = "<pad>", unk: Optional[str] = "<unk>",
           bos: Optional[str] = "<bos>", eos: Optional[str] = "<eos>") -> "Vocabulary":
    """Reads a file written by :meth:`save`; pass the special tokens given to
    :meth:`build` (a role is set when its token is in the file).

    Raises:
      ValueError: naming the path (and line) of an empty or malformed file.
    """
    path = os.path.expanduser(path)
    with open(path, encoding="utf-8", newline="") as f:
      content = f.read()
    lines = content.split("\n")
    if lines and lines[-1] == "":
      lines.pop()
    if not lines:
      raise ValueError(f"{path}: the vocabulary file is empty; expected one token per line.")
    with_counts = "\t" in lines[0]
    tokens, counts, line_of = [], [], {}
    for n, line in enumerate(lines, start=1):
      fields = line.split("\t")
      if len(fields) != (2 if with_counts else 1):
        layout = "token<TAB>count" if with_counts else "token (no tab)"
        raise ValueError(f"{path}, line {n}: {line!r} is malformed; every line must be "
                         f"{layout} like line 1.")
      try:
        _check_token(fields[0], "the token")
      except ValueError as e:
        raise ValueError(f"{path}, line {n}: {e}") from None
      if fields[0] in line_of:
        raise ValueError(f"{path}, line {n}: token {fields[0]!r} already occurs on line "
                         f"{line_of[fields[0]]}; every token needs one line.")
      line_of[fields[0]] = n
      tokens.append(fields[0])
      if with_counts:
        if not (fields[1].isascii() and fields[1].isdigit()):   # "²" is a digit to isdigit
          raise ValueError(f"{path}, line {n}: count {fields[1]!r} must be an integer >= 0.")
        counts.append(int(fields[1]))
    return cls(tuple(tokens), tuple(counts) if with_counts else None, pad=pad, unk=unk,
               bos=bos, eos=eos)

  # ---------------------------------------------------------------------- lookups

  def __repr__(self) -> str:
    roles = ", ".join(f"{r}={getattr(self, r)!r}" for r in ROLES)
    return f"Vocabulary(size={len(self)}, {roles}, first={list(self.tokens[:8])})"

  def __len__(self) -> int:
    return len(self.tokens)

  def __contains__(self, token) -> bool:
    return token in self._index

  def id(self, token: str) -> Optional[int]:
    """The id of ``token``, or ``None`` if it is not in the vocabulary."""
    return self._index.get(token)

  @property
  def pad_id(self) -> Optional[int]:
    return self._index.get(self.pad)

  @property
  def unk_id(self) -> Optional[int]:
    return self._index.get(self.unk)

  @property
  def bos_id(self) -> Optional[int]:
    return self._index.get(self.bos)

  @property
  def eos_id(self) -> Optional[int]:
    return self._index.get(self.eos)

  @property
  def special_ids(self) -> tuple:
    """The ids of the pad, unk, bos and eos tokens that exist, in that order."""
    ids = (self.pad_id, self.unk_id, self.bos_id, self.eos_id)
    return tuple(i for i in ids if i is not None)

  # ---------------------------------------------------------------------- encoding

  def encode(self, tokens: Sequence[str], *, bos: bool = False,
             eos: bool = False) -> np.ndarray:
    """Token ids <int32>[len(tokens) + bos + eos]; unknown tokens get ``unk_id``.

    Args:
      tokens: the tokens.
      bos, eos: prepend ``bos_id`` / append ``eos_id``.

    Raises:
      ValueError: for an unknown token when the vocabulary has no unk token.
    """
    return self._encode(tokens, lambda token: self._unknown(token), bos, eos)

  def encode_extended(self, article_tokens: Sequence[str]) -> tuple[np.ndarray, list]:
    """See et al.'s ``article2ids``: ids with article OOVs as temporary ids.

    Args:
      article_tokens: the source text's tokens.

    Returns:
      ``(ids <int32>[n], oovs)``: ``oovs`` lists the distinct out-of-vocabulary tokens
      in order of first appearance and the ``k``-th of them has id ``len(self) + k``;
      the other tokens have their usual ids. Example with vocabulary
      ``<pad> <unk> the cat``: ``["the", "dog", "ate", "dog"]`` -> ``([2, 4, 5, 4],
      ["dog", "ate"])``.
    """
    oovs = []

    def extend(token):
      if token not in oovs:
        oovs.append(token)
      return len(self) + oovs.index(token)

    return self._encode(article_tokens, extend, False, False), oovs

  def encode_with_oovs(self, summary_tokens: Sequence[str], oovs: Sequence[str], *,
                       bos: bool = False, eos: bool = False) -> np.ndarray:
    """See et al.'s ``abstract2ids``: a summary's ids over the article-extended vocabulary.

    Args:
      summary_tokens: the reference summary's tokens.
      oovs: the article's OOVs from :meth:`encode_extended`.
      bos, eos: prepend ``bos_id`` / append ``eos_id``.

    Returns:
      <int32>[n]: in-vocabulary tokens get their ids, article OOVs ``len(self) + k``,
      other unknown tokens ``unk_id`` (``ValueError`` if there is no unk token).
    """
    position = {t: k for k, t in reversed(list(enumerate(oovs)))}

    def lookup(token):
      if token in position:
        return len(self) + position[token]
      return self._unknown(token)

    return self._encode(summary_tokens, lookup, bos, eos)

  def to_tokens(self, ids, *, strip_special: bool = True, stop_at_eos: bool = True,
                oovs: Optional[Sequence[str]] = None) -> list[str]:
    """The tokens of ``ids`` <int>[n] (see :meth:`to_text`)."""
    out = []
    for i in np.asarray(ids).reshape(-1).tolist():
      if stop_at_eos and i == self.eos_id:
        break
      if strip_special and i in (self.pad_id, self.bos_id, self.eos_id):
        continue
      out.append(self._token(i, oovs))
    return out

  def to_text(self, ids, *, sep: str = " ", strip_special: bool = True,
              stop_at_eos: bool = True, oovs: Optional[Sequence[str]] = None) -> str:
    """Ids <int>[n] back to text.

    Args:
      ids: token ids (any integer array-like; flattened).
      sep: put between tokens (``""`` for characters).
      strip_special: drop pad, bos and eos tokens (unk is kept: it is information).
      stop_at_eos: end at the first ``eos_id`` (excluded).
      oovs: the article's OOVs, to map extended ids ``len(self) + k`` to ``oovs[k]``.

    Raises:
      ValueError: for an id outside ``[0, len(self) + len(oovs))``.
    """
    return sep.join(self.to_tokens(ids, strip_special=strip_special,
                                   stop_at_eos=stop_at_eos, oovs=oovs))

  # ---------------------------------------------------------------------- helpers

  def _encode(self, tokens, unknown, bos, eos) -> np.ndarray:
    if isinstance(tokens, str):
      raise ValueError(f"tokens={tokens[:20]!r} is a string; tokenize it first (e.g. "
                       "tasks.text.words(text)).")
    ids = [self._index[t] if t in self._index else unknown(t) for t in tokens]
    for flag, role in ((bos, "bos"), (eos, "eos")):
      if flag and getattr(self, role) is None:
        raise ValueError(f"{role}=True but this vocabulary has no {role} token; build it "
                         f"with {role}='<{role}>'.")
    ids = [self.bos_id] * bos + ids + [self.eos_id] * eos
    return np.asarray(ids, np.int32)

  def _unknown(self, token) -> int:
    if self.unk is None:
      raise ValueError(f"token {token!r} is not in the vocabulary and it has no unk token; "
                       "build it with unk='<unk>' (or add the token).")
    return self._index[self.unk]

  def _token(self, i: int, oovs) -> str:
    if 0 <= i < len(self):
      return self.tokens[i]
    k = i - len(self)
    if oovs is not None and 0 <= k < len(oovs):
      return oovs[k]
    limit = len(self) + (0 if oovs is None else len(oovs))
    hint = "" if oovs is not None else " (pass oovs= for article-extended ids)"
    raise ValueError(f"id {i} is outside [0, {limit}){hint}.")


def _check_token(token, what: str) -> None:
  if not isinstance(token, str) or not token or "\t" in token or "\n" in token:
    raise ValueError(f"{what} {token!r} must be a non-empty string without tab or "
                     "newline.")
