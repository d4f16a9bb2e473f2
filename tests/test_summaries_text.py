"""tasks.text.summaries: sentence splitting, LEAD-k, the n-gram repetition rate."""

import pytest

from tasks.text.summaries import lead, repetition_rate, split_sentences


def test_split_sentences_ends_and_non_ends():
  assert split_sentences("It rained. Then it stopped! Did it? Yes.") == [
      "It rained.", "Then it stopped!", "Did it?", "Yes."]
  # Followed by a digit or an opening quote; closing quotes stay with their sentence.
  assert split_sentences('He left in 2015. 300 people came. "Go," she said. He went."') == [
      "He left in 2015.", "300 people came.", '"Go," she said.', 'He went."']
  assert split_sentences('She said "stop." The car stopped.') == [
      'She said "stop."', "The car stopped."]
  # Not an end: a lowercase next word, no whitespace (decimals, URLs), an ellipsis inside.
  assert split_sentences("It grew 3.5 percent, e.g. in cnn.com ads. ok then.") == [
      "It grew 3.5 percent, e.g. in cnn.com ads. ok then."]
  assert split_sentences("Wait... Now go.") == ["Wait...", "Now go."]


def test_split_sentences_keeps_abbreviations():
  text = ("Mr. Smith and Dr. J. Doe met Lt. Col. Jean-Marc Menichini at 9 a.m. Friday in "
          "the U.S. capital, on Jan. 5. It was No. 1 news. St. Louis agreed.")
  assert split_sentences(text) == [
      "Mr. Smith and Dr. J. Doe met Lt. Col. Jean-Marc Menichini at 9 a.m. Friday in the "
      "U.S. capital, on Jan. 5.", "It was No. 1 news.", "St. Louis agreed."]
  # The documented limit: a real sentence end after an initialism is not split.
  assert split_sentences("He moved to the U.S. Then he left.") == [
      "He moved to the U.S. Then he left."]


def test_split_sentences_lines_and_whitespace():
  story = ("WASHINGTON (CNN) -- Officials met.  They talked.\n\n"
           "A headline without a stop\n   \nLast one.\n")
  assert split_sentences(story) == ["WASHINGTON (CNN) -- Officials met.", "They talked.",
                                    "A headline without a stop", "Last one."]
  assert split_sentences("") == [] and split_sentences(" \n\n ") == []
  with pytest.raises(TypeError):
    split_sentences(["not", "a", "string"])


def test_lead():
  sents = ["One.", "Two.", "Three.", "Four."]
  assert lead(sents) == "One.\nTwo.\nThree."
  assert lead(sents, k=1) == "One." and lead(sents, k=0) == ""
  assert lead(sents[:2], k=3) == "One.\nTwo."
  assert lead(split_sentences("Ants run. Bees fly. Cats nap. Dogs bark.")) == (
      "Ants run.\nBees fly.\nCats nap.")
  with pytest.raises(TypeError, match="split_sentences"):
    lead("One. Two.")
  with pytest.raises(ValueError, match="k=-1"):
    lead(sents, k=-1)


def test_repetition_rate():
  # Trigrams abc bca cab abc: the last repeats the first.
  assert repetition_rate("a b c a b c".split()) == pytest.approx(1 / 4)
  assert repetition_rate("a b c d e".split()) == 0.0
  assert repetition_rate("a a a a".split(), n=1) == pytest.approx(3 / 4)
  assert repetition_rate("a a a a".split(), n=2) == pytest.approx(2 / 3)
  assert repetition_rate([1, 2, 1, 2, 1, 2], n=2) == pytest.approx(3 / 5)
  assert repetition_rate(["a", "b"]) == 0.0 and repetition_rate([]) == 0.0
  with pytest.raises(TypeError):
    repetition_rate("a b c a b c")
  with pytest.raises(ValueError, match="n=0"):
    repetition_rate(["a"], n=0)


def test_split_sentences_line_with_trailing_blanks():
  assert split_sentences("It rained. Then it stopped.  \nLast one. ") == [
      "It rained.", "Then it stopped.", "Last one."]
