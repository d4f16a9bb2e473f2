"""Text utilities shared by the language tasks: tokenizers and :class:`Vocabulary`.

    >>> from tasks import text
    >>> vocab = text.Vocabulary.build([text.words(line) for line in lines], max_size=10_000)
    >>> ids = vocab.encode(text.words("Where is Mary?"), eos=True)   # <int32>[5]
"""

from tasks.text.tokenizers import characters, treebank_words, whitespace, words
from tasks.text.vocabulary import Vocabulary

__all__ = ["Vocabulary", "characters", "treebank_words", "whitespace", "words"]
