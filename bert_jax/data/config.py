"""The data pipeline's configuration: the one entry the training loop reads.

Usage (from an experiment config):
  config.data = data_config.get_data_config()
  # python -m bert_jax.main --config configs/bert.py --workdir /tmp/w \
  #   --config.data.corpus=text --config.data.text_files='/corpus/*.txt'
and in the loop: `prepared = loader.prepare(config.data)`, then
`loader.make_train_iterator(config.data, prepared, batch_size_per_process)`.
"""
import ml_collections
from ml_collections import config_dict


def get_data_config() -> ml_collections.ConfigDict:
  """Defaults: the embedded offline corpus, a trained 30,522-token uncased vocab, NSP at 128."""
  c = ml_collections.ConfigDict()

  # Corpus. 'embedded': gensim's Wikipedia excerpt + Lee corpus (offline). 'text':
  # google-research/bert format files. 'tfds': any tfds text dataset by name.
  c.corpus = "embedded"
  c.text_files = ""  # comma-separated globs, for corpus='text'
  c.tfds_name = ""  # for corpus='tfds', e.g. 'wikipedia/20230601.en'
  c.tfds_text_key = "text"  # the text feature of that dataset
  c.tfds_split = "train"  # documents are read from this split, then re-split by hash
  c.tfds_data_dir = config_dict.placeholder(str)  # None: tfds' default data_dir
  c.validation_fraction = 0.02  # of documents, by a hash of their text
  c.max_line_chars = 20000  # longer lines/paragraphs are truncated (and counted)

  # Where prepared documents, vocab and instances live, in config-hashed subdirs.
  c.data_dir = "~/bert_jax_data"

  # Vocabulary. None: train WordPiece on the train documents, save vocab.txt in data_dir.
  # Else a vocab.txt, tokenizer.json, or HF tokenizer directory.
  c.vocab_path = config_dict.placeholder(str)
  c.vocab_size = 30522
  # Uncased = lowercase + strip accents (BertNormalizer). None: a trained vocab is uncased,
  # a given tokenizer keeps its own setting (tokenizer.json / do_lower_case / the vocab).
  c.lowercase = config_dict.placeholder(bool)

  # Instances (offline). mode 'nsp': [CLS] A [SEP] B [SEP] pairs; 'mlm_packed': whole
  # sentences packed in rows (FULL-SENTENCES, or DOC-SENTENCES if not
  # pack_across_documents), segment ids numbering the documents of a row from 1.
  c.mode = "nsp"
  c.pack_across_documents = True
  c.max_seq_length = 128
  c.short_seq_prob = 0.1
  c.dupe_factor = 5  # google uses 10; masking is dynamic here, so pairs are what repeats
  c.shard_documents = 256  # documents per preparation task; NSP's random-B pool
  c.prepare_processes = 0  # worker processes; 0: cpu count for big corpora, 1 for small

  # Masking (online, per step). google-research/bert uses 20 at 128 and 80 at 512.
  c.max_predictions_per_seq = 20
  c.masked_lm_prob = 0.15
  c.whole_word_mask = False
  c.random_token = "unigram"  # 'unigram' (corpus counts) | 'uniform'

  # Loading.
  c.num_workers = 0  # grain worker processes (0: in the training process, threads only)
  c.read_threads = 2  # threads computing batches ahead in each process
  c.prefetch_batches = 4
  c.seed = 0  # preparation randomness; also the default shuffle/mask seed
  return c
