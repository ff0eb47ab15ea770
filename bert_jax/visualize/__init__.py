"""Pictures of what the models learned: `python -m bert_jax.visualize --help`."""
