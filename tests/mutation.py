"""
Mutation check: do the tests named for a bug catch it?

    python -m tests.mutation                              # every mutant (minutes on 2 cores)
    python -m tests.mutation --list                       # the table
    python -m tests.mutation --only=kv_cache_drops_oldest,mask_sees_next_token --workers=2

Each mutant is one small, realistic bug: (file, the exact text it replaces, the new text, the tests that must
catch it). It is applied alone to a scratch copy of the repository (its tracked files and untracked ones git does
not ignore, as they are on disk, in a temporary folder; the working tree is never written) and its tests run
there: `pytest -x -q -p no:cacheprovider <tests>`. Caught: a test fails. A mutant marked `every` runs its tests
without -x and is caught only if every one of them fails (e.g. the causality test of every flag, where one
flag's test failing would hide another's passing). Before any mutant, each distinct test selection runs once on
the unmutated copy and must pass (a failing selection would "catch" every mutant).

One line per mutant, `caught` or `missed`, and the count. Exit 1 if any mutant is missed, if a selection fails
without a mutant, or if a mutant's old text is not found exactly once in its file (the whole table is checked
first, so it cannot rot silently when the code changes).

The table is also declared per field: FIELD_MUTANTS names, for every field of model.py's GPTConfig, the mutants that
break the code handling it, and tests/test_mutation.py fails while a field (a new technique flag) has none.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor

from safety_net.configurator import UserError, run_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

Mutant = namedtuple("Mutant", "name file old new tests every")

CAUSALITY = "tests/test_model.py tests/test_variants.py -k 'test_causality or test_tiny_preset_is_causal'"
KV_CACHE = "tests/test_model.py tests/test_variants.py -k 'kv_cache_equals_full_forward'"

MUTANTS = [
    # --- issue 34's table ---
    Mutant("mask_sees_next_token", "model.py",
           "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=start == 0,",
           "    if start == 0:\n"
           "        mask = torch.ones(q.size(2), k.size(2), dtype=torch.bool, device=q.device).tril(1)\n"
           "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False,",
           CAUSALITY, every=True),
    Mutant("query7_sees_key8", "model.py",
           "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=start == 0,",
           "    if start == 0:\n"
           "        mask = torch.ones(q.size(2), k.size(2), dtype=torch.bool, device=q.device).tril()\n"
           "        mask[7:8, 8:9] = True\n"
           "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False,",
           CAUSALITY, every=True),
    Mutant("cgpt_conv_padded_both_sides", "model.py",
           "window = F.pad(x, (0, 0, self.kernel - 1, 0))",
           "window = F.pad(x, (0, 0, (self.kernel - 1) // 2, self.kernel // 2))",
           "tests/test_model.py -k 'test_causality and (cgpt_k3 or post_norm_pgpt_cgpt)'", every=True),
    Mutant("deep_thinking_test_pass_reads_next_position", "model.py",
           "        return causal_attention(q, mem_k, mem_v, self.start, self.dropout)",
           "        mask = causal_mask(self.start, q.size(2), q.device)\n"
           "        return F.scaled_dot_product_attention(q, mem_k, mem_v, attn_mask=mask | mask.roll(1, dims=-1))",
           "tests/test_model.py tests/test_variants.py -k '(test_causality or is_causal) and (deep_thinking or dt)'",
           every=True),
    Mutant("kv_cache_drops_oldest", "model.py",
           "        self.values[:, :, start:end] = v\n"
           "        return self.keys[:, :, :end], self.values[:, :, :end]",
           "        self.values[:, :, start:end] = v\n"
           "        drop = 1 if k.size(2) == 1 and end > 1 else 0   # decoding: one token at a time\n"
           "        return self.keys[:, :, drop:end], self.values[:, :, drop:end]",
           KV_CACHE, every=True),
    Mutant("kv_cache_drops_oldest_text", "model.py",
           "        self.values[:, :, start:end] = v\n"
           "        return self.keys[:, :, :end], self.values[:, :, :end]",
           "        self.values[:, :, start:end] = v\n"
           "        drop = 1 if k.size(2) == 1 and end > 1 else 0   # decoding: one token at a time\n"
           "        return self.keys[:, :, drop:end], self.values[:, :, drop:end]",
           "tests/test_sample.py -k 'no_kv_cache_same_text or start_text_and_seeds'", every=True),
    Mutant("kv_cache_drops_oldest_generate", "model.py",
           "        self.values[:, :, start:end] = v\n"
           "        return self.keys[:, :, :end], self.values[:, :, :end]",
           "        self.values[:, :, start:end] = v\n"
           "        drop = 1 if k.size(2) == 1 and end > 1 else 0   # decoding: one token at a time\n"
           "        return self.keys[:, :, drop:end], self.values[:, :, drop:end]",
           "tests/test_model.py -k generate_same_tokens", every=True),
    Mutant("eval_counts_params_without_positions", "tools/eval.py",
           "(iter {ckpt.get('iter_num', '?')}, {model.get_num_params(non_embedding=False)",
           "(iter {ckpt.get('iter_num', '?')}, {model.get_num_params(non_embedding=True)",
           "tests/test_train.py -k every_script_counts_parameters", every=True),
    # --- the brief's further bugs ---
    Mutant("rope_off_by_one_in_cache", "model.py",
           "            cos, sin = self.rope_cos[pos], self.rope_sin[pos]",
           "            pos = pos if cache is None or T > 1 else (pos - 1).clamp(min=0)   # a decode step\n"
           "            cos, sin = self.rope_cos[pos], self.rope_sin[pos]",
           "tests/test_model.py tests/test_variants.py -k 'kv_cache_equals_full_forward and "
           "(rope or shishu or mobilellm or internlm or paper000_dt_first_layer)'", every=True),
    Mutant("gqa_query_head_reads_wrong_kv_head", "model.py",
           "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=start == 0,",
           "    if q.size(1) != k.size(1):   # tiles the kv heads: query head h reads h % n_kv_head\n"
           "        k = k.repeat(1, q.size(1) // k.size(1), 1, 1)\n"
           "        v = v.repeat(1, q.size(1) // v.size(1), 1, 1)\n"
           "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=start == 0,",
           "tests/test_model.py -k 'reference_equations and n_kv_head'", every=True),
    Mutant("shared_layer_uses_wrong_weights", "model.py",
           "repeats = set(range(start, end)) - set(range(start, end, k))",
           "repeats = set(range(start, end)) - set(range(start + 1, end, k))",
           "tests/test_model.py -k sharing_plan", every=False),
    Mutant("enhanced_residual_alpha_swapped", "model.py",
           "        return alpha * x + (1 - alpha) * fx",
           "        return (1 - alpha) * x + alpha * fx",
           "tests/test_model.py -k 'reference_equations and enhanced_residual'", every=True),
    Mutant("pgpt_branch_weights_not_normalised", "model.py",
           "        return F.softmax(self.branch_logits, dim=0)",
           "        return torch.sigmoid(self.branch_logits)",
           "tests/test_model.py -k pgpt_branch", every=False),
    Mutant("lgpt_shrinks_after_wrong_layer", "model.py",
           "        if widths[layer + 1] < widths[layer]:",
           "        if widths[layer] < widths[layer - 1]:",
           "tests/test_model.py tests/test_variants.py -k 'kv_cache_equals_full_forward and (lgpt or cgpt_k1)'",
           every=True),
    Mutant("eval_sliding_window_drops_a_token", "tools/eval.py",
           "start = max(0, end - block_size) if sliding else done",
           "start = max(0, end - block_size + 1) if sliding else done",
           "tests/test_eval.py -k strided_total_equals_per_token", every=True),
    # --- ours ---
    Mutant("attention_heads_merged_without_transpose", "model.py",
           "y = self.out_proj(y.transpose(1, 2).reshape(B, T, C))",
           "y = self.out_proj(y.reshape(B, T, C))",
           CAUSALITY, every=False),
    Mutant("cgpt_conv_cache_keeps_oldest_inputs", "model.py",
           "self.conv_tail = window[:, window.size(1) - n_past:]",
           "self.conv_tail = window[:, :n_past]",
           "tests/test_model.py -k 'kv_cache_equals_full_forward and (cgpt_k3 or post_norm_pgpt_cgpt)'", every=True),
    Mutant("positions_restart_at_each_cached_call", "model.py",
           "        return torch.arange(self.length, self.length + length, device=device)",
           "        return torch.arange(length, device=device)",
           KV_CACHE, every=False),
    Mutant("pgpt_branches_share_cache_slots", "model.py",
           "return None if self.cache is None else self.cache[self.branch, i]",
           "return None if self.cache is None else self.cache[0, i]",
           "tests/test_model.py tests/test_variants.py -k 'kv_cache_equals_full_forward and pgpt'", every=True),
    Mutant("deep_thinking_eta_swapped", "model.py",
           "k = self.eta * k + (1 - self.eta) * mem_k[:, :, self.start:]",
           "k = (1 - self.eta) * k + self.eta * mem_k[:, :, self.start:]",
           "tests/test_model.py -k 'reference_equations and think_steps'", every=False),
    Mutant("swiglu_activation_on_both_branches", "model.py",   # paper 000's public code has this bug
           "h = self.act(self.gate(x)) * self.up(x)",
           "h = self.act(self.gate(x)) * self.act(self.up(x))",
           "tests/test_model.py -k swiglu_applies_silu", every=False),
    Mutant("sinusoidal_odd_dimensions_use_sin", "model.py",
           "table[:, 1::2] = torch.cos(pos * freq[: dim // 2])",
           "table[:, 1::2] = torch.sin(pos * freq[: dim // 2])",
           "tests/test_model.py -k sinusoidal_positions", every=False),
    # --- issue 33: the exported program's static cache (tools/executorch/export.py) ---
    Mutant("export_cache_prefill_not_causal", "tools/executorch/export.py",
           "custom_sdpa(q.transpose(1, 2), keys, values, self.start_pos, None, 0.0, True)",
           "custom_sdpa(q.transpose(1, 2), keys, values, self.start_pos, None, 0.0, False)",
           "tests/test_executorch.py -k export_modules_equal_eager", every=False),
    Mutant("export_cache_conv_window_keeps_oldest", "tools/executorch/export.py",
           "past.copy_(window[:, window.size(1) - n_past:])",
           "past.copy_(window[:, :n_past])",
           "tests/test_executorch.py -k export_modules_equal_eager", every=False),
    # --- issue 41: the runner's threads (tools/executorch/run.py) ---
    Mutant("runner_leaves_mkl_its_default_threads", "tools/executorch/run.py",
           'os.environ["MKL_NUM_THREADS"] = "1"',
           'pass',
           "tests/test_executorch.py -k keeps_mkl_to_one_thread", every=False),
    # --- issue 48: model.sample_next's own tests (no executorch) ---
    Mutant("sample_next_multiplies_by_the_temperature", "model.py",
           "logits = logits.float() / temperature",
           "logits = logits.float() * temperature",
           "tests/test_sampling.py -k draws_follow_softmax_of_logits_over_temperature", every=False),
    Mutant("sample_next_keeps_top_k_plus_one", "model.py",
           "kth = torch.topk(logits, top_k).values[:, [-1]]",
           "kth = torch.topk(logits, top_k + 1).values[:, [-1]]",
           "tests/test_sampling.py -k 'top_k_1_is_argmax or never_draws_outside_the_k_largest'", every=True),
    # --- issue 38: train.py ---
    Mutant("train_loss_not_divided_by_micro_steps", "train.py",
           "scaler.scale(loss / run.accum).backward()",
           "scaler.scale(loss).backward()",
           "tests/test_train_arithmetic.py -k gradient_accumulation_divides_the_loss_by_the_micro_steps",
           every=False),
    Mutant("train_lr_one_iteration_late", "train.py",
           "lr = get_lr(iter_num, config)",
           "lr = get_lr(iter_num + 1, config)",
           "tests/test_train_arithmetic.py -k lr_of_each_step_in_warmup_cosine_and_after_decay", every=False),
    Mutant("train_clips_before_unscaling", "train.py",
           "                scaler.unscale_(optimizer)   # clip the true gradient, not the scaled one\n"
           "                params = run.raw_model.parameters()\n"
           "                torch.nn.utils.clip_grad_norm_(params, config[\"grad_clip\"])\n",
           "                params = run.raw_model.parameters()\n"
           "                torch.nn.utils.clip_grad_norm_(params, config[\"grad_clip\"])\n"
           "                scaler.unscale_(optimizer)\n",
           "tests/test_train_arithmetic.py -k clipping_scales_the_unscaled_gradient_to_grad_clip", every=False),
    Mutant("train_best_val_loss_is_the_latest", "train.py",   # ckpt.pt then follows a val loss that got worse
           "best_val_loss = min(best_val_loss, row[\"val_loss\"])",
           "best_val_loss = row[\"val_loss\"]",
           "tests/test_train_arithmetic.py -k checkpoints_hold_the_best_and_the_latest_evaluation", every=False),
    Mutant("train_batch_input_is_its_target", "train.py",   # the window off by one: x = y
           "x = windows[:, :-1].contiguous()",
           "x = windows[:, 1:].contiguous()",
           "tests/test_train_arithmetic.py -k batches_are_the_windows_the_seed_formula_names", every=True),
    Mutant("train_ddp_ranks_draw_overlapping_micro_steps", "train.py",
           "run.rank * run.accum + micro",
           "run.rank + micro",
           "tests/test_ddp.py -k two_cpu_ranks_match_single_process", every=False),
    Mutant("train_data_vocab_over_the_keys_set", "train.py",   # --vocab_size lost to meta.json's
           '    if config["init_from"] != "resume" and "vocab_size" not in explicit:\n',
           '    if config["init_from"] != "resume":\n',
           "tests/test_train.py -k builds_the_model_arguments_as_build_model_args_does", every=False),
    # --- issue 38: the pipeline around the model ---
    # safety_net/checkpoint.py: the formats it reads, and pgpt's heaviest branch
    Mutant("init_from_keeps_the_compile_prefix", "safety_net/checkpoint.py",
           "ckpt[\"model\"] = clean_state_dict(weights)",
           "ckpt[\"model\"] = dict(weights)",
           "tests/test_checkpoint.py -k own_checkpoint_loads", every=False),
    Mutant("checkpoint_model_args_without_new_fields_defaults", "safety_net/checkpoint.py",
           'ckpt["model_args"] = {**gpt_config_defaults(), **ckpt["model_args"]}',
           'ckpt["model_args"] = dict(ckpt["model_args"])',
           "tests/test_train.py -k before_a_field_existed", every=False),
    Mutant("nanogpt_layernorm_eps_of_llama", "safety_net/checkpoint.py",
           'ARCHITECTURE = dict(norm="layernorm", norm_eps=1e-5,',
           'ARCHITECTURE = dict(norm="layernorm", norm_eps=1e-6,',
           "tests/test_nanogpt.py -k 'logits_equal_nanogpts or init_from_a_nanogpt'", every=False),
    Mutant("hf_gpt2_c_proj_not_transposed", "safety_net/checkpoint.py",
           '(a + "inner.out_proj", h + "attn.c_proj", True)',
           '(a + "inner.out_proj", h + "attn.c_proj", False)',
           "tests/test_huggingface.py -k 'import_matches_transformers and gpt2'", every=False),
    # model.py's init schemes: what redraw sets, at the depth of a weight's first layer
    Mutant("init_scheme_down_keeps_gpt2s_scaling", "model.py",
           "        nn.init.normal_(inner.down.weight, std=sigma)\n",
           "",
           "tests/test_model.py -k init_schemes_follow_their_formulas", every=False),
    Mutant("init_scheme_shared_weights_at_their_last_layer", "model.py",
           "            if sub.inner not in drawn:\n                drawn.add(sub.inner)\n",
           "            if True:\n",
           "tests/test_model.py -k depth_of_its_first_application", every=False),
    Mutant("heaviest_branch_is_the_lightest", "model.py",
           "return int(self.branch_weights().argmax())",
           "return int(self.branch_weights().argmin())",
           "tests/test_checkpoint.py -k keep_heaviest_branch", every=True),
    # safety_net/tokenizers.py, dataset.py: ids, the tokenizer meta.json describes, nanoGPT's meta.pkl
    Mutant("gpt2_whitespace_runs_split_without_lookahead", "safety_net/tokenizers.py",
           r'|\s+(?!\S)|\s+"""', r'|\s+"""',
           "tests/test_prepare.py -k tiktokens_gpt2", every=False),
    Mutant("compact_ranks_in_byte_order", "safety_net/tokenizers.py",
           "ranks = {tok: i for i, tok in enumerate(tokens)}",
           "ranks = {tok: i for i, tok in enumerate(sorted(tokens))}",
           "tests/test_compact_vocab.py -k maps_every_token_to_its_gpt2_id", every=False),
    Mutant("meta_pkl_characters_sorted", "safety_net/dataset.py",
           '"chars": [itos[i] for i in range(size)],',
           '"chars": sorted(itos.values()),',
           "tests/test_nanogpt.py -k meta_pkl_ids", every=False),
    # tools/pangu: refine, compact_vocab, inherit
    Mutant("refine_saves_the_next_windows", "tools/pangu/refine.py",
           "np.save(f, starts[keep])",
           "np.save(f, starts[keep] + seg_len)",
           "tests/test_pangu.py -k criterion_selects", every=False),
    Mutant("refine_multiplies_by_the_temperature", "tools/pangu/refine.py",
           "dtype=torch.float64) / temperature, dim=0)",
           "dtype=torch.float64) * temperature, dim=0)",
           "tests/test_pangu.py -k criterion_selects", every=False),
    Mutant("compact_gpt2_ids_off_by_one", "tools/pangu/compact_vocab.py",
           '"gpt2_ids": kept_ids}',
           '"gpt2_ids": [i + 1 for i in kept_ids]}',
           "tests/test_compact_vocab.py -k maps_every_token_to_its_gpt2_id", every=False),
    Mutant("inherit_keeps_the_lowest_scored", "tools/pangu/inherit.py",
           "torch.argsort(scores, descending=True, stable=True)",
           "torch.argsort(scores, descending=False, stable=True)",
           "tests/test_pangu.py -k 'ranks_highest or removal_costs'", every=True),
    Mutant("inherit_kv_head_score_without_v", "tools/pangu/inherit.py",
           "(k + val).view(n_kv, hd)",
           "k.view(n_kv, hd)",
           "tests/test_pangu.py -k ranks_highest", every=False),
    Mutant("inherit_keeps_the_cheapest_layers", "tools/pangu/inherit.py",
           "return sorted(top_k(layer_importance(model, batches), k)",
           "return sorted(top_k(-layer_importance(model, batches), k)",
           "tests/test_pangu.py -k removal_costs", every=False),
    # tools/huggingface: importing a transformers folder
    Mutant("hf_gpt2_layer_norm_epsilon_ignored", "tools/huggingface/convert.py",
           'norm_eps=hf.get("layer_norm_epsilon", 1e-5)',
           "norm_eps=1e-5",
           "tests/test_huggingface.py -k import_matches_transformers", every=False),
    Mutant("hf_rope_theta_at_top_level_ignored", "tools/huggingface/convert.py",
           'return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))',
           'return float(params.get("rope_theta", 10000.0))',
           "tests/test_huggingface.py -k mobilellm_layer_sharing", every=False),
    Mutant("hf_mlp_bias_ignored", "tools/huggingface/convert.py",
           'bias=bool(hf.get("attention_bias", False) or hf.get("mlp_bias", False)),',
           'bias=bool(hf.get("attention_bias", False)),',
           "tests/test_huggingface.py -k import_matches_transformers", every=False),
    Mutant("hf_llama_tied_by_default", "tools/huggingface/convert.py",
           'tied = hf.get("tie_word_embeddings", False) or',
           'tied = hf.get("tie_word_embeddings", True) or',
           "tests/test_huggingface.py -k defaults_for_keys", every=False),
    # tools/llamacpp: the GGUF file, run by llama.cpp's equations
    Mutant("gguf_rope_rows_left_in_halves", "tools/llamacpp/export.py",
           ".swapaxes(1, 2).reshape(w.shape)",
           ".reshape(w.shape)",
           "tests/test_llamacpp.py -k llamacpps_conventions", every=False),
    Mutant("gguf_rms_eps_of_the_default", "tools/llamacpp/export.py",
           "writer.add_layer_norm_rms_eps(c.norm_eps)",
           "writer.add_layer_norm_rms_eps(1e-5)",
           "tests/test_llamacpp.py -k llamacpps_conventions", every=False),
    Mutant("gguf_rope_base_of_the_default", "tools/llamacpp/export.py",
           "writer.add_rope_freq_base(c.rope_base)",
           "writer.add_rope_freq_base(10000.0)",
           "tests/test_llamacpp.py -k llamacpps_conventions", every=False),
    Mutant("gguf_gpt2_conv1d_kept_transposed", "tools/llamacpp/export.py",
           "            t = t.t()   # transformers'",
           "            t = t   # transformers'",
           "tests/test_llamacpp.py -k llamacpps_conventions", every=False),
    # tools/eval.py: the printed metrics
    Mutant("eval_bits_per_byte_in_nats", "tools/eval.py",
           "bpb=nll_sum / math.log(2) / n_bytes",
           "bpb=nll_sum / n_bytes",
           "tests/test_eval.py -k recomputed_from_the_models_logits", every=False),
    Mutant("eval_bytes_counted_as_characters", "tools/eval.py",
           'len(text.encode("utf-8")), "counted',
           'len(text), "counted',
           "tests/test_eval.py -k recomputed_from_the_models_logits", every=False),
    # --- issue 55: three bugs the whole suite passed ---
    Mutant("text_stream_end_without_its_final_flush", "safety_net/tokenizers.py",
           'self.write(self.decoder.decode(b"", final=True) + "\\n")',
           'self.write("\\n")',
           "tests/test_streaming.py -k ends_inside_a_character", every=False),
    Mutant("stop_vote_needs_every_rank", "safety_net/stop.py",
           "        torch.distributed.all_reduce(votes)\n",
           "        torch.distributed.all_reduce(votes, op=torch.distributed.ReduceOp.MIN)\n",
           "tests/test_ddp.py -k stops_both_at_the_same_boundary", every=False),
    Mutant("technique_lines_prints_the_line_after", "tools/technique_lines.py",
           "return [line for line in self.code if self.unit[line] in units]",
           "return [line + 1 for line in self.code if self.unit[line] in units]",
           "tests/test_technique_lines.py -k 'lines_that_ran and gpt'", every=False),
    # --- issue 56: one entry wrapper; prepare.py's main as it was on argparse: bad input caught, Ctrl-C not ---
    Mutant("prepare_ctrl_c_is_a_traceback", "prepare.py",
           '    return run_command(run, DEFAULTS, argv, positional="dataset")\n',
           "    import sys\n"
           "    from configurator import UserError, load_config\n"
           "    argv = sys.argv[1:] if argv is None else argv\n"
           "    try:\n"
           '        return run(load_config(DEFAULTS, argv, positional="dataset")[0])\n'
           "    except UserError as e:\n"
           '        raise SystemExit(f"error: {e}") from None\n',
           "tests/test_commands.py -k 'ctrl_c and prepare'", every=True),
    # --- issue 56: a path declared to refuse a field that no longer refuses it (the export would drop the bias) ---
    Mutant("declared_refusal_not_made", "tools/huggingface/convert.py",
           '        (getattr(config, "head_bias", False), "a bias on the output head (head_bias)"),\n',
           "",
           "tests/test_support.py -k 'declared_refusal_is_real and head_bias'", every=False),
    # --- issue 56: a path declared to compute a field, whose test table forgets it ---
    Mutant("coverage_flags_forget_rope_base", "tests/test_model.py",
           '    "rope_base": dict(pos_embedding="rope", rope_base=100.0),',
           '    "rope_base": dict(pos_embedding="rope"),',
           "tests/test_support.py -k every_computed_field_is_tested", every=False),
    # --- issue 56: a mutant for each GPTConfig field that had none (FIELD_MUTANTS, below, names them) ---
    Mutant("generation_window_restarts_one_token_early", "model.py",   # block_size
           "if idx.size(1) - start > block_size:",
           "if idx.size(1) - start >= block_size:",
           "tests/test_model.py -k generation_windows_fill_block_size", every=True),
    Mutant("gpt2_init_scales_by_n_layer_not_twice_it", "model.py",   # n_layer: GPT-2 has two residual adds a layer
           "scaled = config.init_std / math.sqrt(2 * config.n_layer)",
           "scaled = config.init_std / math.sqrt(config.n_layer)",
           "tests/test_model.py -k init_schemes_follow_their_formulas", every=False),
    Mutant("ffn_hidden_of_n_embd_not_the_layers_width", "model.py",   # n_embd: lgpt's halved layers keep 4 n_embd
           "hidden = config.mlp_hidden or int(config.mlp_ratio * width)",
           "hidden = config.mlp_hidden or int(config.mlp_ratio * config.n_embd)",
           "tests/test_variants.py -k 'paper_004_table_1 and lgpt'", every=False),
    Mutant("attention_dropout_in_eval", "model.py",   # dropout
           "y = causal_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)",
           "y = causal_attention(q, k, v, dropout_p=self.dropout)",
           "tests/test_model.py -k dropout_acts_in_training_only", every=False),
    Mutant("out_proj_bias_despite_bias_false", "model.py",   # bias
           "self.out_proj = nn.Linear(width, width, bias=config.bias)",
           "self.out_proj = nn.Linear(width, width, bias=True)",
           "tests/test_variants.py -k mobilellm_exact_counts", every=False),
    Mutant("rmsnorm_as_a_layernorm_without_bias", "model.py",   # norm: it still subtracts the mean
           "return nn.RMSNorm(dim, eps=config.norm_eps)",
           "return nn.LayerNorm(dim, eps=config.norm_eps, bias=False)",
           "tests/test_model.py -k rmsnorm_divides_by_the_root_mean_square", every=False),
    Mutant("post_norm_normalises_the_sublayer_only", "model.py",   # norm_placement: x + norm(F(x))
           "return self.norm(self.mix(x, self.inner(x, cache)))",
           "return self.mix(x, self.norm(self.inner(x, cache)))",
           "tests/test_model.py -k 'reference_equations and post'", every=True),
    Mutant("gelu_tanh_is_the_exact_gelu", "model.py",   # activation
           '"gelu_tanh": gelu_tanh,',
           '"gelu_tanh": F.gelu,',
           "tests/test_model.py -k 'every_flag_changes_the_function and gelu_tanh'", every=False),
    Mutant("mlp_hidden_ignored", "model.py",
           "hidden = config.mlp_hidden or int(config.mlp_ratio * width)",
           "hidden = int(config.mlp_ratio * width)",
           "tests/test_model.py -k tool_sizes_are_the_built_modules", every=False),
    Mutant("mlp_ratio_fixed_at_four", "model.py",
           "hidden = config.mlp_hidden or int(config.mlp_ratio * width)",
           "hidden = config.mlp_hidden or 4 * width",
           "tests/test_model.py -k mlp_ratio_sets_the_hidden_width", every=False),
    Mutant("tied_head_bias_not_added", "model.py",   # head_bias with tied embeddings
           "return logits + self.tied_head_bias if self.config.head_bias else logits",
           "return logits",
           "tests/test_model.py -k 'every_weight_is_used and head_bias'", every=False),
    Mutant("factorized_projection_with_a_bias", "model.py",   # embd_factor_dim: V*E + E*H, no bias
           "self.proj = nn.Linear(config.embd_factor_dim, width, bias=False)",
           "self.proj = nn.Linear(config.embd_factor_dim, width, bias=config.bias)",
           "tests/test_variants.py -k efficio_count_itemised", every=False),
    Mutant("sharing_groups_counted_from_layer_0", "model.py",   # share_from_layer
           "repeats = set(range(start, end)) - set(range(start, end, k))",
           "repeats = set(range(start, end)) - set(range(0, end, k))",
           "tests/test_model.py -k sharing_plan_schemes", every=False),
    Mutant("attention_only_sharing_shares_the_ffn_too", "model.py",   # share_sublayers: the line above copied
           'share_mlp = config.share_sublayers in ("both", "mlp")',
           'share_mlp = config.share_sublayers in ("both", "attn")',
           "tests/test_model.py -k sharing_plan_schemes", every=False),
    Mutant("residual_logit_init_ignored", "model.py",
           "w = torch.full((), float(config.residual_logit_init))",
           "w = torch.zeros(())",
           "tests/test_model.py -k enhanced_residual_init_is_a_flag", every=False),
    Mutant("first_layer_memory_of_each_layer", "model.py",   # think_memory="first_layer" becomes "own"
           "            if self.first_kv is None:   # this is the first attention layer\n"
           "                self.first_kv = (k, v)\n",
           "            self.first_kv = (k, v)\n",
           "tests/test_model.py -k 'reference_equations and first_layer'", every=True),
    Mutant("mlp_only_layers_built_only_with_sharing", "model.py",   # n_attn_layers ignored without sharing
           "if config.share_group_size > 1 or config.n_attn_layers is not None:",
           "if config.share_group_size > 1:",
           "tests/test_model.py -k 'sharing_plan_schemes or attention_placement_changes_the_function'", every=True),
    Mutant("top_attention_layers_shared", "model.py",   # n_top_attn_layers: the top layers join the groups
           "end = config.layers_per_branch() - config.n_top_attn_layers",
           "end = config.layers_per_branch()",
           "tests/test_model.py -k sharing_plan_schemes", every=False),
    Mutant("gpt2_init_std_fixed_at_0_02", "model.py",   # init_std: GPT-2's constant kept
           'std = scaled if name.endswith(("out_proj", "down")) else config.init_std',
           'std = scaled if name.endswith(("out_proj", "down")) else 0.02',
           "tests/test_model.py -k init_schemes_follow_their_formulas", every=False),
    Mutant("rope_tables_at_the_default_base", "model.py",   # rope_base in the model (the tools' two are above)
           "cos, sin = rope_tables(config.block_size, self.head_dim, config.rope_base)",
           "cos, sin = rope_tables(config.block_size, self.head_dim, 10000.0)",
           "tests/test_model.py -k 'every_flag_changes_the_function and rope_base'", every=False),
    # --- issue 56: check_memory's bound over-counting the FFN, so a model that fits would be refused ---
    Mutant("weights_bound_ignores_mlp_hidden", "safety_net/build.py",
           "    hidden = [config.mlp_hidden or int(config.mlp_ratio * w) for w in widths]",
           "    hidden = [int(config.mlp_ratio * w) for w in widths]",
           "tests/test_loaded_files.py -k weights_bound_never_exceeds", every=False),
    # --- issue 56: a choice check forgotten, so a typo takes a default branch ---
    Mutant("config_accepts_any_shrink_layer", "model.py",
           ' shrink_layer=("linear", "conv"),',
           "",
           "tests/test_model.py -k 'invalid_configs and shrink_layer'", every=False),
    # --- an eighth session's fuzz and walkthrough: configs accepted, then built wrong; a padded vocabulary sampled ---
    Mutant("width_halved_to_zero_accepted", "model.py",
           "        require(width > 0 and width % c.n_head == 0,",
           "        require(width % c.n_head == 0,",
           "tests/test_model.py -k invalid_configs", every=False),
    Mutant("rope_checks_the_narrowest_head_only", "model.py",
           "        head_dim = width // c.n_head\n",
           "        head_dim = c.widths()[-1] // c.n_head\n",
           "tests/test_model.py -k invalid_configs", every=False),
    Mutant("ffn_without_units_accepted", "model.py",
           "        require(c.mlp_hidden or c.mlp_ratio * width >= 1,",
           "        require(True,",
           "tests/test_model.py -k invalid_configs", every=False),
    Mutant("padded_vocabulary_draws_every_id", "model.py",
           "idx_next = sample_next(logits[:, -1, :n_tokens], temperature, top_k, generator)",
           "idx_next = sample_next(logits[:, -1, :], temperature, top_k, generator)",
           "tests/test_sample.py -k padded_vocabulary", every=False),
    Mutant("sample_py_draws_every_id", "sample.py",
           "on_token=on_token, n_tokens=tok.vocab_size)",
           "on_token=on_token)",
           "tests/test_sample.py -k padded_vocabulary", every=False),
    Mutant("batch_memory_never_checked", "safety_net/build.py",
           "    if needed > memory:",
           "    if False:",
           "tests/test_faults.py -k batch_the_machine", every=False),
    Mutant("batch_bound_counts_the_log_softmax_twice", "safety_net/build.py",
           "    per_token = (value + 4) * config.vocab_size",
           "    per_token = (value + 8) * config.vocab_size",
           "tests/test_loaded_files.py -k batch_bound", every=False),
    Mutant("batch_bound_one_activation_per_layer", "safety_net/build.py",
           "            kept += 2 * width + hidden",
           "            kept += width",
           "tests/test_loaded_files.py -k batch_bound", every=False),
    Mutant("batch_bound_in_float32_under_autocast", "safety_net/build.py",
           '    value = 4 if dtype == "float32" else 2',
           "    value = 4",
           "tests/test_loaded_files.py -k batch_bound", every=False),
    Mutant("init_from_own_out_dir_written_over", "safety_net/starting_point.py",
           "            check_not_written_over(init_from, config[\"out_dir\"])\n",
           "",
           "tests/test_faults.py -k own_out_dirs", every=False),
    Mutant("one_file_drops_what_the_config_runs", "tools/one_file.py",
           "        spec.removed -= words_on(ran_args)\n",
           "",
           "tests/test_one_file.py -k explanation", every=False),
    Mutant("ctrl_c_in_torch_save_a_traceback", "safety_net/fileio.py",
           "        if not isinstance(e, KeyboardInterrupt) and underlying(e, KeyboardInterrupt) is not None:",
           "        if False:",
           "tests/test_faults.py -k ctrl_c_during_torch", every=False),
    Mutant("start_file_keeps_carriage_returns", "safety_net/sampling.py",
           '        with open(path, encoding="utf-8-sig") as f:',
           '        with open(path, encoding="utf-8-sig", newline="") as f:',
           "tests/test_sample.py -k line_ends", every=False),
    Mutant("cpu_0_kept", "safety_net/runtime.py",
           '    if kind == "cpu":   # ',
           '    if False:   # ',
           "tests/test_train_faults.py -k cpu_0", every=False),
    Mutant("config_block_assignment_dropped", "safety_net/configurator.py",
           "        if name in top_level or name not in keys and name in read:",
           "        if True:",
           "tests/test_config.py -k inside_a_block", every=False),
    Mutant("split_in_floats", "prepare.py",
           "    n = int(len(text) * (1 - Decimal(str(val_fraction))))",
           "    n = int(len(text) * (1 - val_fraction))",
           "tests/test_prepare.py -k fraction_asked", every=False),
    Mutant("init_from_link_written_over", "safety_net/starting_point.py",
           "    target = os.path.realpath(init_from)",
           "    target = init_from",
           "tests/test_faults.py -k own_out_dirs", every=False),
    Mutant("float_split_called_another_fraction", "safety_net/text_dataset.py",
           '    elif text.get("val_fraction") == meta["text"]["val_fraction"]:',
           "    elif False:",
           "tests/test_prepare.py -k fraction_asked", every=False),
    Mutant("default_start_hint_for_any_newline", "safety_net/tokenizers.py",
           '            if text == "\\n":',
           '            if "\\n" in unknown:',
           "tests/test_sample.py -k default_start", every=False),
    Mutant("eval_only_warmup_note", "safety_net/run_dir.py",
           '    iterations = 0 if config["eval_only"] else config["max_iters"]',
           '    iterations = config["max_iters"]',
           "tests/test_train_faults.py -k warmup_note", every=False),
    Mutant("data_dir_given_is_prepared", "safety_net/starting_point.py",
           '    if theirs:\n',
           '    if False:\n',
           "tests/test_faults.py -k data_dir_given", every=False),
    Mutant("one_file_writes_unchecked_files", "tools/one_file.py",
           "    if difference:\n        raise UserError(f\"the file made for {name} gives other",
           "    if False:\n        raise UserError(f\"the file made for {name} gives other",
           "tests/test_one_file.py -k writes_no_file", every=False),
    Mutant("one_file_checks_greedy_tokens_only", "tools/one_file.py",
           "        a, b = (m.generate(prompt, tokens, use_kv_cache=use_kv_cache, generator=",
           "        a, b = (m.generate(prompt, tokens, use_kv_cache=use_kv_cache, temperature=0, generator=",
           "tests/test_one_file.py -k planted", every=False),
    Mutant("gguf_any_activation", "tools/llamacpp/export.py",
           "    if config.activation not in LLAMACPP_ACTIVATIONS[arch]:",
           "    if False:",
           "tests/test_llamacpp.py -k activation", every=False),
    Mutant("eval_losses_never_reckoned", "safety_net/build.py",
           "    if 4 * eval_iters > memory:",
           "    if False:",
           "tests/test_faults.py -k batch_the_machine", every=False),
    Mutant("eval_reckoned_as_training", "safety_net/build.py",
           "    if training:\n        # the values a token keeps",
           "    if True:\n        # the values a token keeps",
           "tests/test_loaded_files.py -k evaluation_is_reckoned", every=False),
    Mutant("resume_drops_the_last_evaluation", "safety_net/run_log.py",
           '    return int(row["iter"]) < resumed_at or int(row["iter"]) == resumed_at and row["kind"] == "eval"',
           '    return int(row["iter"]) < resumed_at',
           "tests/test_train.py -k between_evaluations", every=False),
    Mutant("one_file_checks_the_traced_depth_only", "tools/one_file.py",
           "    if not computes_deeper(module, ran_args, keep_heaviest_branch):",
           "    if False:",
           "tests/test_one_file.py -k its_depth_only", every=False),
    Mutant("one_file_folds_per_layer_conditions", "tools/one_file.py",
           " or not pure(node.test) or self.varies_by_iteration(node.test):",
           " or not pure(node.test):",
           "tests/test_one_file.py -k per_layer_condition", every=False),
    Mutant("resume_on_other_ranks_silent", "safety_net/starting_point.py",
           "        if rank == 0 and ranks != world and config[\"dropout\"] > 0:",
           "        if False:",
           "tests/test_train.py -k another_number_of_ranks", every=False),
    # --- the twelfth session's hunts ---
    Mutant("segments_of_a_divisor_block_size", "safety_net/dataset.py",
           "    if np.any(starts % (block_size + 1)) or made_for_block not in (None, block_size):",
           "    if np.any(starts % (block_size + 1)):",
           "tests/test_pangu.py -k segments_made", every=False),
    Mutant("padded_vocabulary_fix_unnamed", "safety_net/checkpoint.py",
           '        if rows > own["tok_emb.wte.weight"].size(0):',
           "        if False:",
           "tests/test_nanogpt.py -k padded", every=False),
    Mutant("hf_export_records_no_tokenizer", "tools/huggingface/convert.py",
           '        config["tokenizer_id"] = tokenizer_id(meta)\n',
           "",
           "tests/test_huggingface.py -k records_its_tokenizer", every=False),
    Mutant("gpt2_folder_fix_wrong_meta", "safety_net/starting_point.py",
           "        meta = json.dumps(dict(gpt2_meta(), dataset=os.path.basename(os.path.normpath(data_dir))))",
           "        meta = json.dumps(dict(gpt2_meta(), vocab_size=65))",
           "tests/test_nanogpt.py -k gpt2_token_folder", every=False),
    Mutant("nanogpt_defaults_keep_bias", "config/nanogpt.py",
           "bias = False\n",
           "bias = True\n",
           "tests/test_nanogpt.py -k nanogpts_settings", every=False),
    Mutant("compare_plan_before_checks", "tools/compare.py",
           "    if not config[\"dry_run\"]:\n"
           "        check_runs(config, status, runs)\n"
           "    print_plan(config, status, runs, infos)\n",
           "    print_plan(config, status, runs, infos)\n"
           "    if not config[\"dry_run\"]:\n"
           "        check_runs(config, status, runs)\n",
           "tests/test_compare.py -k is_a_file", every=False),
    Mutant("busy_note_before_bad_start", "safety_net/sampling.py",
           "    start_text = read_prompt(cfg[\"start\"])   # before the note: a bad --start is one line\n"
           "    if busy_machine(device):\n"
           "        print(f\"note: {busy_machine(device)}\", file=sys.stderr)\n",
           "    if busy_machine(device):\n"
           "        print(f\"note: {busy_machine(device)}\", file=sys.stderr)\n"
           "    start_text = read_prompt(cfg[\"start\"])\n",
           "tests/test_sample.py -k bad_start_file", every=False),
    Mutant("inherit_writes_over_another_runs_checkpoint", "tools/pangu/inherit.py",
           "for name in (CKPT_NAME, LAST_NAME) if",
           "for name in () if",
           "tests/test_pangu.py -k another_runs_checkpoints", every=False),
    Mutant("inherit_more_kv_heads_than_the_source", "tools/pangu/inherit.py",
           "        need(n_kv_head <= src_kv,",
           "        need(True,",
           "tests/test_pangu.py -k more_kv_heads", every=False),
    Mutant("inherit_refuses_its_own_earlier_output", "tools/pangu/inherit.py",
           "    if found == [CKPT_NAME] and earlier_inherit(os.path.join(out_dir, CKPT_NAME)):",
           "    if False:",
           "tests/test_pangu.py -k run_again", every=False),
    Mutant("init_from_changed_key_silent", "safety_net/starting_point.py",
           "                if changed and copied == total:",
           "                if False:",
           "tests/test_nanogpt.py -k keeps_the_shapes", every=False),
    Mutant("init_from_note_on_dropout", "safety_net/starting_point.py",
           'NOT_NOTED = ("dropout", "block_size",',
           'NOT_NOTED = ("block_size",',
           "tests/test_nanogpt.py -k keeps_the_shapes", every=False),
    Mutant("min_lr_checked_without_decay", "safety_net/train_config.py",
           '        top = lr if c["decay_lr"] else math.inf',
           "        top = lr",
           "tests/test_train_faults.py -k min_lr_above", every=False),
    Mutant("unused_name_looks_once", "safety_net/fileio.py",
           "    while os.path.lexists(name):\n        n += 1",
           "    if os.path.lexists(name):\n        n += 1",
           "tests/test_faults.py -k not_there_yet", every=False),
    Mutant("model_keys_checked_after_the_data", "train.py",
           "    start.check_model(args, explicit)\n",
           "",
           "tests/test_train.py -k before_the_data", every=False),
    Mutant("keep_heaviest_branch_on_one_branch_silent", "tools/technique_lines.py",
           "            if keep_heaviest_branch and model.config.n_branches == 1:",
           "            if False:",
           "tests/test_technique_lines.py -k bad_input", every=False),
    Mutant("out_over_a_file_the_command_did_not_write", "safety_net/fileio.py",
           "    if marker is not None and os.path.isfile(path) and os.path.getsize(path) > 0:",
           "    if False:",
           "tests/test_one_file.py -k replaces_only", every=False),
    Mutant("out_over_a_runs_own_file", "safety_net/fileio.py",
           "    if in_a_run and os.path.basename(path) in RUN_FILES:",
           "    if False:",
           "tests/test_plan.py -k bad_input_one_line", every=False),
    Mutant("log_samples_over_its_task", "tools/eval.py",
           '    if os.path.exists(path) and os.path.exists(cfg["mc_file"]) and os.path.samefile(path, cfg["mc_file"]):',
           "    if False:",
           "tests/test_eval.py -k refuses_bad_paths", every=False),
    Mutant("out_dir_file_found_after_the_data", "safety_net/train_config.py",
           '    check_out_dir(c["out_dir"])   # before the data is prepared\n',
           "",
           "tests/test_train.py -k before_the_data", every=False),
    Mutant("bad_vocab_size_found_after_the_data", "safety_net/starting_point.py",
           'model_config(dict(args, vocab_size=min(args["vocab_size"], 1)))',
           "model_config(dict(args, vocab_size=1))",
           "tests/test_train.py -k before_the_data", every=False),
    Mutant("data_segments_read_after_the_data", "safety_net/starting_point.py",
           '            read_segments(config["data_segments"])',
           "            pass",
           "tests/test_train.py -k before_the_data", every=False),
    Mutant("max_iters_0_writes_a_log", "safety_net/run_dir.py",
           '            pending = self.earlier or self.config["eval_only"] or self.config["max_iters"] == 0',
           '            pending = self.earlier or self.config["eval_only"]',
           "tests/test_train_faults.py -k max_iters_0", every=False),
    Mutant("a_lock_alone_left_behind", "safety_net/run_dir.py",
           "                held.callback(remove_if_only_the_lock, self.path, made)",
           "                pass",
           "tests/test_train_faults.py -k new_out_dir_writes_no_log", every=False),
    Mutant("data_dir_file_named_out_dir", "safety_net/starting_point.py",
           '        check_out_dir(data_dir, key="data_dir")',
           "        pass",
           "tests/test_train.py -k before_the_data", every=False),
    Mutant("a_refused_run_removes_the_folder", "safety_net/run_dir.py",
           "            made = missing_folders(self.path)\n"
           "            held.enter_context(lock_dir(self.path))\n",
           "            made = missing_folders(self.path)\n"
           "            if made:\n"
           "                held.callback(remove_if_only_the_lock, self.path, made)\n"
           "            held.enter_context(lock_dir(self.path))\n",
           "tests/test_train_faults.py -k refused_the_lock", every=False),
    Mutant("log_samples_samefile_without_the_task", "tools/eval.py",
           '    if os.path.exists(path) and os.path.exists(cfg["mc_file"]) and os.path.samefile(path, cfg["mc_file"]):',
           '    if os.path.exists(path) and os.path.samefile(path, cfg["mc_file"]):',
           "tests/test_eval.py -k refuses_bad_paths", every=False),
    Mutant("export_into_a_run_folder", "tools/huggingface/convert.py",
           '    check_not_a_run_folder(config["out"], "out", "--out=hf-out, a folder of its own")',
           "    pass",
           "tests/test_faults.py -k training_runs_folder", every=False),
    Mutant("checkpoints_into_the_data_folder", "safety_net/train_config.py",
           '    if os.path.realpath(c["out_dir"]) == os.path.realpath(default_data_dir(c)) or is_prepared(c["out_dir"]):',
           '    if is_prepared(c["out_dir"]):',
           "tests/test_faults.py -k training_runs_folder", every=False),
    Mutant("compare_reuses_a_run_started_otherwise", "tools/compare.py",
           'NOT_TRAINING_KEYS = ("out_dir", "variant",',
           'NOT_TRAINING_KEYS = ("out_dir", "init_from", "variant",',
           "tests/test_compare.py -k started_otherwise", every=False),
    Mutant("compare_links_samples_it_never_wrote", "tools/compare.py",
           "    if samples:   # none without prompts",
           "    if True:",
           "tests/test_compare.py -k resumes_an_interrupted", every=False),
    Mutant("import_over_a_runs_checkpoint", "tools/huggingface/convert.py",
           '    check_not_a_run_file(out, "out")   # a run\'s ckpt.pt would become a model it never trained',
           "    pass",
           "tests/test_huggingface.py -k runs_checkpoint_or_a_text", every=False),
    Mutant("eval_of_an_export_forgets_its_tokenizer", "tools/huggingface/convert.py",
           '    ckpt = {"path": info["source"], "tokenizer_id": recorded_tokenizer_id(info)}',
           '    ckpt = {"path": info["source"]}',
           "tests/test_huggingface.py -k eval_of_an_export", every=False),
    Mutant("resume_with_another_recipe_in_silence", "safety_net/starting_point.py",
           "            self.note_other_recipe()\n",
           "",
           "tests/test_train.py -k other_settings", every=False),
    Mutant("against_names_the_other_file", "tools/one_file.py",
           "        print(\"\\n\".join(diff(other, text, against, name)))",
           "        print(\"\\n\".join(diff(other, text, against, target)))",
           "tests/test_one_file.py -k against_names", every=False),
    Mutant("bench_sizes_an_unprepared_dataset_as_50304", "tools/benchmarks/entries.py",
           '    if vocab is None and "vocab_size" not in texplicit:',
           "    if False:",
           "tests/test_faults.py -k dataset_is_not_prepared", every=False),
    Mutant("executorch_run_samples_file_literally", "tools/executorch/run.py",
           '    start = read_prompt(cfg["start"])',
           '    start = cfg["start"]',
           "tests/test_executorch.py -k reads_start_as_sample_py", every=False),
    Mutant("llamacpp_run_samples_file_literally", "tools/llamacpp/run.py",
           '    start = read_prompt(cfg["start"])',
           '    start = cfg["start"]',
           "tests/test_llamacpp.py -k refusals_are_one_line", every=False),
    Mutant("executorch_run_names_no_character", "tools/executorch/run.py",
           "        if unknown:   # named, as sample.py names them",
           "        if False:",
           "tests/test_executorch.py -k reads_start_as_sample_py", every=False),
    Mutant("a_replaced_datasets_test_split_stays", "safety_net/text_dataset.py",
           "    for name in DATA_FILES:",
           '    for name in ("meta.json",):',
           "tests/test_own_text.py -k replaced_only_with_force", every=False),
    Mutant("wikitext_over_another_dataset", "tools/wikitext103.py",
           "    if not force:\n        raise UserError(f\"{out_dir} holds the dataset",
           "    if False:\n        raise UserError(f\"{out_dir} holds the dataset",
           "tests/test_wikitext103.py -k another_dataset_or_a_run", every=False),
    Mutant("wikitext_into_a_run_folder", "tools/wikitext103.py",
           '    check_not_a_run_folder(out_dir, "out_dir", f"--out_dir=data/{name}, a folder of its own")\n',
           "",
           "tests/test_wikitext103.py -k another_dataset_or_a_run", every=False),
    Mutant("a_replaced_datasets_figure_stays", "safety_net/text_dataset.py",
           "    for name in DATA_FILES:",
           "    for name in DATA_FILES[:-1]:",
           "tests/test_own_text.py -k replaced_only_with_force", every=False),
    Mutant("resume_note_on_every_rank", "safety_net/starting_point.py",
           '        if self.config["eval_only"] or not self.master:',
           '        if self.config["eval_only"]:',
           "tests/test_train.py -k other_settings", every=False),
    Mutant("resume_note_for_an_evaluation", "safety_net/starting_point.py",
           '        if self.config["eval_only"] or not self.master:',
           "        if not self.master:",
           "tests/test_train.py -k other_settings", every=False),
    Mutant("resume_note_on_a_folder_named_otherwise", "safety_net/starting_point.py",
           "        return os.path.realpath(default_data_dir(config))",
           "        return config[key]",
           "tests/test_train.py -k other_settings", every=False),
    Mutant("export_refusal_says_drop_it", "safety_net/dataset.py",
           '            drop = ", or drop it" if ckpt.get("data_dir") else ""',
           '            drop = ", or drop it"',
           "tests/test_huggingface.py -k eval_of_an_export", every=False),
    Mutant("trace_keys_silently_overwritten", "tools/technique_lines.py",
           "    fixed = [key for key in (*RUN, *OWN) if key in explicit]",
           "    fixed = []",
           "tests/test_technique_lines.py -k 'bad_input or trace_sets_itself'", every=False),
    Mutant("code_lines_drops_a_last_line", "tools/code_lines.py",
           "    return len(io.StringIO(source).readlines()), len(code)",
           '    return source.count("\\n"), len(code)',
           "tests/test_one_file.py -k code_lines_counts_a_last_line", every=False),
    Mutant("code_lines_traceback_on_bad_source", "tools/code_lines.py",
           "    except (UnicodeDecodeError, SyntaxError, tokenize.TokenError) as e:",
           "    except tokenize.TokenError as e:",
           "tests/test_one_file.py -k code_lines_counts_a_last_line", every=False),
    Mutant("inherit_calls_pgpt_mlp_only", "tools/pangu/inherit.py",
           "    if len(cfg.attention_layers()) != cfg.layers_per_branch():",
           "    if len(cfg.attention_layers()) != cfg.n_layer:",
           "tests/test_pangu.py -k unsupported_sources", every=False),
    Mutant("plan_config_file_ignores_the_flags", "tools/plan.py",
           "        args.update(flags)   # the command line's flags win, as train.py's\n",
           "",
           "tests/test_plan.py -k train_config_file", every=False),
    Mutant("technique_lines_traces_the_checks", "tools/technique_lines.py",
           "        title = \"The config's checks\"",
           "        title = \"The config checks\"",
           "tests/test_technique_lines.py -k checks_section", every=False),
    Mutant("bench_out_replaces_any_file", "tools/bench.py",
           "        check_out_file(cfg[\"out\"], example, marker=out_marker(cfg[\"out\"]))",
           "        check_out_file(cfg[\"out\"], example)",
           "tests/test_train_faults.py -k bench_out_refuses", every=False),
    Mutant("config_file_model_ignores_its_checkpoint", "tools/benchmarks/entries.py",
           "    return model_args(tcfg, texplicit, base=base, vocab_size=vocab), tcfg",
           "    return model_args(tcfg, texplicit, vocab_size=vocab), tcfg",
           "tests/test_plan.py -k starts_from_a_checkpoint", every=False),
    Mutant("hf_sample_data_dir_unchecked", "tools/huggingface/sample.py",
           "        tok = load_tokenizer(checked_data_dir(info, cfg[\"data_dir\"]))",
           "        tok = load_tokenizer(cfg[\"data_dir\"])",
           "tests/test_huggingface.py -k 'another_tokenizers_data or gpt2_vocabulary_model_refuses'", every=False),
    Mutant("hf_gpt2_model_takes_any_data", "tools/huggingface/convert.py",
           "    if ckpt[\"tokenizer_id\"] is None and gpt2 and kind != \"gpt2\":",
           "    if ckpt[\"tokenizer_id\"] is None and gpt2 and kind is None:",
           "tests/test_huggingface.py -k gpt2_vocabulary_model_refuses", every=False),
    Mutant("sentencepiece_token_decoded_alone", "tools/huggingface/tokenizer.py",
           "            return text.replace(SPACE_MARK, \" \").encode(\"utf-8\")",
           "            return self.tokenizer.decode([token]).encode(\"utf-8\")",
           "tests/test_streaming.py -k sentencepiece", every=False),
    Mutant("transformers_decode_keeps_specials", "tools/huggingface/tokenizer.py",
           "        return self.tok.decode(list(ids), skip_special_tokens=True)",
           "        return self.tok.decode(list(ids))",
           "tests/test_huggingface.py -k decodes_as_it_streams", every=False),
    Mutant("hf_sample_padded_export_refused", "tools/huggingface/sample.py",
           "    if cfg[\"data_dir\"] and recorded_tokenizer_id(info) is None and tok.vocab_size < model.config.vocab_size:",
           "    if cfg[\"data_dir\"] and tok.vocab_size < model.config.vocab_size:",
           "tests/test_huggingface.py -k padded_export", every=False),
    Mutant("resume_takes_the_checkpoints_optimizer_settings", "safety_net/checkpoint.py",
           "    for group, own in zip(optimizer.param_groups, settings):\n        group.update(own)\n",
           "",
           "tests/test_train.py -k own_optimizer_settings", every=False),
    Mutant("resume_note_compares_the_dataset_name", "safety_net/starting_point.py",
           "RECIPE_KEYS = (\"data_dir\", ",
           "RECIPE_KEYS = (\"dataset\", \"data_dir\", ",
           "tests/test_train.py -k other_settings_than_its_run", every=False),
    Mutant("resume_note_compares_segments_as_text", "safety_net/starting_point.py",
           "    if key == \"data_segments\" and config[key]:",
           "    if key == \"data_segments\" and False:",
           "tests/test_train.py -k other_settings_than_its_run", every=False),
    Mutant("time_note_counts_all_max_iters", "safety_net/run_dir.py",
           "    left = max(0, iterations - start_iter)",
           "    left = iterations",
           "tests/test_train_faults.py -k time_note_of_a_resume", every=False),
    Mutant("decode_bench_counts_idle_branches", "tools/benchmarks/measure.py",
           "        if model.keep_branch not in (None, i):",
           "        if model.keep_branch is not None and False:",
           "tests/test_plan.py -k decode_bench_counts", every=False),
    Mutant("damaged_checkpoint_paths_unchecked", "safety_net/checkpoint.py",
           "    for key in (\"data_dir\", \"dataset\", \"tokenizer_id\"):   # paths and names: text or absent",
           "    for key in ():   # paths and names: text or absent",
           "tests/test_faults.py -k damaged_checkpoint_names_what_is_wrong", every=False),
    Mutant("hf_missing_folder_tried_on_the_hub", "tools/huggingface/convert.py",
           "    refuse(not path.startswith((\"/\", \".\", \"~\")), ",
           "    refuse(True, ",
           "tests/test_huggingface.py -k missing_folder_or_a_checkpoint_file", every=False),
    Mutant("empty_prompt_fix_offers_a_missing_newline", "safety_net/tokenizers.py",
           "        if known is not None and \"\\n\" not in known:   # the default --start is refused too (a hunt)",
           "        if False:   # the default --start is refused too (a hunt)",
           "tests/test_sample.py -k without_newlines", every=False),
    Mutant("fast_sample_compile_mode_ignored_on_gpu", "tools/fast_sample.py",
           "    if device.type == \"cuda\" and mode != DEFAULTS[\"compile_mode\"]:   # it was ignored there (a hunt)",
           "    if False:   # it was ignored there (a hunt)",
           "tests/test_compile.py -k fast_sample_refuses_what_it_cannot_compile", every=False),
    Mutant("ranks_file_read_through_tiktokens_cache", "safety_net/tokenizers.py",
           "        ranks = read_ranks(path)\n",
           "        import tiktoken.load\n        ranks = tiktoken.load.load_tiktoken_bpe(path)\n",
           "tests/test_prepare.py -k mended_ranks", every=False),
    Mutant("prepare_replaces_another_programs_token_files", "safety_net/text_dataset.py",
           "    if tokens and not force:",
           "    if False:",
           "tests/test_prepare.py -k another_program", every=False),
    Mutant("wikitext_empty_split_written", "tools/wikitext103.py",
           "    check_not_empty(splits, source)\n",
           "",
           "tests/test_wikitext103.py -k empty_split", every=False),
    Mutant("compact_report_before_its_checks", "tools/pangu/compact_vocab.py",
           "    with contextlib.redirect_stdout(report):\n",
           "    with contextlib.nullcontext(report):\n",
           "tests/test_compact_vocab.py -k prints_only_its_error", every=False),
    Mutant("refine_draws_underflowed_segments", "tools/pangu/refine.py",
           "        if drawable < n0:\n",
           "        if drawable < 0:\n",
           "tests/test_pangu.py -k refine_prefers", every=False),
    Mutant("paper000_summary_unknown_reference_after_figures", "tools/paper000_summary.py",
           "    if config[\"reference\"] not in names:",
           "    if False:",
           "tests/test_compare.py -k paper000_summary", every=False),
    Mutant("compare_dry_run_skips_the_settings_checks", "tools/compare.py",
           "    check_run_settings(runs, config[\"dry_run\"])   # before the plan is printed: bad input is one line\n",
           "",
           "tests/test_compare.py -k dry_run_checks_every_runs_settings", every=False),
    Mutant("compare_seed_ignored_beside_a_seeds_list", "tools/compare.py",
           "    need(not isinstance(config[\"seeds\"], (list, tuple)) or \"seed\" not in explicit,",
           "    need(True,",
           "tests/test_compare.py -k seeds_and_custom_variants_on_the_command_line", every=False),
    Mutant("compare_report_states_one_models_settings", "tools/compare.py",
           "    values = {r[\"name\"]: r[key] for r in rows}",
           "    values = {r[\"name\"]: r[key] for r in rows[:1]}",
           "tests/test_compare.py -k setup_line", every=False),
    Mutant("resume_trusts_a_ckpt_pt_left_behind", "safety_net/run_dir.py",
           "        behind = load_checkpoint(path, mmap=True).get(\"best_val_loss\") != best_val_loss",
           "        behind = False",
           "tests/test_train.py -k between_the_two_saves", every=False),
    Mutant("bool_keys_bare_only_where_listed", "safety_net/configurator.py",
           "    argv = expand_bool_flags(list(argv), [k for k, v in defaults.items() if isinstance(v, bool)])",
           "    argv = expand_bool_flags(list(argv), [k for k, v in defaults.items() if k == \"no_kv_cache\"])",
           "tests/test_config.py -k every_bool_key_may_be_given_bare", every=False),
    Mutant("help_taken_from_a_value", "safety_net/configurator.py",
           "    if _asks_for_help(argv):",
           "    if any(a in (\"-h\", \"--help\") for a in argv):",
           "tests/test_config.py -k help_is_an_argument_of_its_own", every=False),
    Mutant("config_file_byte_order_mark_refused", "safety_net/configurator.py",
           "        with open(path, encoding=\"utf-8-sig\") as f:",
           "        with open(path, encoding=\"utf-8\") as f:",
           "tests/test_config.py -k one_line_and_read_as_python_does", every=False),
    Mutant("inherit_narrows_sinusoidal_positions", "tools/pangu/inherit.py",
           "    need(src.pos_embedding != \"sinusoidal\" or n_embd == src.n_embd,",
           "    need(True,",
           "tests/test_pangu.py -k narrower_sinusoidal", every=False),
    Mutant("inherit_keeps_the_sources_layer_fields", "tools/pangu/inherit.py",
           "EVERY_LAYER = dict(n_attn_layers=None, n_top_attn_layers=0, share_from_layer=0)",
           "EVERY_LAYER = dict()",
           "tests/test_pangu.py -k narrower_sinusoidal", every=False),
    Mutant("wikitext_replaces_another_programs_token_files", "tools/wikitext103.py",
           "        check_foreign_token_files(out_dir, force)\n",
           "",
           "tests/test_wikitext103.py -k another_dataset_or_a_run", every=False),
    Mutant("train_prepares_over_a_default_folders_token_files", "safety_net/starting_point.py",
           "    if theirs:\n",
           "    if config.get(\"data_dir\") and theirs:\n",
           "tests/test_faults.py -k never_prepared_over", every=False),
    Mutant("compare_refuses_an_unknown_dataset_late", "tools/compare.py",
           "                dataset_and_tokenizer(dataset, \"\", \"\", 0.1, train.prepare.DATASETS, None)   # unknown: one line",
           "                pass",
           "tests/test_compare.py -k dry_run_checks_every", every=False),
    Mutant("tools_read_another_char_vocabulary", "safety_net/dataset.py",
           "    check_vocabulary(load_meta(data_dir, ckpt), ckpt, data_dir)\n",
           "",
           "tests/test_loaded_files.py -k another_char_vocabulary", every=False),
    Mutant("export_misses_a_nanogpt_checkpoints_gpt2", "tools/huggingface/convert.py",
           "    return load_meta(folder, ckpt), os.path.join(folder, \"meta.json\")",
           "    return load_meta(folder), os.path.join(folder, \"meta.json\")",
           "tests/test_nanogpt.py -k exports_with_gpt2", every=False),
    Mutant("config_file_keys_set_by_exec_dropped", "safety_net/configurator.py",
           "    _refuse_unread_keys(path, config, namespace, values)\n",
           "",
           "tests/test_config.py -k other_than_by_an_assignment", every=False),
    Mutant("prepare_rewrites_the_dataset_a_run_reads", "safety_net/text_dataset.py",
           "    if check_replace(out_dir, meta, force) and holds_dataset(out_dir, splits, meta):",
           "    if check_replace(out_dir, meta, force) and False:",
           "tests/test_prepare.py -k same_dataset_again", every=False),
    Mutant("prepare_keeps_a_damaged_split", "safety_net/text_dataset.py",
           "        if not os.path.isfile(path) or not np.array_equal(np.fromfile(path, dtype=np.uint16), np.asarray(ids)):",
           "        if not os.path.isfile(path) or os.path.getsize(path) != 2 * len(ids):",
           "tests/test_prepare.py -k same_dataset_again", every=False),
    Mutant("prepare_removes_a_projects_test_bin", "safety_net/text_dataset.py",
           "    return [name for name in DATA_FILES[1:] if os.path.exists(os.path.join(out_dir, name))]",
           "    return [name for name in (\"train.bin\", \"val.bin\") if os.path.exists(os.path.join(out_dir, name))]",
           "tests/test_prepare.py -k projects_own_files", every=False),
    Mutant("half_prepared_meta_pkl_folder_read", "safety_net/dataset.py",
           "    if not os.path.isfile(path) and os.path.exists(os.path.join(data_dir, PREPARING)):",
           "    if False:",
           "tests/test_prepare.py -k stopped_over_nanogpts", every=False),
    Mutant("train_writes_into_another_datasets_folder", "safety_net/train_config.py",
           "os.path.realpath(default_data_dir(c)) or is_prepared(c[\"out_dir\"]):",
           "os.path.realpath(default_data_dir(c)):",
           "tests/test_faults.py -k refused_in_a_training_runs_folder", every=False),
    Mutant("executorch_exports_a_context_of_one", "tools/executorch/export.py",
           "    if config.block_size < 2:   # a traceback (a hunt)",
           "    if False:",
           "tests/test_executorch.py -k context_of_one", every=False),
    Mutant("bench_measures_before_refusing_the_compiled_decoder", "tools/bench.py",
           "    if cfg[\"compile\"] and \"decode\" in cfg[\"measure\"]:",
           "    if False:",
           "tests/test_faults.py -k compiled_decoder_cannot_run", every=False),
    Mutant("a_shadowed_mlp_ratio_accepted", "safety_net/build.py",
           "    if given.get(\"mlp_ratio\", args[\"mlp_ratio\"]) != args[\"mlp_ratio\"] and hidden is not None:",
           "    if False:",
           "tests/test_train.py -k before_the_data_is_prepared", every=False),
    Mutant("gguf_draws_among_padding_rows", "tools/llamacpp/export.py",
           "        writer.add_uint32(MODEL_VOCAB_KEY, meta[\"vocab_size\"])",
           "        writer.add_uint32(MODEL_VOCAB_KEY, c.vocab_size)",
           "tests/test_llamacpp.py -k padded_vocabulary", every=False),
    Mutant("wikitext_workers_keep_an_asking_sigterm", "tools/wikitext103.py",
           "    signal.signal(signal.SIGTERM, signal.SIG_DFL)\n    global _worker_enc",
           "    global _worker_enc",
           "tests/test_wikitext103.py -k only_asks", every=False),
    Mutant("inherit_drops_mlp_ratio_beside_mlp_hidden", "tools/pangu/inherit.py",
           "    need(not (hidden and mlp_ratio),",
           "    need(True,",
           "tests/test_pangu.py -k narrower_sinusoidal", every=False),
    Mutant("a_run_leaves_the_empty_folders_it_made", "safety_net/run_dir.py",
           "            for folder in made[1:]:\n                os.rmdir(folder)",
           "            pass",
           "tests/test_train_faults.py -k new_out_dir_writes_no_log", every=False),
    Mutant("train_offers_meta_json_for_a_folders_test_bin", "safety_net/starting_point.py",
           "    if theirs and not {\"train.bin\", \"val.bin\"} <= set(theirs):",
           "    if False:",
           "tests/test_faults.py -k never_prepared_over", every=False),
    Mutant("config_keys_compared_as_objects", "safety_net/configurator.py",
           "    try:\n        return bool(value != before)",
           "    try:\n        return True",
           "tests/test_config.py -k other_than_by_an_assignment", every=False),
    Mutant("export_of_an_import_drops_the_tokenizer_id", "tools/huggingface/convert.py",
           "    elif recorded_id:\n        config[\"tokenizer_id\"] = recorded_id",
           "    elif False:\n        pass",
           "tests/test_huggingface.py -k records_its_tokenizer", every=False),
    Mutant("eval_mc_ignores_perplexity_options", "tools/eval.py",
           "    ignored = [key for key in (\"splits\", \"stride\") if cfg[\"mc_file\"] and cfg[key] != DEFAULTS[key]]",
           "    ignored = []",
           "tests/test_eval.py -k refuses_bad_paths", every=False),
    Mutant("eval_mc_ignores_compile", "tools/eval.py",
           "    if cfg[\"compile\"]:   # it was ignored here (a hunt)\n        model.compile()",
           "    pass",
           "tests/test_eval.py -k compiles_when_asked", every=False),
    Mutant("compare_names_the_configs_dataset", "tools/compare.py",
           "    if not config[\"data_dir\"]:\n        return config[\"dataset\"]\n    try:",
           "    if True:\n        return config[\"dataset\"]\n    try:",
           "tests/test_compare.py -k writes_tables", every=False),
    Mutant("trace_takes_a_data_dir_it_drops", "tools/technique_lines.py",
           "    fixed = [key for key in (*RUN, *OWN) if key in explicit]",
           "    fixed = [key for key in RUN if key in explicit]",
           "tests/test_technique_lines.py -k trace_sets_itself_are", every=False),
    Mutant("prepare_keeps_a_meta_json_of_another_name", "safety_net/text_dataset.py",
           "    if load_meta(out_dir) != meta:\n        return False\n",
           "",
           "tests/test_prepare.py -k same_dataset_again", every=False),
    Mutant("config_check_compares_an_array", "safety_net/configurator.py",
           "    if value is before:\n        return False\n    try:",
           "    try:",
           "tests/test_config.py -k other_than_by_an_assignment", every=False),
    Mutant("train_tells_its_own_damaged_dataset_to_move_away", "safety_net/starting_point.py",
           "    theirs = [] if vocabulary else foreign_token_files(data_dir)",
           "    theirs = foreign_token_files(data_dir)",
           "tests/test_faults.py -k never_prepared_over", every=False),
    Mutant("refine_scores_out_not_the_newest_run", "tools/pangu/refine.py",
           "    out_dir=\"\",          # round-1 out_dir",
           "    out_dir=\"out\",       # round-1 out_dir",
           "tests/test_pangu.py -k newest_run_as_sample", every=False),
    Mutant("llamacpp_run_refuses_no_new_tokens", "tools/llamacpp/run.py",
           "or cfg[\"max_new_tokens\"] < 0:",
           "or cfg[\"max_new_tokens\"] < 1:",
           "tests/test_llamacpp.py -k say_in_one_line", every=False),
    Mutant("executorch_bench_takes_file_start_as_text", "tools/executorch/bench.py",
           "    start = read_prompt(cfg[\"start\"])\n",
           "    start = cfg[\"start\"]\n",
           "tests/test_executorch.py -k deep_thinking_row", every=False),
    Mutant("init_from_a_run_folder_refused", "safety_net/train_config.py",
           "os.path.isfile(init) or is_run_folder(init) or is_hf_source(init),",
           "os.path.isfile(init) or is_hf_source(init),",
           "tests/test_faults.py -k own_out_dirs_checkpoint", every=False),
    Mutant("init_from_its_own_folder_written_over", "safety_net/starting_point.py",
           "        init_from = resolve_path(init_from)   # the file a run's folder means",
           "        pass   # the file a run's folder means",
           "tests/test_faults.py -k own_out_dirs_checkpoint", every=False),
    Mutant("executorch_run_lumps_its_option_checks", "tools/executorch/run.py",
           "    check_sampling_options(cfg)   # sample.py's checks and messages",
           "    pass",
           "tests/test_executorch.py -k options_as_sample_py", every=False),
    Mutant("compact_vocab_rewrites_the_dataset_a_run_reads", "tools/pangu/compact_vocab.py",
           "    if same and figure and holds_dataset(",
           "    if False and holds_dataset(",
           "tests/test_compact_vocab.py -k roundtrip", every=False),
    Mutant("prepare_force_keeps_the_same_dataset", "safety_net/text_dataset.py",
           "        return not force   # --force: written again",
           "        return True   # --force: written again",
           "tests/test_prepare.py -k same_dataset_again", every=False),
    Mutant("hf_export_reads_out_not_the_newest_run", "tools/huggingface/convert.py",
           "    model, ckpt = load_model(config[\"out_dir\"])",
           "    model, ckpt = load_model(config[\"out_dir\"] or \"out\")",
           "tests/test_huggingface.py -k export_reads_the_run", every=False),
    Mutant("list_key_refuses_one_number", "safety_net/configurator.py",
           "        return [value]   # one number",
           "        return value   # one number",
           "tests/test_config.py -k every_list_key", every=False),
    Mutant("hf_sample_out_dir_told_data_dir", "safety_net/configurator.py",
           "and (not close or key == \"out_dir\"):",
           "and not close:",
           "tests/test_nanogpt.py -k nanogpts_sample_keys", every=False),
    Mutant("wikitext103_prepares_its_own_folder_again", "tools/wikitext103.py",
           "    if old.get(\"dataset\") == name:\n        return not force",
           "    if old.get(\"dataset\") == name:\n        return False",
           "tests/test_wikitext103.py -k another_dataset", every=False),
    Mutant("stop_before_training_saves_over_an_earlier_run", "safety_net/run_dir.py",
           "        if iter_num == self.iter_num:",
           "        if False:",
           "tests/test_train_faults.py -k before_any_training_step", every=False),
    Mutant("best_val_loss_counts_the_unsaved_iteration_0", "train.py",
           "                if iter_num > 0 or config[\"eval_only\"]:",
           "                if True:",
           "tests/test_train.py -k best_val_loss_is_the_one", every=False),
    Mutant("divergence_fix_names_a_warmup_without_decay", "safety_net/run_dir.py",
           "if c[\"decay_lr\"] else \"\"",
           "if True else \"\"",
           "tests/test_train_faults.py -k divergence_stops", every=False),
    Mutant("eval_log_samples_over_any_file", "tools/eval.py",
           "    check_out_file(path, \"samples.jsonl\", marker='{\"doc_id\": ', key=\"log_samples\")",
           "    check_out_file(path, \"samples.jsonl\", key=\"log_samples\")",
           "tests/test_eval.py -k log_samples_refuses_bad_paths", every=False),
    Mutant("fingerprint_reads_its_file_after_the_work", "tools/fingerprint.py",
           "    want = read_fingerprints(check) if check else None",
           "    want = None",
           "tests/test_fingerprint.py", every=False),
    Mutant("device_bench_shape_over_a_trained_run", "tools/executorch/bench.py",
           "        check_shape_folder(shape, cfg[\"work_dir\"])\n",
           "",
           "tests/test_executorch.py -k deep_thinking_row", every=False),
    Mutant("device_bench_start_checked_after_the_exports", "tools/executorch/bench.py",
           "    check_start(start, out_dirs, shapes, cfg[\"data_dir\"])\n",
           "",
           "tests/test_executorch.py -k deep_thinking_row", every=False),
    Mutant("compare_samples_draw_padding_ids", "tools/compare.py",
           "                                   top_k=top_k, generator=gen, n_tokens=tok.vocab_size)",
           "                                   top_k=top_k, generator=gen)",
           "tests/test_compare.py -k tokenizers_ids", every=False),
    Mutant("hf_export_over_another_programs_folder", "tools/huggingface/convert.py",
           "    check_export_folder(config[\"out\"])\n",
           "",
           "tests/test_huggingface.py -k export_command_line", every=False),
    Mutant("eval_drops_out_dir_beside_init_from", "tools/eval.py",
           "    if cfg[\"init_from\"] and cfg[\"out_dir\"]:",
           "    if False:",
           "tests/test_eval.py -k log_samples_refuses_bad_paths", every=False),
    Mutant("bench_takes_keys_no_measure_reads", "tools/bench.py",
           "    if unread:\n        key = unread[0]",
           "    if False:\n        key = unread[0]",
           "tests/test_train_faults.py -k no_chosen_measure", every=False),
    Mutant("wikitext103_report_keys_without_a_compact_vocabulary", "tools/wikitext103.py",
           "    if report_keys and not given(config, explicit, \"vocab_size\")",
           "    if False and not given(config, explicit, \"vocab_size\")",
           "tests/test_wikitext103.py -k compact_reports_keys", every=False),
    Mutant("inherit_unread_calibration_keys_without_a_word", "tools/pangu/inherit.py",
           "    note_unread_calibration_keys(opts, needs_data(src, dst, opts[\"layers\"], opts[\"neurons\"]))\n",
           "",
           "tests/test_pangu.py -k calibration_keys_no_cut", every=False),
    Mutant("vs_nanogpt_takes_a_checkout_without_its_prepare", "tools/vs_nanogpt.py",
           "    needed = (\"train.py\", os.path.join(\"data\", \"shakespeare_char\", \"prepare.py\"))",
           "    needed = (\"train.py\",)",
           "tests/test_nanogpt.py -k vs_nanogpt", every=False),
    Mutant("profile_takes_a_programs_options_with_out_dir", "tools/executorch/profile.py",
           "    unread = sorted(explicit & {\"pte\", \"num_threads\"}) if cfg[\"out_dir\"] else []",
           "    unread = []",
           "tests/test_executorch.py -k profile_of_the_compiled", every=False),
    Mutant("bench_keeps_a_branch_of_models_without_branches", "tools/bench.py",
           "    if cfg[\"keep_heaviest_branch\"] and not any(e[\"args\"].get(\"n_branches\", 1) > 1 for e in entries):",
           "    if False:",
           "tests/test_train_faults.py -k no_chosen_measure", every=False),
]

# For every field of model.py's GPTConfig, in its order: the mutants of MUTANTS that break the code handling that
# field (in model.py, or in a tool path that reads it). tests/test_mutation.py fails while a field is missing here,
# so a new technique flag gets a mutant, and its tests are proven to catch a bug in it.
FIELD_MUTANTS = {
    "block_size": ("generation_window_restarts_one_token_early",),
    "vocab_size": ("train_data_vocab_over_the_keys_set",),
    "n_layer": ("gpt2_init_scales_by_n_layer_not_twice_it",),
    "n_head": ("attention_heads_merged_without_transpose",),   # a bug only with more than one head
    "n_embd": ("ffn_hidden_of_n_embd_not_the_layers_width",),
    "dropout": ("attention_dropout_in_eval",),
    "bias": ("out_proj_bias_despite_bias_false", "hf_mlp_bias_ignored"),
    "norm": ("rmsnorm_as_a_layernorm_without_bias",),
    "norm_eps": ("nanogpt_layernorm_eps_of_llama", "hf_gpt2_layer_norm_epsilon_ignored",
                 "gguf_rms_eps_of_the_default"),
    "norm_placement": ("post_norm_normalises_the_sublayer_only",),
    "pos_embedding": ("sinusoidal_odd_dimensions_use_sin", "rope_off_by_one_in_cache",
                      "positions_restart_at_each_cached_call"),
    "rope_base": ("rope_tables_at_the_default_base", "hf_rope_theta_at_top_level_ignored",
                  "gguf_rope_base_of_the_default"),
    "n_kv_head": ("gqa_query_head_reads_wrong_kv_head",),
    "mlp_type": ("swiglu_activation_on_both_branches",),
    "activation": ("gelu_tanh_is_the_exact_gelu",),
    "mlp_hidden": ("mlp_hidden_ignored", "weights_bound_ignores_mlp_hidden"),
    "mlp_ratio": ("mlp_ratio_fixed_at_four",),
    "tie_embeddings": ("hf_llama_tied_by_default",),
    "head_bias": ("tied_head_bias_not_added", "declared_refusal_not_made"),
    "embd_factor_dim": ("factorized_projection_with_a_bias",),
    "share_group_size": ("shared_layer_uses_wrong_weights", "init_scheme_shared_weights_at_their_last_layer"),
    "share_from_layer": ("sharing_groups_counted_from_layer_0",),
    "share_sublayers": ("attention_only_sharing_shares_the_ffn_too",),
    "enhanced_residual": ("enhanced_residual_alpha_swapped",),
    "residual_logit_init": ("residual_logit_init_ignored",),
    "think_steps": ("deep_thinking_test_pass_reads_next_position",),
    "think_eta": ("deep_thinking_eta_swapped",),
    "think_memory": ("first_layer_memory_of_each_layer",),
    "n_attn_layers": ("mlp_only_layers_built_only_with_sharing",),
    "n_top_attn_layers": ("top_attention_layers_shared",),
    "n_branches": ("pgpt_branch_weights_not_normalised", "pgpt_branches_share_cache_slots",
                   "heaviest_branch_is_the_lightest"),
    "shrink_every": ("lgpt_shrinks_after_wrong_layer",),
    # its choice check; the conv layer that shrink_layer="conv" selects, wrong where its kernel reads past inputs
    # (shrink_kernel > 1)
    "shrink_layer": ("config_accepts_any_shrink_layer", "cgpt_conv_padded_both_sides",
                     "cgpt_conv_cache_keeps_oldest_inputs"),
    "shrink_kernel": ("cgpt_conv_padded_both_sides", "cgpt_conv_cache_keeps_oldest_inputs",
                      "export_cache_conv_window_keeps_oldest"),
    "init_scheme": ("init_scheme_down_keeps_gpt2s_scaling", "init_scheme_shared_weights_at_their_last_layer"),
    "init_std": ("gpt2_init_std_fixed_at_0_02",),
}

DEFAULTS = dict(
    list=False,         # print the table (name, file, tests) and exit
    only="",            # comma list of mutant names; "" = all
    workers=2,          # pytest processes at a time
    timeout=900,        # seconds per pytest run; longer counts as an error
)


# --- the scratch copy --------------------------------------------------------------------------

def repository_files():
    """The files a scratch copy holds: tracked, and untracked but not ignored (as on disk)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise UserError(f"cannot list the repository's files with git ({e}) (fix: run it in a git checkout)")
    return [f for f in out.decode().split("\0") if f and os.path.isfile(os.path.join(ROOT, f))]


def scratch_copy(folder, files, mutant=None):
    """Copy `files` into folder/repo, with `mutant` applied; folder/shared points at the checkout's ../shared
    (the offline data conftest.py looks for beside the repository)."""
    repo = os.path.join(folder, "repo")
    for f in files:
        os.makedirs(os.path.dirname(os.path.join(repo, f)), exist_ok=True)
        shutil.copyfile(os.path.join(ROOT, f), os.path.join(repo, f))
    shared = os.path.join(os.path.dirname(ROOT), "shared")
    if os.path.isdir(shared):
        os.symlink(shared, os.path.join(folder, "shared"))
    if mutant is not None:
        path = os.path.join(repo, mutant.file)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(mutant.old, mutant.new, 1))
    return repo


def rotten(mutant):
    """Why the mutant cannot be applied (its old text is not in its file exactly once), or ''."""
    path = os.path.join(ROOT, mutant.file)
    if not os.path.isfile(path):
        return f"{mutant.file} does not exist"
    with open(path, encoding="utf-8") as f:
        n = f.read().count(mutant.old)
    return "" if n == 1 else f"its old text is found {n} times in {mutant.file} (must be once)"


# --- running the tests ---------------------------------------------------------------------------

def run_tests(files, tests, mutant, every, timeout):
    """The failing and passing tests of `tests` in a scratch copy with `mutant` applied (None: unmutated); without
    `every`, pytest stops at the first failure (-x)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mutation-") as folder:
        repo = scratch_copy(folder, files, mutant)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEp",
               *([] if every else ["-x"]), *shlex.split(tests)]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
        try:
            r = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return Result(0, 0, [], [], time.perf_counter() - t0, f"timed out after {timeout} s")
    lines = r.stdout.strip().splitlines() or [r.stderr.strip()]
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", r.stdout, re.M)
    passed = re.findall(r"^PASSED (\S+)", r.stdout, re.M)
    # 2: interrupted or a collection error, 3: internal error, 4: usage error, 5: no test selected
    error = f"pytest exit code {r.returncode}: {lines[-1]}" if r.returncode not in (0, 1) else ""
    return Result(len(failed), len(passed), failed, passed, time.perf_counter() - t0, error)


Result = namedtuple("Result", "n_failed n_passed failed passed seconds error")


def check(config):
    if config["workers"] < 1:
        raise UserError(f"--workers must be >= 1, got {config['workers']} (fix: --workers=2)")
    names = [n for n in config["only"].split(",") if n]
    unknown = [n for n in names if n not in {m.name for m in MUTANTS}]
    if unknown:
        raise UserError(f"unknown mutant(s) {', '.join(unknown)} (fix: see `python -m tests.mutation --list`)")
    bad = [(m, rotten(m)) for m in MUTANTS if rotten(m)]
    if config["list"]:
        for m in MUTANTS:
            print(f"{m.name:45s} {m.file:14s} {'every test of: ' if m.every else ''}{m.tests}"
                  + (f"   ROTTEN: {rotten(m)}" if rotten(m) else ""))
        return 1 if bad else 0
    if bad:
        for m, why in bad:
            print(f"rotten  {m.name}: {why}")
        print(f"{len(bad)} of {len(MUTANTS)} mutants no longer apply: update the table in tests/mutation.py")
        return 1
    chosen = [m for m in MUTANTS if not names or m.name in names]
    files = repository_files()
    timeout = config["timeout"]
    with ThreadPoolExecutor(config["workers"]) as pool:
        selections = sorted({m.tests for m in chosen})
        baseline = dict(zip(selections, pool.map(lambda s: run_tests(files, s, None, True, timeout), selections)))
        broken = {s: r for s, r in baseline.items() if r.n_failed or r.error or not r.n_passed}
        for tests, r in broken.items():
            print(f"error   without a mutant: {tests}: {r.error or ', '.join(r.failed) or 'no test ran'}")
        if broken:
            return 1
        missed = 0
        for m, r in zip(chosen, pool.map(lambda m: run_tests(files, m.tests, m, m.every, timeout), chosen)):
            n = baseline[m.tests].n_passed
            if r.error:
                caught, detail = False, r.error
            elif m.every:
                caught = r.n_failed == n
                detail = f"{r.n_failed} of {n} tests fail" + ("" if caught else f"; these pass: {' '.join(r.passed)}")
            else:
                caught = r.n_failed > 0
                detail = f"first failing: {r.failed[0]}" if caught else f"all {r.n_passed} tests pass"
            missed += not caught
            print(f"{'caught' if caught else 'missed':7s} {m.name:45s} {m.file:14s} {detail} ({r.seconds:.0f} s)",
                  flush=True)
    print(f"{len(chosen) - missed} of {len(chosen)} mutants caught")
    return 1 if missed else 0


def main(argv=None):
    code = run_command(check, DEFAULTS, argv)
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
