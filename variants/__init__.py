"""
Named model presets: one file per published model, variants/<name>.py, each holding a docstring (the
paper, the section/table, what is switched on, the parameter count it gives vs the paper's) and
`CONFIG = dict(...)`, a dict of GPTConfig fields only (no training settings).

    import variants
    variants.available()                 # ['baseline', 'cgpt', 'deep_thinking', ...]
    cfg = variants.load("lgpt")           # a fresh dict, safe to modify
    model = GPT(GPTConfig(**cfg))

In train.py a config key `variant = "lgpt"` applies the preset on top of GPTConfig's defaults, and every
model key set explicitly (config file or command line) wins over it, e.g. `--vocab_size` or `--n_layer`.
Fields a preset leaves out keep GPTConfig's defaults (dropout in particular: it is a training choice).

Presets by paper (text in ../shared/papers/):
  004 ParallelGPT/LinearGPT/ConvGPT:  gpt, pgpt, lgpt, cgpt            (char-level Shakespeare, ~5-11M)
  000 MobileLLM-style compact model:  baseline, layer_sharing, enhanced_residual, deep_thinking (~135M)
  001 ShishuLM and its parents:       mobilellm_125m, mobilellm_600m, shishulm_125, shishulm_600
  002 GPT-Efficio:                    efficio (the paper gives only d_model and totals: see its file)
"""

import importlib
import pkgutil


def available():
    """Names of all presets: the modules of this package."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def load(name):
    """A copy of variants/<name>.py's CONFIG (GPTConfig keyword arguments)."""
    names = available()
    if name not in names:
        raise ValueError(f"unknown variant {name!r}; available: {', '.join(names)}")
    return dict(importlib.import_module(f"{__name__}.{name}").CONFIG)
