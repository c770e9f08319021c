"""The elementwise activations fuselm's experts kernel runs, by the name the IR carries
(fuselm.experts' `activation` argument). Both ways experts are proven read this table: stacked
expert tensors (ops.py) and lists of expert modules (expert_lists.py)."""
from __future__ import annotations

import torch

ACTIVATIONS = {
    "silu": torch.nn.functional.silu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "relu": torch.relu,
    "relu2": lambda x: torch.relu(x) ** 2,  # ReLU squared (transformers' ReLUSquaredActivation)
}
