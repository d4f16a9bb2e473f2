"""rumjax.sharding's argument checks (the mesh itself is exercised by the loop's tests)."""

import pytest

from rumjax import sharding


@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5"])
def test_cpu_devices_must_be_a_positive_number_or_auto(value):
  with pytest.raises(ValueError, match=f"cpu_devices must be a positive number or 'auto', "
                                       f"got '{value}'"):
    sharding.use_cpu_devices(value)


def test_cpu_devices_none_changes_nothing():
  assert sharding.use_cpu_devices(None) is None
