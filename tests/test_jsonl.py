from bert_jax.runtime import jsonl


def test_rows_skip_a_line_cut_short_and_keep_the_rest(tmp_path):
  path = tmp_path / "metrics.jsonl"
  path.write_text('{"step": 1, "loss": 2.5}\n{"step": 2, "lo\n{"step": 3, "loss": 1.5}\n\n')
  assert list(jsonl.rows(str(path))) == [{"step": 1, "loss": 2.5}, {"step": 3, "loss": 1.5}]
