"""bert_jax/cli.py: the argparse front of the CLIs whose main returns an exit status."""
import argparse

from bert_jax import cli


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
