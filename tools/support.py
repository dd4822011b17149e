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
each path refusing an undeclared one in one line. The training and KV-cache columns are not refused at run time:
train.py and model.py do not call refuse_undeclared (their tests, test_model.py's FLAGS, are checked below).

A path declared to compute a field must be tested with it: tests/test_support.py reads each path's equivalence
test table (test_model.py's FLAGS for training and the KV cache, test_compile.py's STATIC_DECODE, test_huggingface.py's
OURS, test_executorch.py's default_run_configs, test_llamacpp.py's FORWARD_SHAPES, test_pangu.py's SAME_SHAPE,
test_plan.py's SHAPES for the FLOPs count and the plan) and fails unless some configuration there sets the field to
a non-default value. The exceptions are declared below, each with its reason: DEPENDS (a field acts only under
another; a path refusing the parent need not test the child) and NO_EFFECT (a field that cannot change what the
path computes). Declaring `()` for a new field therefore asks every path's test for it. The other way round, a
refusal declared on a tool path is made: test_a_declared_refusal_is_real gives each such path a model that sets the
field (test_model.py's FLAGS entry with the fewest other changes) and expects its one-line refusal.

A new field also needs a mutant: tests/mutation.py's FIELD_MUTANTS names, for every GPTConfig field, the mutants
that break its code, and tests/test_mutation.py fails until the new field has one there.

A new field's default must be the model as it was before the field existed (a technique off): a checkpoint
written before the field loads and resumes with that default (safety_net/checkpoint.py's load_checkpoint).
"""
import dataclasses

from safety_net.configurator import UserError

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
    "activation": (),   # GGUF: those llama.cpp's graph of the layout computes (llamacpp_arch), the others refused
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

# field: the field it acts under. A path that refuses the parent never computes the child (think_eta without Deep
# Thinking does nothing), so it need not be tested with it; a chain (shrink_kernel -> shrink_layer -> shrink_every)
# is followed to its end.
DEPENDS = {
    "residual_logit_init": "enhanced_residual",
    "think_eta": "think_steps",
    "think_memory": "think_steps",
    "n_top_attn_layers": "n_attn_layers",
    "shrink_layer": "shrink_every",
    "shrink_kernel": "shrink_layer",
    "share_from_layer": "share_group_size",
    "share_sublayers": "share_group_size",
}

EVALUATION = tuple(path for path in PATHS if path != "training")
AFTER_INIT = tuple(path for path in PATHS if path not in ("training", "kv_cache"))
# (field, the paths it cannot change, why): a path declared to compute a field is tested with it set
# (tests/test_support.py reads the paths' own test tables) unless the field is listed here for that path
NO_EFFECT = [
    ("dropout", EVALUATION, "dropout acts in training only; these paths evaluate a model (eval mode)"),
    ("init_scheme", AFTER_INIT, "the initialisation draws weights; these paths compute from the weights given"),
    ("init_std", AFTER_INIT, "the initialisation draws weights; these paths compute from the weights given"),
    ("norm_eps", ("flops", "plan"), "a constant inside a norm: no shape, FLOP or cache byte depends on it"),
    ("rope_base", ("flops", "plan"), "the rotary angles' base: no shape, FLOP or cache byte depends on it"),
]


def refused_by(field, path):
    """Whether `path` refuses a non-default `field`, or the field it acts under (DEPENDS)."""
    while field is not None:
        if path in SUPPORT.get(field, ()):
            return True
        field = DEPENDS.get(field)
    return False


def no_effect_reason(field, path):
    """Why `field` cannot change what `path` computes (NO_EFFECT), or ''."""
    for name, paths, reason in NO_EFFECT:
        if name == field and path in paths:
            return reason
    return ""


def must_be_tested(field, path):
    """Whether the equivalence test of `path` must run a configuration that sets `field` to a non-default value."""
    return not refused_by(field, path) and not no_effect_reason(field, path)


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


if __name__ == "__main__":   # run as a command, it would do nothing
    raise SystemExit("error: tools.support is a library, not a command (fix: the commands are in docs/reference.md)")
