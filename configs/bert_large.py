"""BERT-large (24 layers x 1024, 16 heads) with the paper's recipe (Devlin et al. 2019).

Run:
  python -m bert_jax.main --config configs/bert_large.py --workdir /path/to/bert_large
The mesh shards weights and optimizer state over 'fsdp' (4-way) and data over the rest.
"""
from bert_jax.train.defaults import bert_pretraining_config


def get_config(arg=None):
  c = bert_pretraining_config("bert/large", arg)
  c.mesh_shape = (-1, 4, 1)
  return c
