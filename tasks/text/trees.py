r"""Labelled bracketed trees (the PTB format of the Stanford Sentiment Treebank).

Every node is ``(<label> <word>)`` (a leaf) or ``(<label> <node> <node> ...)``; the
labels are integers (SST: 0 very negative ... 4 very positive)::

    >>> tree = parse_tree("(3 (2 It) (4 (2 's) (4 good)))")
    >>> tree.tokens
    ('It', "'s", 'good')
    >>> tree.label
    3
    >>> tree.spans              # (start, end, label), pre-order, end exclusive, root first
    ((0, 3, 3), (0, 1, 2), (1, 3, 4), (1, 2, 2), (2, 3, 4))

Words are kept as written (SST writes brackets as ``-LRB-`` / ``-RRB-`` and quotes as
`````` / ``''``, and ``/`` as ``\/``). A word cannot hold ``(``, ``)`` or ASCII
whitespace; anything else is a word, including the no-break space U+00A0 that SST's
train.txt has in three leaves (``"8\xa01\/2"``, the film *8 1/2*: one word, as in the
file, not two). A malformed tree raises :class:`TreeFormatError` naming the source, line
and character.
"""

import dataclasses
import re
from typing import Iterable, Optional

_TOKEN = re.compile(r"\(|\)|[^ \t\n\r\f\v()]+")  # ASCII whitespace only (module doc)
_LABEL = re.compile(r"-?\d+")


class TreeFormatError(ValueError):
  """A tree that is not ``(label word)`` / ``(label subtree ...)``; the message names the
  source and line."""


@dataclasses.dataclass(frozen=True)
class LabelledTree:
  """A parsed tree.

  Attributes:
    tokens: the leaves' words, left to right (``n`` of them).
    spans: one ``(start, end, label)`` per node, pre-order (the root first, a node before
      its children, children left to right); the node covers ``tokens[start:end]``. A
      leaf's node is ``(i, i + 1, label)``; a binary tree over ``n`` words has ``2n - 1``.
  """
  tokens: tuple
  spans: tuple

  @property
  def label(self) -> int:
    """The root's label (the sentence label of SST)."""
    return self.spans[0][2]


def parse_tree(text: str, *, source: str = "<string>", line: Optional[int] = None
               ) -> LabelledTree:
  """The leaves and labelled spans of one bracketed tree.

  Args:
    text: one tree, e.g. ``"(3 (2 It) (4 (2 's) (4 good)))"`` (surrounding whitespace is
      ignored; nothing else may follow the root's closing bracket).
    source, line: where ``text`` comes from, for error messages.

  Returns:
    A :class:`LabelledTree`.

  Raises:
    TreeFormatError: naming ``source``, ``line`` and the character offset.
  """
  where = source if line is None else f"{source}, line {line}"
  tokens: list[str] = []
  spans: list[list[int]] = []    # [start, end, label], end filled when the node closes
  stack: list[list] = []         # open nodes: [span index, has word, has subtree]
  done = False
  pending_label = False          # just read "(": the next token must be the label

  def fail(pos: int, msg: str):
    snippet = text.strip()
    snippet = snippet if len(snippet) <= 80 else snippet[:77] + "..."
    raise TreeFormatError(f"{where}, character {pos + 1}: {msg}; got {snippet!r}. A tree is "
                          "'(<label> <word>)' or '(<label> <tree> <tree> ...)' with integer "
                          "labels.")

  for m in _TOKEN.finditer(text):
    tok, pos = m.group(), m.start()
    if done:
      fail(pos, f"{tok!r} after the end of the tree (one tree per line)")
    if pending_label:
      if not _LABEL.fullmatch(tok):
        fail(pos, f"expected an integer label after '(', found {tok!r}")
      spans.append([len(tokens), -1, int(tok)])
      stack.append([len(spans) - 1, False, False])
      pending_label = False
    elif tok == "(":
      if stack:
        if stack[-1][1]:
          fail(pos, "a node holds a word and a subtree")
        stack[-1][2] = True
      pending_label = True
    elif tok == ")":
      if not stack:
        fail(pos, "')' closes nothing")
      index, has_word, has_child = stack.pop()
      if not (has_word or has_child):
        fail(pos, "a node with a label but no word or subtree")
      spans[index][1] = len(tokens)
      done = not stack
    else:  # a word
      if not stack:
        fail(pos, f"word {tok!r} outside brackets")
      node = stack[-1]
      if node[1] or node[2]:
        fail(pos, f"word {tok!r} is not alone in its node (a leaf is '(<label> <word>)')")
      node[1] = True
      tokens.append(tok)
  if pending_label:
    fail(len(text.rstrip()), "the text ends after '('")
  if stack:
    fail(len(text.rstrip()), f"{len(stack)} unclosed '('")
  if not spans:
    fail(0, "no tree")
  return LabelledTree(tuple(tokens), tuple(tuple(s) for s in spans))


def parse_lines(lines: Iterable[str], source: str = "<lines>") -> list[LabelledTree]:
  """:func:`parse_tree` of every non-blank line (one tree per line, as in SST's files);
  errors name ``source`` and the 1-based line number."""
  return [parse_tree(text, source=source, line=lineno)
          for lineno, text in enumerate(lines, start=1) if text.strip()]
