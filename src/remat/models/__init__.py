"""Models: the paper-faithful GPT layer (gpt.py), a Llama-style layer (llama.py), the decoder-only model and
its loss (transformer.py), configurations and presets (presets.py, hf_config.py)."""

from remat.models.presets import PRESETS, ModelConfig, from_name
from remat.models.transformer import Transformer, build_model, lm_loss, random_tokens

__all__ = ["PRESETS", "ModelConfig", "from_name", "Transformer", "build_model", "lm_loss", "random_tokens"]
