"""bert_jax/apps/cli.py: absl's --config parser (bert_jax.main, aot) and the argparse front of
the CLIs whose main returns an exit status."""
import argparse
import os
import sys

import pytest

from bert_jax import cli, configs


def _parser():
  p = argparse.ArgumentParser(prog="tool")
  p.add_argument("--top_k", type=int, default=5)
  return p


def test_parse_args_returns_the_namespace_or_argparses_exit_status(capsys):
  assert cli.parse_args(_parser(), ["--top_k", "3"]).top_k == 3
  assert cli.parse_args(_parser(), ["--top_k", "three"]) == 2
  assert "tool: error: argument --top_k: invalid int value: 'three'" in capsys.readouterr().err
  assert cli.parse_args(_parser(), ["--help"]) == 0
  assert "usage: tool [-h] [--top_k TOP_K]" in capsys.readouterr().out


def _parse_main_flags(*argv):
  """bert_jax.main's parse_flags on argv, as `python -m bert_jax.main` runs it."""
  from unittest import mock  # pylint: disable=g-import-not-at-top
  from bert_jax import main  # defines --config / --workdir  # pylint: disable=g-import-not-at-top
  main.FLAGS.unparse_flags()
  for name in [n for n in main.FLAGS if n.startswith("config.")]:
    delattr(main.FLAGS, name)  # config_flags defines one flag per override, per parse
  # config_flags loads the file into sys.modules["config_config"], over the last one's names.
  sys.modules.pop("config_config", None)
  argv = ["bert_jax.main", *argv, "--workdir=unused"]
  try:
    with mock.patch.object(sys, "argv", argv):  # config_flags reads overrides from sys.argv
      main.parse_flags(argv)
  finally:
    main.FLAGS.unparse_flags()


@pytest.mark.parametrize("body, arg, expected", [
    # The configs' own check of their arg (config_flags wraps it in a traceback).
    (None, "demoo", "error: --config {path}:demoo: unknown arg 'demoo': expected one of "
                    "('bert', 'demo')"),
    ("def get_config(arg=None)\n  return 1\n", None,
     "error: --config {path}: SyntaxError: expected ':' ({path}, line 1)"),
    ("x = 1\n", None,
     "error: --config {path}: AttributeError: module 'config_config' has no attribute "
     "'get_config'"),
    ("def get_config(arg=None):\n  return {}['a']\n", None, "error: --config {path}: KeyError: 'a'"),
])
def test_a_config_file_that_fails_is_one_line_naming_it(tmp_path, capsys, body, arg, expected):
  path = os.path.join(configs.CONFIG_DIR, "bert_tiny.py")
  if body is not None:
    path = str(tmp_path / "mine.py")
    with open(path, "w", encoding="utf8") as f:
      f.write(body)
  with pytest.raises(SystemExit) as exit_info:
    _parse_main_flags(f"--config={path}" + (f":{arg}" if arg else ""))
  assert exit_info.value.code == 2
  assert capsys.readouterr().err == expected.format(path=path) + "\n"


def test_a_misspelled_override_still_names_the_key(capsys):
  with pytest.raises(SystemExit) as exit_info:
    _parse_main_flags(f"--config={configs.CONFIG_DIR}/bert_tiny.py", "--config.model.num_layer=2")
  assert exit_info.value.code == 2
  assert capsys.readouterr().err == (
      "error: unknown config key among ['--config.model.num_layer=2']: 'num_layer'; did you "
      "mean \"num_layers\" instead of \"num_layer\"?\n")


def test_overwritten_input_names_an_output_that_is_an_input(tmp_path):
  src = tmp_path / "src.de"
  src.write_text("eins\n")
  link = tmp_path / "link.de"
  link.symlink_to(src)
  inputs = [("--input", str(src)), ("--reference", None)]
  assert cli.overwritten_input(str(link), inputs) == (
      f"--output {link} is the --input {src}: writing it would destroy what the command "
      "reads; give another file")
  assert cli.overwritten_input(str(src), inputs, "--html").startswith(f"--html {src} is the")
  for fine in (str(tmp_path / "out.txt"), "-", None, str(tmp_path)):
    assert cli.overwritten_input(fine, inputs) is None
