"""`visualize attention`: the table of one head (or the head mean) and heatmap PNGs.

With --layer and --head (or --mean) one matrix is printed and drawn with its numbers;
leaving either out draws a grid: all layers x heads, one layer's heads, or one head
through the layers. --html also writes the head view of every layer and head.
"""
from __future__ import annotations

import numpy as np

from bert_jax.inference import inputs
from bert_jax.inference.loader import InputError, Loaded
from bert_jax.visualize import attention, head_view, plot


def compute(model: Loaded, text: str, text_b: str | None, which: str | None):
  """(weights [layers, heads, q, kv], row tokens, column tokens, which) for one input."""
  which = which or attention.KINDS[model.kind][0]
  if which not in attention.KINDS[model.kind]:
    raise InputError(f"--attention {which} does not exist in a {model.kind} model "
                     f"(choose from {', '.join(attention.KINDS[model.kind])})")
  if not text.strip():
    raise InputError("--text is empty")
  tok = model.tokenizer
  if model.kind == "bert":
    ids, segments, tokens = inputs.bert_inputs(tok, text, text_b)
    if len(ids) > model.config.max_len:
      raise InputError(f"the input has {len(ids)} tokens; this model takes at most "
                       f"{model.config.max_len}")
    w = attention.bert_weights(model.config, model.params["bert"], [ids], None, [segments])
    return w[:, 0], tokens, tokens, which
  if model.kind == "gpt":
    if text_b:
      raise InputError("--text_b is for BERT sentence pairs and translations, not GPT")
    ids, tokens = inputs.plain_tokens(tok, text)
    return attention.gpt_weights(model.config, model.params, [ids])[:, 0], tokens, tokens, which
  # Encoder-decoder: the source sentence and its translation (reference or the model's).
  if not text_b:
    raise InputError("an encoder-decoder checkpoint needs --text_b, the target sentence "
                     "(e.g. the translation of --text)")
  src, src_tokens = inputs.plain_tokens(tok, text)
  tgt_in, tgt_tokens = attention.shifted_targets(tok, text_b)
  w = attention.seq2seq_weights(model.config, model.params, [src], tgt_in)[which][:, 0]
  rows = src_tokens if which == "encoder" else tgt_tokens
  cols = tgt_tokens if which == "self" else src_tokens
  return w, rows, cols, which


def _index(value, size: int, name: str, unit: str) -> int:
  if not -size <= value < size:
    raise InputError(f"--{name} {value} out of range: this model has {size} {unit} "
                     f"(0..{size - 1})")
  return value % size


def select(weights: np.ndarray, layer, head, mean: bool):
  """-> (panels [n_layers, n_heads, q, kv], layer labels, head labels)."""
  num_layers, num_heads = weights.shape[:2]
  if head is not None and mean:
    raise InputError("give --head or --mean, not both")
  layers = list(range(num_layers)) if layer is None else [_index(layer, num_layers, "layer",
                                                                  "layers")]
  w = weights[layers]
  if mean:
    return w.mean(axis=1, keepdims=True), layers, ["mean"]
  heads = list(range(num_heads)) if head is None else [_index(head, num_heads, "head", "heads")]
  return w[:, heads], layers, heads


def draw(panels: np.ndarray, layers, heads, rows, cols, path: str, title: str) -> str:
  n_l, n_h, q, k = panels.shape
  if n_l == n_h == 1:
    side = max(4.0, 0.45 * max(q, k) + 1.6)
    fig, axes = plot.subplots(1, 1, side + 0.8, side)
    image = plot.heatmap(axes[0, 0], panels[0, 0], rows, cols, annotate=max(q, k) <= 16,
                         vmin=0, vmax=1, title=title)
    fig.colorbar(image, ax=axes[0, 0], fraction=0.046, pad=0.04)
    fig.tight_layout()
    return plot.save(fig, path)
  cell = 1.6 if max(q, k) <= 16 else 2.2
  fig, axes = plot.subplots(n_l, n_h, cell * n_h + 0.6, cell * n_l + 0.6)
  for a, layer in enumerate(layers):
    for b, head in enumerate(heads):
      ax = axes[a, b]
      plot.heatmap(ax, panels[a, b], vmin=0, vmax=1)
      ax.set_xticks([]), ax.set_yticks([])
      if a == 0:
        ax.set_title(f"head {head}", fontsize=8)
      if b == 0:
        ax.set_ylabel(f"layer {layer}", fontsize=8)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  return plot.save(fig, path)


def run(args, model: Loaded) -> int:
  weights, rows, cols, which = compute(model, args.text, args.text_b, args.attention)
  panels, layers, heads = select(weights, args.layer, args.head, args.mean)
  what = {"self": "self-attention", "cross": "cross-attention (target x source)",
          "encoder": "encoder self-attention"}[which]
  if model.kind == "gpt":
    what = "causal self-attention"
  if panels.shape[:2] == (1, 1):
    label = f"layer {layers[0]}, " + ("mean of heads" if args.mean else f"head {heads[0]}")
    print(f"{what}, {label} (rows: queries, columns: keys; each row sums to 1)")
    print(attention.format_table(panels[0, 0], rows, cols))
    title = f"{what}, {label}"
  else:
    title = f"{what}: layers x heads"
  print(f"wrote {draw(panels, layers, heads, rows, cols, args.output, title)}")
  if args.html:
    print(f"wrote {head_view.write(args.html, weights, rows, cols, title=what)}")
  return 0
