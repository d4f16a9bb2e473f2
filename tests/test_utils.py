"""Files written atomically (rumjax.utils.write_text / write_json / write_jsonl): a failed
write keeps the old file, nothing is left behind, and two writers of one file (two
``launch.reproduce --models=...`` in one experiment folder) leave one whole version."""

import multiprocessing
import os

import numpy as np
import pytest

from rumjax import utils


def _write_many(path, marker, times):
  for _ in range(times):
    utils.write_json(path, {"writer": marker, "payload": [marker] * 20_000})


def test_two_processes_writing_one_file_leave_one_whole_version(tmp_path):
  path = str(tmp_path / "results.json")
  ctx = multiprocessing.get_context("spawn")
  procs = [ctx.Process(target=_write_many, args=(path, m, 40)) for m in ("a", "b")]
  for p in procs:
    p.start()
  seen = set()
  while any(p.is_alive() for p in procs):
    if os.path.exists(path):
      record = utils.read_json(path)     # never half a file, never a mix of the two
      assert record["payload"] == [record["writer"]] * 20_000
      seen.add(record["writer"])
  for p in procs:
    p.join()
    assert p.exitcode == 0
  final = utils.read_json(path)
  assert final["payload"] == [final["writer"]] * 20_000
  assert os.listdir(tmp_path) == ["results.json"]   # no temporary file left


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path):
  path = str(tmp_path / "results.json")
  utils.write_json(path, {"ok": 1})
  with pytest.raises(TypeError):
    utils.write_json(path, {"bad": object()})      # not JSON: fails before the rename
  assert utils.read_json(path) == {"ok": 1}
  assert os.listdir(tmp_path) == ["results.json"]


def test_jsonl_and_text_round_trip_utf8(tmp_path):
  rows = [{"label": "科技", "i": 0}, {"label": "体育", "i": 1}]
  utils.write_jsonl(str(tmp_path / "a.jsonl"), rows)
  assert utils.read_jsonl(str(tmp_path / "a.jsonl")) == rows
  utils.write_text(str(tmp_path / "b.md"), "| a |\n")
  assert (tmp_path / "b.md").read_text(encoding="utf-8") == "| a |\n"
  assert oct(os.stat(tmp_path / "b.md").st_mode & 0o777) == oct(0o644)


def test_host_cpu_reads_the_model_name(tmp_path):
  info = tmp_path / "cpuinfo"
  info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                  "model name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
  assert utils.host_cpu(str(info)) == "AMD EPYC 7B13"


def test_host_cpu_without_cpuinfo_falls_back_to_platform(tmp_path, monkeypatch):
  monkeypatch.setattr(utils.platform, "processor", lambda: "")
  monkeypatch.setattr(utils.platform, "machine", lambda: "x86_64")
  assert utils.host_cpu(str(tmp_path / "missing")) == "x86_64"
  (tmp_path / "empty").write_text("processor\t: 0\nmodel name\t: \n")
  assert utils.host_cpu(str(tmp_path / "empty")) == "x86_64"


def test_write_text_creates_missing_folders(tmp_path):
  """launch.predict / babi_all --results in a new folder failed after the work was done."""
  path = tmp_path / "a" / "b" / "out.json"
  utils.write_json(str(path), {"x": 1})
  assert utils.read_json(str(path)) == {"x": 1}


def test_unreadable_json_is_a_one_line_error_naming_the_file(tmp_path):
  """A cut-short config.json or metrics.jsonl gave json's message without the file (or a
  traceback in launch.evaluate and launch.plot)."""
  from rumjax import configs
  bad = tmp_path / "config.json"
  bad.write_text('{"task": "recall", ')
  with pytest.raises(ValueError, match=rf"^{bad} is not valid JSON \(.*\): was it cut "
                     r"short or edited by hand\? Restore it from a copy\.$"):
    utils.read_json(str(bad))
  with pytest.raises(ValueError, match=rf"^{bad} is not valid JSON"):
    configs.load_workdir_config(str(tmp_path), lambda name: None)
  rows = tmp_path / "metrics.jsonl"
  rows.write_text('{"step": 1}\n{"step": 2, "lo\n')
  with pytest.raises(ValueError, match=rf"^{rows} is not valid JSON \(line 2: "):
    utils.read_jsonl(str(rows))
  bad.write_text("[1, 2]")
  with pytest.raises(ValueError, match=r"has no 'task': it is not a training run's"):
    configs.load_workdir_config(str(tmp_path), lambda name: None)


def test_rows_per_second_leaves_out_the_first_batch():
  rows = [({"mask": np.array([1, 1, 0])}, None), ({"mask": np.array([1, 1, 1])}, None),
          ({"x": np.zeros(4)}, None)]
  assert utils.rows_per_second(rows, [10.0, 1.0, 1.0]) == {"rows_per_sec": 3.5,
                                                           "first_batch_sec": 10.0}


def test_failed_write_leaves_no_temporary_file(tmp_path):
  path = tmp_path / "out.json"
  utils.write_text(str(path), "old")
  with pytest.raises(TypeError):
    utils.write_text(str(path), 123)
  assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_config_helpers_read_flags_and_refuse_unknown_saved_fields():
  """configs.argv_value reads a flag before absl parses (the last one wins, a value may hold
  '='); update_from_dict refuses a saved field the config lacks (a config.json of another
  version) instead of adding it."""
  import ml_collections
  from rumjax import configs
  argv = ["train", "--workdir=/tmp/a", "--task", "recall", "--workdir=/tmp/lr=1e-3"]
  assert configs.argv_value(argv, "workdir") == "/tmp/lr=1e-3"
  assert configs.argv_value(argv, "task") == "recall"
  assert configs.argv_value(argv, "variant", "T30") == "T30"
  config = ml_collections.ConfigDict({"seed": 0, "model": {"hidden_size": 8}})
  configs.update_from_dict(config, {"seed": 3, "model": {"hidden_size": 16}})
  assert (config.seed, config.model.hidden_size) == (3, 16)
  with pytest.raises(ValueError, match=r"^config field 'model\.nope' \(from the saved config\) "
                                       r"is not a field of this task's config"):
    configs.update_from_dict(config, {"model": {"nope": 1}})
  assert "nope" not in config.model
