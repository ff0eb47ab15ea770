"""Layer-wise learning-rate decay and fraction-based warmup (optim.py)."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from bert_jax.train import optim
from bert_jax.train.defaults import train_config


def _tree(scan: bool, layers: int = 3):
  w = jnp.ones((2, 2))
  enc = ({"layers": {"mlp": {"kernel": jnp.ones((layers, 2, 2))}}} if scan else
         {f"layers_{i}": {"mlp": {"kernel": w}} for i in range(layers)})
  return {"bert": {"embeddings": {"token": w}, "encoder": enc, "pooler": {"kernel": w}},
          "classifier": {"kernel": w}}


def test_layer_depth_factors_scanned_and_unrolled_agree():
  d = 0.5
  unrolled = optim.layer_depth_factors(_tree(False), d)
  assert unrolled["classifier"]["kernel"] == 1.0
  assert unrolled["bert"]["pooler"]["kernel"] == d
  assert [unrolled["bert"]["encoder"][f"layers_{i}"]["mlp"]["kernel"] for i in range(3)] == \
      [d ** 3, d ** 2, d ** 1]  # layer i (0-based) of L=3: decay^(L - i)
  assert unrolled["bert"]["embeddings"]["token"] == d ** 4
  scanned = optim.layer_depth_factors(_tree(True), d)
  stacked = scanned["bert"]["encoder"]["layers"]["mlp"]["kernel"]
  np.testing.assert_allclose(stacked.reshape(-1), [d ** 3, d ** 2, d ** 1])
  assert stacked.shape == (3, 1, 1)


def test_layerwise_decay_scales_the_adamw_update_per_layer():
  cfg = train_config(learning_rate=0.1, warmup_steps=0, grad_clip_norm=0.0, weight_decay=0.0,
                     schedule="constant")
  plain, _ = optim.make_optimizer(cfg, 10)
  cfg.layerwise_lr_decay = 0.5
  decayed, _ = optim.make_optimizer(cfg, 10)
  params = _tree(True)
  grads = jax.tree_util.tree_map(lambda x: 0.3 * x, params)
  u0, _ = plain.update(grads, plain.init(params), params)
  u1, _ = decayed.update(grads, decayed.init(params), params)
  ratio = jax.tree_util.tree_map(lambda a, b: b / a, u0, u1)
  np.testing.assert_allclose(ratio["bert"]["encoder"]["layers"]["mlp"]["kernel"][:, 0, 0],
                             [0.125, 0.25, 0.5], rtol=1e-6)
  np.testing.assert_allclose(ratio["classifier"]["kernel"], 1.0, rtol=1e-6)


def test_warmup_fraction_sets_warmup_from_the_total_steps():
  cfg = ml_collections.ConfigDict(dict(learning_rate=1.0, warmup_steps=0, schedule="linear",
                                       warmup_fraction=0.1))
  sched = optim.learning_rate_schedule(cfg, 200)  # 20 warmup steps, then linear to 0
  np.testing.assert_allclose([sched(0), sched(10), sched(20), sched(110), sched(200)],
                             [0.0, 0.5, 1.0, 0.5, 0.0], atol=1e-6)


def test_cosine_schedule_follows_the_formula_down_to_its_floor():
  cfg = train_config(learning_rate=6e-4, warmup_steps=10, schedule="cosine")
  cfg.min_lr_fraction = 0.1
  sched = optim.learning_rate_schedule(cfg, total_steps=110)
  assert float(sched(5)) == np.float32(6e-4 * 5 / 10)
  for step in (10, 35, 60, 110):
    progress = (step - 10) / 100
    want = 6e-5 + (6e-4 - 6e-5) * 0.5 * (1 + np.cos(np.pi * progress))
    np.testing.assert_allclose(float(sched(step)), want, rtol=1e-5)


def test_gpt_recipe_decays_no_norm_bias_or_embedding():
  params = {"token_embedder": {"embedding": jnp.ones((8, 4))},
            "position_embedder": {"embedding": {"embedding": jnp.ones((6, 4))}},
            "mlp": {"wi": {"kernel": jnp.ones((4, 8)), "bias": jnp.ones((8,))}},
            "final_norm": {"scale": jnp.ones((4,)), "bias": jnp.ones((4,))}}
  gpt = optim.decay_mask(params, embeddings=False)
  bert = optim.decay_mask(params)
  decayed = [jax.tree_util.keystr(k) for k, v in jax.tree_util.tree_leaves_with_path(gpt) if v]
  assert decayed == ["['mlp']['wi']['kernel']"]
  assert bert["token_embedder"]["embedding"] and bert["mlp"]["wi"]["kernel"]
