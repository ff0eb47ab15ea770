"""Checkpoints: the orbax manager (manager.py), reading a step without one (read.py), the
data iterator's state saved beside a step (data_state.py), and loading pretrained
weights for `init_from` (pretrained.py)."""
