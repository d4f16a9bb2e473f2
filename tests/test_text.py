"""tasks.text: tokenizers and Vocabulary (build, file, encoding, pointer-generator OOVs)."""

import numpy as np
import pytest

from tasks import text
from tasks.text import Vocabulary

# ------------------------------------------------------------------------ tokenizers


def test_words_is_the_babi_tokenizer():
  assert text.words("Where is Mary?") == ["where", "is", "mary", "?"]
  assert text.words("John went to the hallway.") == ["john", "went", "to", "the", "hallway",
                                                      "."]
  assert text.words("Don't, stop!") == ["don't", ",", "stop", "!"]
  assert text.words("  ") == []


def test_whitespace_keeps_case_and_specials():
  assert text.whitespace(" The <unk> of\tN \n") == ["The", "<unk>", "of", "N"]
  assert text.whitespace("a e r _ b") == ["a", "e", "r", "_", "b"]
  assert text.whitespace("") == []


def test_characters():
  assert text.characters("我爱 北京") == ["我", "爱", "北", "京"]
  assert text.characters(" the  cat\n", keep_spaces=True) == list("the cat")
  assert text.characters("a\tb\nc", keep_spaces=True) == ["a", " ", "b", " ", "c"]
  assert text.characters("a b") == ["a", "b"]


# ------------------------------------------------------------------------ vocabulary


def test_build_orders_by_count_then_token_with_min_count_and_max_size():
  corpus = [["b", "a", "c", "d"], ["a", "b", "c", "e"], ["e", "x", "x"], ["z"]]
  # counts: a 2, b 2, c 2, e 2, x 2, d 1, z 1
  vocab = Vocabulary.build(corpus)
  assert vocab.tokens == ("<pad>", "<unk>", "<bos>", "<eos>", "a", "b", "c", "e", "x",
                          "d", "z")
  assert vocab.counts == (0, 0, 0, 0, 2, 2, 2, 2, 2, 1, 1)
  assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
  assert len(vocab) == 11 and "x" in vocab and "q" not in vocab
  assert Vocabulary.build(corpus, min_count=2).tokens[4:] == ("a", "b", "c", "e", "x")
  small = Vocabulary.build(corpus, max_size=7)  # specials count towards max_size
  assert small.tokens[4:] == ("a", "b", "c") and len(small) == 7
  # Deterministic whatever the corpus order.
  assert Vocabulary.build(corpus[::-1]) == vocab


def test_specials_can_be_absent_or_in_the_corpus():
  babi = Vocabulary.build([["mary", "went"]], unk=None, bos=None, eos=None)
  assert babi.tokens == ("<pad>", "mary", "went") and babi.pad_id == 0
  assert babi.unk_id is babi.bos_id is babi.eos_id is None
  # Word-level PTB: <unk> in the corpus, <eos> appended to every line.
  lines = [["the", "<unk>", "cat", "<eos>"], ["the", "<unk>", "<eos>"]]
  ptb = Vocabulary.build(lines, pad=None, bos=None)
  assert ptb.tokens == ("<unk>", "<eos>", "the", "cat")
  assert ptb.counts == (2, 2, 2, 1)
  assert (ptb.pad_id, ptb.unk_id, ptb.bos_id, ptb.eos_id) == (None, 0, None, 1)
  assert ptb.special_ids == (0, 1)
  plain = Vocabulary(("a", "b"))
  assert plain.special_ids == () and plain.counts is None


def test_build_errors():
  with pytest.raises(ValueError, match="max_size=3 must be an integer >= 4"):
    Vocabulary.build([["a"]], max_size=3)
  with pytest.raises(ValueError, match="min_count=0"):
    Vocabulary.build([["a"]], min_count=0)
  with pytest.raises(ValueError, match="lists of tokens"):
    Vocabulary.build(["a line"])
  with pytest.raises(ValueError, match="'a' occurs more than once"):
    Vocabulary(("a", "b", "a"))


def test_encode_and_to_text_round_trip():
  vocab = Vocabulary.build([text.words("the cat sat on the mat .")])
  ids = vocab.encode(text.words("The cat sat on the mat."), bos=True, eos=True)
  assert ids.dtype == np.int32 and ids[0] == vocab.bos_id and ids[-1] == vocab.eos_id
  assert vocab.to_text(ids) == "the cat sat on the mat ."
  padded = np.concatenate([ids, [vocab.pad_id] * 3])
  assert vocab.to_text(padded) == "the cat sat on the mat ."
  assert vocab.to_text(padded, strip_special=False, stop_at_eos=False) == (
      "<bos> the cat sat on the mat . <eos> <pad> <pad> <pad>")
  assert vocab.to_text([vocab.id("cat"), vocab.eos_id, vocab.id("mat")]) == "cat"
  assert vocab.to_text([vocab.id("cat"), vocab.eos_id, vocab.id("mat")],
                       stop_at_eos=False) == "cat mat"
  assert vocab.to_text(vocab.encode(["a", "dog"])) == "<unk> <unk>"  # unk is kept
  chars = Vocabulary.build([list("abc")])
  assert chars.to_text(chars.encode(list("cab")), sep="") == "cab"
  with pytest.raises(ValueError, match="id 99 is outside"):
    vocab.to_text([99])


def test_encode_without_unk_names_the_token():
  vocab = Vocabulary.build([["a"]], unk=None, bos=None, eos=None)
  with pytest.raises(ValueError, match="'b' is not in the vocabulary and it has no unk"):
    vocab.encode(["a", "b"])
  with pytest.raises(ValueError, match="eos=True but this vocabulary has no eos"):
    vocab.encode(["a"], eos=True)
  with pytest.raises(ValueError, match="is a string; tokenize it first"):
    vocab.encode("a")


def test_save_load_round_trip(tmp_path):
  corpus = [["b", "a", "c"], ["a", "中", " "]]
  for vocab in (Vocabulary.build(corpus),
                Vocabulary.build(corpus, pad=None, bos=None, unk="<unk>", eos="<eos>"),
                Vocabulary(("x", "<pad>", "y"))):
    path = str(tmp_path / "vocab.txt")
    vocab.save(path)
    assert Vocabulary.load(path) == vocab
  Vocabulary(("<pad>", "a")).save(path)
  assert open(path, encoding="utf-8").read() == "<pad>\na\n"
  loaded = Vocabulary.load(path, pad=None)
  assert loaded.pad_id is None and loaded.tokens == ("<pad>", "a")
  assert sorted(p.name for p in tmp_path.iterdir()) == ["vocab.txt"]   # no temporary left


def test_a_failed_save_keeps_the_old_file(tmp_path):
  path = str(tmp_path / "vocab.txt")
  Vocabulary(("<pad>", "a")).save(path)
  bad = Vocabulary(("<pad>", "a"))
  # Not a str: the save fails partway (the old code had truncated the file by then).
  object.__setattr__(bad, "tokens", ("<pad>", object()))
  with pytest.raises(TypeError):
    bad.save(path)
  assert open(path, encoding="utf-8").read() == "<pad>\na\n"
  assert sorted(p.name for p in tmp_path.iterdir()) == ["vocab.txt"]


@pytest.mark.parametrize("content, message", [
    ("", "the vocabulary file is empty"),
    ("\n", "line 1: '' is malformed|line 1: the token ''"),
    ("a\t3\nb\n", "line 2: 'b' is malformed; every line must be token<TAB>count"),
    ("a\nb\t3\n", "line 2: 'b\\\\t3' is malformed; every line must be token \\(no tab\\)"),
    ("a\t3\nb\tx\n", "line 2: count 'x' must be an integer"),
    ("a\t3\nb\t\u00b2\n", "line 2: count '\u00b2' must be an integer"),  # a digit to isdigit
    ("a\nb\na\n", "line 3: token 'a' already occurs on line 1"),
    ("a\n\nb\n", "line 2: the token '' must be a non-empty string"),
])
def test_load_names_the_path_and_line_of_a_malformed_file(tmp_path, content, message):
  path = tmp_path / "vocab.txt"
  path.write_text(content, encoding="utf-8")
  with pytest.raises(ValueError, match=message) as err:
    Vocabulary.load(str(path))
  assert str(path) in str(err.value)


def test_tokens_the_file_cannot_hold_are_refused():
  with pytest.raises(ValueError, match="without tab or newline"):
    Vocabulary(("a", "b\tc"))


# ------------------------------------------------------------- pointer-generator OOVs


def test_article_oovs_follow_see_et_al():
  # See et al. (2017) data.py: article2ids / abstract2ids / outputids2words.
  vocab = Vocabulary(("<pad>", "<unk>", "<bos>", "<eos>", "the", "cat", "sat"))
  article = ["the", "zebra", "sat", "on", "the", "zebra", "mat"]
  ids, oovs = vocab.encode_extended(article)
  assert oovs == ["zebra", "on", "mat"]
  np.testing.assert_array_equal(ids, [4, 7, 6, 8, 4, 7, 9])
  assert ids.dtype == np.int32
  # The plain encoding of the same article maps the OOVs to unk.
  np.testing.assert_array_equal(vocab.encode(article), [4, 1, 6, 1, 4, 1, 1])
  summary = ["the", "zebra", "sat", "on", "a", "mat"]
  target = vocab.encode_with_oovs(summary, oovs, eos=True)
  np.testing.assert_array_equal(target, [4, 7, 6, 8, 1, 9, 3])  # "a": not in the article
  assert vocab.to_text(target, oovs=oovs) == "the zebra sat on <unk> mat"
  assert vocab.to_text(ids, oovs=oovs) == " ".join(article)
  with pytest.raises(ValueError, match="pass oovs="):
    vocab.to_text(target)
  with pytest.raises(ValueError, match="id 10 is outside \\[0, 10\\)"):
    vocab.to_text([10], oovs=oovs)


def test_article_without_oovs_and_vocab_without_unk():
  vocab = Vocabulary(("<pad>", "a", "b"))
  ids, oovs = vocab.encode_extended(["a", "b"])
  assert oovs == [] and ids.tolist() == [1, 2]
  ids, oovs = vocab.encode_extended(["c", "a"])  # no unk needed for the article
  assert oovs == ["c"] and ids.tolist() == [3, 1]
  assert vocab.encode_with_oovs(["c", "b"], oovs).tolist() == [3, 2]
  with pytest.raises(ValueError, match="'d' is not in the vocabulary"):
    vocab.encode_with_oovs(["d"], oovs)


def test_negative_id_is_outside_the_vocabulary():
  vocab = Vocabulary.build([["a", "b"]])
  with pytest.raises(ValueError, match="id -1 is outside"):
    vocab.to_text([-1])
