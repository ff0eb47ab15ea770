"""Model interchange: Hugging Face BERT checkpoints (safetensors + numpy, no torch)."""
from bert_jax.interop.hf import load_hf_bert, load_hf_config, save_hf_bert

__all__ = ["load_hf_bert", "load_hf_config", "save_hf_bert"]
