"""Model interchange: Hugging Face BERT checkpoints (safetensors + numpy, no torch)."""
from bert_jax.interop.hf_config import load_hf_config
from bert_jax.interop.hf_load import load_hf_bert
from bert_jax.interop.hf_save import save_hf_bert

__all__ = ["load_hf_bert", "load_hf_config", "save_hf_bert"]
