"""Models: the paper-faithful GPT layer (gpt.py), a Llama-style layer (llama.py), the decoder-only model and
its loss (transformer.py), configurations (config.py) and presets (presets.py, hf_config.py).

``remat.models.presets`` imports no torch; the model classes load torch when first used.
"""

from remat.models.presets import PRESETS, ModelConfig, from_name

__all__ = ["PRESETS", "ModelConfig", "from_name", "Transformer", "build_model", "lm_loss", "random_tokens"]


def __getattr__(name: str):
    if name in ("Transformer", "build_model", "lm_loss", "random_tokens"):
        # lazy: `remat.models.presets` must not load torch; the model classes load it when first used
        from remat.models import transformer
        return getattr(transformer, name)
    raise AttributeError(f"module 'remat.models' has no attribute {name!r}")
