"""Which chips are here (platforms.py: detection without starting a backend; chips.py:
datasheet figures and TPU topologies) and the CPU tuning that entry points opt into."""
