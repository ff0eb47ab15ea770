"""Sentence splitting (data/text_cleaning.py): abbreviations, initials, quotes."""
from bert_jax.data import text_cleaning


def test_split_sentences():
  assert text_cleaning.split_sentences(
      'Dr. Smith met J. R. Hartley in the U.S. Army. "Go!" he said. Was it 3 p.m. already? '
      'See Fig. 3 for e.g. details... Yes. (Then he left.) 1999 was good.') == [
          "Dr. Smith met J. R. Hartley in the U.S. Army.", '"Go!" he said.',
          "Was it 3 p.m. already?", "See Fig. 3 for e.g. details...", "Yes.",
          "(Then he left.)", "1999 was good."]
  assert text_cleaning.split_sentences("  ") == []
  assert text_cleaning.split_sentences("no final stop") == ["no final stop"]
