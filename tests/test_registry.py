"""rumjax.registry.Registry, and the cell registry built on it."""

import flax.linen as nn
import pytest

from rumjax import cells
from rumjax.registry import Registry, decorator, did_you_mean, unknown_name_message


def _fruits():
  fruits = Registry("fruit")
  register_fruit = decorator(fruits)

  @register_fruit("apple")
  def apple():
    return "apple"

  fruits.register("apricot", object())
  fruits.register("banana", "yellow")
  return fruits, apple


def test_register_and_get():
  fruits, apple = _fruits()
  assert fruits.get("apple") is apple and apple() == "apple"  # the decorator returns it
  assert fruits.get("banana") == "yellow"
  assert fruits.names() == list(fruits) == ["apple", "apricot", "banana"]
  assert len(fruits) == 3 and "apple" in fruits and "cherry" not in fruits
  assert [name for name, _ in fruits.items()] == fruits.names()
  assert ["x"] not in fruits  # an unhashable name (e.g. a list from a config): not there


def test_duplicates():
  fruits, apple = _fruits()
  assert fruits.register("apple", apple) is apple  # the same object again: a no-op
  assert len(fruits) == 3
  with pytest.raises(ValueError, match="a fruit is already registered as 'apple'"):
    fruits.register("apple", lambda: "other")
  with pytest.raises(ValueError, match="a fruit is already registered as 'banana'"):
    fruits.register("banana", "green")  # equal is not enough: the same object
  for bad in ("", None, 3):
    with pytest.raises(ValueError, match="non-empty string"):
      fruits.register(bad, "x")


def test_unknown_name_suggests_close_names():
  fruits, _ = _fruits()
  with pytest.raises(ValueError) as err:
    fruits.get("appel")
  message = str(err.value)
  assert message == ("unknown fruit 'appel'; known fruits are ['apple', 'apricot', "
                     "'banana']; did you mean 'apple'?")
  assert "\n" not in message
  with pytest.raises(ValueError, match=r"unknown fruit 'kiwi'; known fruits are "
                                       r"\['apple', 'apricot', 'banana'\]\.$"):
    fruits.get("kiwi")
  with pytest.raises(ValueError, match="unknown fruit"):
    fruits.get(["apple"])
  assert did_you_mean("appl", ["apple", "apply", "banana"]) == (
      "did you mean 'apply' or 'apple'?")  # closest first
  assert did_you_mean("zzz", ["apple"]) == ""
  assert unknown_name_message("fruit", "x", {"b": 1, "a": 2}) == (
      "unknown fruit 'x'; known fruits are ['a', 'b'].")


def test_cell_registry():
  assert set(cells.cell_names()) >= {"eurnn", "fwln", "goru", "gru", "lnlstm", "lstm", "rum",
                                     "urnn"}
  assert cells.cell_names() == cells.CELLS.names()
  assert cells.get_cell_class("goru") is cells.GORUCell
  with pytest.raises(ValueError, match=r"unknown cell 'rnm'; known cells are \[.*'rum'.*\]; "
                                       r"did you mean 'rum'\?"):
    cells.make_cell("rnm", 8)
  with pytest.raises(ValueError, match=r"has no option\(s\) \['zonout'\].*did you mean "
                                       r"'zoneout'"):
    cells.make_cell("lnlstm", 8, zonout=0.1)
  gru = cells.get_cell_class("gru")   # Flax's GRUCell with the policy's precision field
  assert issubclass(gru, nn.GRUCell) and "precision" in cells.cell_fields("gru")
  assert cells.register_cell("gru", gru) is gru  # re-registering: no-op
  with pytest.raises(ValueError, match="already registered as 'gru'"):
    cells.register_cell("gru", nn.LSTMCell)
  assert cells.cell_fields("goru")[:3] == ["features", "capacity", "fft"]
  assert cells.make_urnn_optimizer in cells.optimizer_wrappers()
  assert cells.OPTIMIZER_WRAPPERS.get("urnn") is cells.make_urnn_optimizer
