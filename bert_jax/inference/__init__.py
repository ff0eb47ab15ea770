"""A trained model put to use, for the commands, the pictures and the Python API alike:
loading a workdir or a Hugging Face directory (loader.py), encoding texts into vectors in
packed passes (encode.py, planned by passes.py), the top-k tokens at each [MASK]
(fill_mask.py), and a text's BERT inputs (inputs.py)."""
