"""Causal language modelling (GPT): packed documents, held-out perplexity and bits per byte."""
