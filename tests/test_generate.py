"""The generate CLI: bad input is one clear line and exit status 2; long prompts keep their
end; generation from the GPT-2 fixture equals transformers' greedy output."""
import pathlib

import numpy as np
import pytest

from bert_jax import generate

HF = pathlib.Path(__file__).resolve().parent / "testdata" / "hf"
TINY = str(HF / "tiny_gpt2")


def _run(capsys, *argv):
  code = generate.main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


@pytest.mark.parametrize("argv,message", [
    (["--prompt", "  "], "--prompt is empty"),
    (["--prompt", "hi", "--tokenizer", "{tmp}/spm.model"], "unknown tokenizer file"),
    (["--prompt", "hi", "--tokenizer", "{tmp}"], "No GPT-2 tokenizer"),
    (["--input", "{tmp}/empty_line.txt"], "empty prompt on line(s) [2]"),
    (["--input", "{tmp}/missing.txt"], "does not exist"),
    (["--prompt", "hi", "--top_p", "0"], "--top_p=0.0 must be in (0, 1]"),
    (["--prompt", "hi", "--max_new_tokens", "48"], "leaves no room for a prompt"),
])
def test_bad_input_is_one_clear_error_with_status_2(tmp_path, capsys, argv, message):
  (tmp_path / "spm.model").write_bytes(b"\x00\x01")
  (tmp_path / "empty_line.txt").write_text("first\n\nthird\n")
  argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
  code, out, err = _run(capsys, "--checkpoint", TINY, *argv)
  assert code == 2 and not out
  assert err.startswith("generate: error: ") and message in err and err.count("\n") == 1


def test_a_checkpoint_that_is_not_a_gpt_is_a_clear_error(capsys):
  code, _, err = _run(capsys, "--checkpoint", str(HF / "tiny_bert"), "--prompt", "hi")
  assert code == 2 and "model_type 'bert' is not 'gpt2'" in err


def test_missing_flags_exit_2(capsys):
  assert generate.main(["--checkpoint", TINY]) == 2  # neither --prompt nor --input


def test_long_prompts_keep_their_last_tokens():
  from bert_jax.interop import gpt2  # pylint: disable=g-import-not-at-top
  tok = gpt2.load_gpt2_tokenizer(TINY)
  text = "The cat sat on the mat. " * 10
  full = tok.encode(text).ids
  ids, truncated = generate.encode_prompts(tok, [text, "The cat"], context=10)
  assert truncated == 1 and ids[0] == full[-10:] and ids[1] == tok.encode("The cat").ids


def test_greedy_cli_output_is_transformers_greedy_continuation(capsys):
  from bert_jax.interop import gpt2  # pylint: disable=g-import-not-at-top
  ref = np.load(HF / "tiny_gpt2_outputs.npz")
  tok = gpt2.load_gpt2_tokenizer(TINY)
  prompt = tok.decode(ref["prompts"][0].tolist())
  assert tok.encode(prompt).ids == ref["prompts"][0].tolist()
  code, out, err = _run(capsys, "--checkpoint", TINY, "--prompt", prompt, "--temperature", "0",
                        "--max_new_tokens", "20")
  assert code == 0, err
  assert out == "=== prompt 0\n" + tok.decode(ref["greedy"][0].tolist()) + "\n"


def test_too_long_prompt_warns_and_still_generates(capsys):
  code, out, err = _run(capsys, "--checkpoint", TINY, "--prompt", "The cat sat on the mat. " * 20,
                        "--max_new_tokens", "8", "--top_k", "5", "--seed", "1")
  assert code == 0 and "left-truncated to their last 40" in err and out.startswith("=== prompt 0")


def test_matmul_dtype_reaches_the_generating_model(capsys, monkeypatch):
  seen = []
  monkeypatch.setattr(generate, "generate",
                      lambda config, params, ids, **kw: seen.append(config) or [[]] * len(ids))
  code, _, err = _run(capsys, "--checkpoint", TINY, "--prompt", "The cat", "--matmul_dtype",
                      "bfloat16", "--max_new_tokens", "8")
  assert code == 0, err
  assert seen[0].matmul_dtype == "bfloat16"
  code, _, err = _run(capsys, "--checkpoint", TINY, "--prompt", "x", "--matmul_dtype", "int8")
  assert code == 2 and "invalid choice: 'int8'" in err
