"""The RUM paper's Table 5 against our configs (``tasks.experiments.table5``, issue 47): every
difference has a reason, every reason a difference, and RESULTS.md shows the table that the
configs generate now (so neither can drift)."""

import glob
import os

import pytest

from tasks.experiments import table5

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The TACL paper as Markdown (../shared/papers; absent on a fresh clone).
PAPER_TEXT = glob.glob(os.path.join(REPO, "..", "shared", "papers", "001_*.txt"))


@pytest.fixture(scope="module")
def comparisons():
  return table5.compare_all()


def test_every_difference_has_a_reason_and_every_reason_a_difference(comparisons):
  assert not table5.unexplained(comparisons), (
      "a config differs from the paper's Table 5 without a reason in table5.REASONS "
      "(fix the config or add the reason):\n" + "\n".join(table5.unexplained(comparisons)))
  assert not table5.stale_reasons(comparisons), (
      "reasons for differences that are gone:", table5.stale_reasons(comparisons))


def test_results_md_shows_the_generated_table(comparisons):
  with open(os.path.join(REPO, "RESULTS.md"), encoding="utf-8") as f:
    text = f.read()
  assert table5.section(text) == table5.markdown(comparisons).strip(), (
      "RESULTS.md's Table 5 section is not what the configs give now; regenerate it: "
      "python -m tasks.experiments.table5 --write=RESULTS.md")
  assert "python -m tasks.experiments.table5 --write=RESULTS.md" in text


def test_the_papers_variants_are_the_papers_models(comparisons):
  by_row = {(c.row.config, c.row.variant): c for c in comparisons}
  for key in (("copying", "T500"), ("recall", "T30"), ("recall", "T50"),
              ("babi", "sentence"), ("babi", "sentence_attention"), ("ptb", "fs_rum2"),
              ("cnn_dailymail", "decrum")):
    assert by_row[key].differences == {}, (key, by_row[key].differences)
  assert by_row[("ptb", "fs_rum2")].where == "slow cell"
  assert by_row[("cnn_dailymail", "decrum")].where == "decoder"
  assert by_row[("summ_synthetic", None)].where == ""      # LEAD: no RUM cell
  # The bAbI fix of issue 47: the sentence level's best RUM is lam 1 (Table 2 line 14).
  assert by_row[("babi", "sentence")].fields["λ"] == 1
  assert set(by_row[("babi", None)].differences) == {"λ"}
  # Every task of Table 5 has its default config and a paper variant compared.
  assert {r.task for r in table5.ROWS if r.variant is None} == set(table5.PAPER)
  assert {r.task for r in table5.ROWS if r.variant is not None} == set(table5.PAPER)


def test_a_config_that_leaves_table_5_is_caught(monkeypatch):
  load = table5.load_config

  def changed(row):
    config = load(row)
    if row.config == "ptb":
      config.model.slow_lam = 1.0          # Table 5 (D): lam 0
      config.model.slow_activation = "sigmoid"
      config.model.slow_update_gate = False
    return config

  monkeypatch.setattr(table5, "load_config", changed)
  c = table5.compare(table5.Row("D", "ptb", "fs_rum2"))
  assert set(c.differences) == {"λ", "f", "update gate"}
  assert c.differences["λ"] == "paper: 0"
  assert c.differences["update gate"] == "paper: necessary"
  assert len(table5.unexplained([c])) == 3
  # A gate that Table 5 calls "not needed" may be off.
  monkeypatch.setattr(table5, "load_config", load)
  c = table5.compare(table5.Row("B", "recall", "T30"))
  c.fields["update gate"] = False
  assert table5._matches("update gate", table5.PAPER["B"], False)
  assert not table5._matches("η", table5.PAPER["D"], None)


def test_replace_section_round_trip():
  text = f"before\n{table5.BEGIN}\nold\n{table5.END}\nafter\n"
  new = table5.replace_section(text, "| a |")
  assert new == f"before\n{table5.BEGIN}\n| a |\n{table5.END}\nafter\n"
  assert table5.section(new) == "| a |"
  with pytest.raises(ValueError, match="no section"):
    table5.section("no markers")


@pytest.mark.skipif(not PAPER_TEXT, reason="the papers' text (../shared/papers) is absent")
def test_paper_rows_are_the_papers_table_5():
  with open(PAPER_TEXT[0], encoding="utf-8") as f:
    lines = f.read().splitlines()
  end = next(i for i, line in enumerate(lines) if line.startswith("Table 5:"))
  rows = [line for line in lines[end - 7:end] if line.startswith("(")]
  ours = ["\t".join([f"({p.task})", p.update_gate] + [table5._paper_value(p, what) for what
                                                      in ("f", "λ", "η")])
          for p in table5.PAPER.values()]
  assert rows == ours
