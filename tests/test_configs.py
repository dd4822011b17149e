"""Every experiment file in config/ parses with train.py's keys and describes a valid model."""
import glob
import os

import pytest
import torch

from model import GPT, GPTConfig
import train
from safety_net.build import model_args
from safety_net.configurator import load_config

CONFIGS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "config", "*.py")))


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_config_builds_a_valid_model(path):
    defaults = dict(train.DEFAULTS)
    if os.path.basename(path).startswith(("compare_", "ablation_")):
        from tools import compare
        defaults = compare.defaults()
    config, explicit = load_config(defaults, [path])
    args = model_args(config, explicit)   # compare configs: the shared sizes on top of the default model
    if "vocab_size" not in explicit:
        args["vocab_size"] = 65 if "shakespeare" in config["dataset"] else 50257
    with torch.device("meta"):
        model = GPT(GPTConfig(**args))
    assert model.get_num_params() > 0
