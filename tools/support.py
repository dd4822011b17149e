"""
Which path supports which GPTConfig field, declared in one table (issue 56, point 1).

A path is a way a model is used beyond model.py's forward: training (train.py), the KV cache (model.generate),
the compiled decoder (tools/fast_sample.py), the Hugging Face export (tools/huggingface/convert.py), the ExecuTorch
export (tools/executorch/export.py), the GGUF export (tools/llamacpp/export.py), parameter inheritance
(tools/pangu/inherit.py), the FLOPs count (tools/flops.py) and the layer plan (tools/plan.py).

SUPPORT names, for every field of GPTConfig, the paths that refuse a non-default value of it with a check of their
own (export_plan's list of techniques without a transformers equivalent, inherit's check_supported, ...); every
other path computes it. A field missing from the table is refused by every tool path as soon as a config sets it
(refuse_undeclared, called by each of them before it writes anything), so a new technique cannot be exported,
inherited or counted without a word: tests/test_support.py fails until the new field is declared here, and shows
each path refusing an undeclared one in one line. The training and KV-cache columns are declarations only for now:
train.py and model.py do not call refuse_undeclared (issues 53 and 55 rewrite them).
"""
import dataclasses

from configurator import UserError

PATHS = ("training", "kv_cache", "compiled_decoder", "huggingface", "executorch", "gguf", "inheritance", "flops",
         "plan")
# what each tool path is called in its one-line refusal, and the module that would learn a new field
TOOL_PATHS = {
    "compiled_decoder": ("the compiled decoder", "tools/fast_sample.py"),
    "huggingface": ("the Hugging Face export", "tools/huggingface/convert.py"),
    "executorch": ("the ExecuTorch export", "tools/executorch/export.py"),
    "gguf": ("the GGUF export", "tools/llamacpp/export.py"),
    "inheritance": ("parameter inheritance", "tools/pangu/inherit.py"),
    "flops": ("the FLOPs count", "tools/flops.py"),
    "plan": ("the layer plan", "tools/plan.py"),
}

EXPORTS = ("huggingface", "gguf")   # the GGUF export writes what export_plan allows for transformers
NOT_SLICED = ("inheritance",)       # inherit's check_supported: one plain branch of full-width, attention layers

# field: the paths that refuse a non-default value with their own check; all others compute it
SUPPORT = {
    # the GPT-2 baseline
    "block_size": (),
    "vocab_size": (),
    "n_layer": (),
    "n_head": (),
    "n_embd": (),
    "dropout": (),
    "bias": (),
    # norms and positions (export_plan maps the two layouts it knows, gpt2 and llama, and refuses the others)
    "norm": (),
    "norm_eps": (),
    "norm_placement": EXPORTS + NOT_SLICED,
    "pos_embedding": (),
    "rope_base": (),
    "n_kv_head": (),
    "mlp_type": (),
    "activation": (),
    "mlp_hidden": (),
    "mlp_ratio": (),
    "tie_embeddings": (),
    "head_bias": EXPORTS,
    "embd_factor_dim": EXPORTS,
    # layer sharing, enhanced residual, Deep Thinking, ShishuLM
    "share_group_size": NOT_SLICED,
    "share_from_layer": (),
    "share_sublayers": (),
    "enhanced_residual": EXPORTS,
    "residual_logit_init": (),
    "think_steps": ("compiled_decoder", "executorch") + EXPORTS,
    "think_eta": (),
    "think_memory": (),
    "n_attn_layers": EXPORTS + NOT_SLICED,
    "n_top_attn_layers": (),
    # pgpt, lgpt, cgpt
    "n_branches": EXPORTS + NOT_SLICED,
    "shrink_every": EXPORTS + NOT_SLICED,
    "shrink_layer": (),
    "shrink_kernel": (),
    # initialisation
    "init_scheme": (),
    "init_std": (),
}


def refuse_undeclared(config, path, error=UserError):
    """One line (`error`) when `config` sets a field that SUPPORT does not declare, on the tool path `path`."""
    what, module = TOOL_PATHS[path]
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if field.name in SUPPORT or value == field.default:
            continue
        raise error(f"{what} does not know {field.name}={value!r}: tools/support.py declares no path for it, so "
                    f"the result could silently ignore it (fix: teach {module} the field, then declare it in "
                    f"tools/support.py)")
