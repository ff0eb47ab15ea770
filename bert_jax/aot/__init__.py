"""Ahead-of-time compilation of a config's steps for a TPU topology, without a TPU.

`python -m bert_jax.aot --config configs/bert_large.py --topology v5e:4x4` compiles the
train and eval steps with the TPU compiler (the libtpu wheel, no TPU attached) and
reports per chip what a pod would see: HBM against capacity, state bytes, model FLOPs,
the roofline lower bound of the step time and the collectives. Modules: chips (the
chip table, topologies), compile (state + steps exactly as train/loop.py builds them),
hlo (collectives of the compiled HLO), report (the numbers), check (the whole run).
"""
