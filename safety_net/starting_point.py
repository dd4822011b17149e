"""
What a training run starts from:
    prepared_data      the dataset folder, prepared on first use (by rank 0; the others wait; never
                       over a --data_dir's own token files), its meta.json and its tokenizer_id
    StartingPoint      the checkpoint a run starts from (resume, another's weights), or None;
                       check_model, before the data is prepared: one line for model arguments a run
                       cannot start from (against the checkpoint and this model.py); check, after: the
                       tokenizer, memory and the token files; restore:
                       a resumed run's weights, optimizer, loss scaler and RNG states, or another
                       checkpoint's weights that fit
"""

import functools
import json
import math
import os
import re
import shlex

import torch

from safety_net.build import check_batch_memory, check_mlp_ratio_applies, check_model_keys_read, gpt_config_defaults
from safety_net.build import load_variant
from safety_net.build import model_config
from safety_net.checkpoint import (CKPT_NAME, LAST_NAME, load_checkpoint, load_init_checkpoint, load_matching_weights,
                                   load_optimizer_state, resolve_path)
from safety_net.configurator import UserError
from safety_net.dataset import (check_splits, default_data_dir, is_prepared, load_meta, read_segments, run_prepare,
                                tokenizer_id)
from safety_net.fileio import check_not_a_run_folder, check_out_dir, is_run_folder
from safety_net.runtime import on_rank_zero, restore_rng
from safety_net.text_dataset import foreign_token_files, tool_command
from safety_net.tokenizers import GPT2_VOCAB_SIZE, Vocabulary, gpt2_meta


# model keys a start from another checkpoint's weights may change without a note (StartingPoint.restore)
NOT_NOTED = ("dropout", "block_size", "init_std", "init_scheme", "residual_logit_init")
# training keys that decide a run's batches and updates: a resume with other values is noted (as nanoGPT, a
# resume takes them from the command line, not from the checkpoint); the dataset through its folder (data_dir, else
# data/<dataset>): its name alone is not compared, a data_dir's meta.json names it (a false note: a hunt)
RECIPE_KEYS = ("data_dir", "data_segments", "batch_size", "gradient_accumulation_steps", "learning_rate",
               "weight_decay", "beta1", "beta2", "grad_clip", "decay_lr", "warmup_iters", "lr_decay_iters", "min_lr",
               "seed")
# the schedule's, which train.py fills from max_iters when unset (fill_schedule): an extended run changes them
SCHEDULE_KEYS = ("warmup_iters", "lr_decay_iters", "min_lr")


def recipe_value(config, key):
    """A RECIPE_KEYS value as compared and noted: the dataset folder and the data_segments file as paths (data_dir
    "" means data/<dataset>)."""
    if key == "data_dir":
        return os.path.realpath(default_data_dir(config))
    if key == "data_segments" and config[key]:
        return os.path.realpath(config[key])
    return config[key]


def recipe_changed(run, config, key):
    """Whether a resume's config changes a RECIPE_KEYS value of its run's. A relative data_dir or data_segments the
    run recorded, which leads nowhere from here, was relative to the run's working directory, not this one: not
    compared (a note named a folder that does not exist: a hunt); a dataset of another tokenizer is refused anyway
    (check)."""
    if key in ("data_dir", "data_segments"):
        recorded = default_data_dir(run) if key == "data_dir" else run[key]
        if recorded and not os.path.isabs(recorded) and not os.path.exists(recorded):
            return False
    return recipe_value(run, key) != recipe_value(config, key)


def prepared_data(config, prepare, rank, world):
    """(the dataset folder, its meta.json, its tokenizer_id): data_dir, or data/<dataset>, prepared with prepare.py's
    `prepare` on first use (by rank 0; under DDP the other ranks wait for it). A folder that holds another
    program's token files without a complete dataset (foreign_token_files; an interrupted prepare's are ours) is
    refused, not prepared: the dataset's text would be written over them."""
    data_dir = default_data_dir(config)
    dataset = config["dataset"]
    # another program's files: none where a vocabulary file is (ours, damaged, is prepared again; a review)
    vocabulary = any(os.path.exists(os.path.join(data_dir, name)) for name in ("meta.json", "meta.pkl"))
    theirs = [] if vocabulary else foreign_token_files(data_dir)
    where = f"--data_dir {data_dir}" if config.get("data_dir") else data_dir
    if theirs and not {"train.bin", "val.bin"} <= set(theirs):   # a folder's own test.bin (a hunt)
        raise UserError(f"{where} holds {', '.join(theirs)} but no meta.json: preparing '{dataset}' there would "
                        f"remove them (fix: move them away, or another --data_dir)")
    if theirs:
        # what nanoGPT's GPT-2 folders (shakespeare, openwebtext) leave unsaid
        meta = json.dumps(dict(gpt2_meta(), dataset=os.path.basename(os.path.normpath(data_dir))))
        path = shlex.quote(os.path.join(data_dir, "meta.json"))
        raise UserError(f"{where} holds token files but no meta.json: preparing '{dataset}' there "
                        f"would write over them (fix: for nanoGPT's GPT-2 token files, its shakespeare or "
                        f"openwebtext, write their meta.json: echo '{meta}' > {path}; else prepare its text "
                        f"again: python prepare.py --input=TEXT_FILE --out_dir={data_dir} --force)")
    on_rank_zero(functools.partial(prepare_once, prepare, dataset, data_dir), rank, world)
    meta = load_meta(data_dir)
    # a meta.json whose vocabulary cannot be read back trained, and failed only at sampling (a hunt): its kind
    # and size, and a char vocabulary's characters (a BPE's tokens are read where they are needed)
    vocab = Vocabulary(meta, os.path.join(data_dir, "meta.json"))
    if vocab.is_char_level:
        vocab.chars()
    return data_dir, meta, tokenizer_id(meta)


def prepare_once(prepare, dataset, data_dir):
    if is_prepared(data_dir):
        return
    check_out_dir(data_dir, key="data_dir")   # as the user named it (prepare.py's own: --out_dir)
    check_not_a_run_folder(data_dir, "data_dir", f"--data_dir=data/{dataset}, a folder of its own")
    run_prepare(prepare, dataset, data_dir)


def check_prepared_again(ours, dataset, folder, path):
    """One line when a resume's own folder (removed since, or its prepare stopped halfway) would be prepared again
    with another dataset than its run's (ours): train.py prepares `dataset`, by name (an exploration as a new user:
    the default tinyshakespeare was written into the folder of a text, then refused)."""
    if not ours or ours == dataset:
        return
    raise UserError(f"resume: {folder} is not prepared, and {path} was trained on '{ours}' there, which this "
                    f"resume would not prepare (fix: prepare it again: {remake_command(ours, folder)})")


def remake_command(dataset, folder):
    """The command that prepares `dataset` into folder again: its tool's, compact_vocab's for a compact vocabulary
    (<name>_vK), else prepare.py's, which takes a text's name with the text (notes_gpt2: GPT-2 BPE)."""
    out = f"--out_dir={shlex.quote(folder)}"
    if tool_command(dataset):
        return f"{tool_command(dataset)} {out}"
    if re.fullmatch(r".+_v\d+", dataset):
        return f"python -m tools.pangu.compact_vocab {dataset} --input=TEXT_FILE {out}"
    return f"python prepare.py {dataset} {out}, with --input=TEXT_FILE for a text's"


def check_not_written_over(init_from, out_dir):
    """One line when init_from is out_dir's own last.pt or ckpt.pt (or a link to one, or out_dir itself): the run
    would write over the checkpoint it starts from at its first save."""
    if os.path.isdir(init_from) and is_run_folder(init_from):
        init_from = resolve_path(init_from)   # the file a run's folder means: its ckpt.pt, else last.pt
    target = os.path.realpath(init_from)
    if os.path.basename(target) not in (LAST_NAME, CKPT_NAME) or not os.path.isdir(out_dir):
        return
    if os.path.isfile(target) and os.path.samefile(os.path.dirname(target), out_dir):
        link = f" (a link to {target})" if target != os.path.abspath(init_from) else ""
        raise UserError(f"--init_from={init_from}{link} is in --out_dir={out_dir}, where this run saves its own "
                        f"{LAST_NAME} and {CKPT_NAME}: it would write over the checkpoint it starts from (fix: "
                        f"--out_dir=NEW_DIR, a folder of its own)")


def check_gpt2_ids(ckpt, meta, config, vocab_size):
    """One line when a checkpoint of GPT-2's vocabulary that records no tokenizer (a Hugging Face GPT-2 imported,
    nanoGPT's gpt2 runs) would start from data of another tokenizer with its token embedding: it reads GPT-2 BPE
    ids, and a char or compact dataset's ids mean other tokens (trained without a word). --allow_partial_init with
    the data's vocab_size trains the embedding afresh."""
    if ckpt is None or ckpt.get("tokenizer_id"):
        return
    rows, kind = ckpt["model_args"].get("vocab_size", 0), Vocabulary(meta).kind
    if rows < GPT2_VOCAB_SIZE or kind == "gpt2" or (config["allow_partial_init"] and vocab_size != rows):
        return
    raise UserError(f"{ckpt['path']} has GPT-2's vocabulary ({rows} tokens) and reads GPT-2 BPE ids, but "
                    f"{default_data_dir(config)} is tokenized with the {kind} tokenizer: its ids mean other tokens "
                    f"(fix: --dataset=shakespeare and no --data_dir, tinyshakespeare in GPT-2 BPE, or your text "
                    f"prepared with python prepare.py --input=TEXT_FILE --tokenizer=gpt2; or --allow_partial_init=True "
                    f"without --vocab_size, to train the token embedding afresh)")


class StartingPoint:
    """The checkpoint train.py starts from (init_from), its checks and its state: constructing it loads the
    checkpoint (`ckpt`, None for init_from=scratch); check_model(args, explicit) and check(args, meta) refuse in one
    line what cannot start, before and after the data is prepared; restore(...) puts its state into the model
    train.py built."""

    def __init__(self, config, device, master=True):
        """init_from=resume: out_dir's last.pt, else ckpt.pt, refused in one line when there is none, when it holds
        weights only (no optimizer) or no iter_num or best_val_loss (restore says what it resumes, after every check).
        init_from=<path>: that checkpoint, ours or nanoGPT's, or a Hugging Face model imported
        (load_init_checkpoint; master: say what it imports); its weights checked by load_checkpoint."""
        self.config = config
        self.master = master
        self.ckpt = None
        init_from = config["init_from"]
        if init_from == "resume":
            self.ckpt = self.resumed(config["out_dir"], device)
        elif init_from != "scratch":
            check_not_written_over(init_from, config["out_dir"])
            self.ckpt = load_init_checkpoint(init_from, device, master)   # (its model_args checked: model_config)

    @staticmethod
    def resumed(out_dir, device):
        if not any(os.path.isfile(os.path.join(out_dir, n)) for n in (LAST_NAME, CKPT_NAME)):
            raise UserError(f"nothing to resume: no {LAST_NAME} or {CKPT_NAME} in '{out_dir}' (fix: pass the "
                            f"out_dir of an earlier run, or start one with --init_from=scratch)")
        try:
            ckpt = load_checkpoint(out_dir, device, prefer=(LAST_NAME, CKPT_NAME))
        except UserError as e:   # last.pt damaged: its fix, re-running, would fail again; ckpt.pt may be whole
            ckpt_pt = os.path.join(out_dir, CKPT_NAME)
            damaged = str(e).startswith(f"cannot read checkpoint '{os.path.join(out_dir, LAST_NAME)}'")
            if not damaged or not os.path.isfile(ckpt_pt):
                raise
            problem = str(e).rsplit(" (fix: ", 1)[0]
            raise UserError(f"{problem} (fix: move it away, and --init_from=resume resumes from {ckpt_pt}, "
                            f"an earlier evaluation, or --init_from=scratch)") from None
        new_run = f"--init_from={ckpt['path']} --out_dir=NEW_DIR"   # this out_dir's run would write over it
        if ckpt.get("format") == "nanogpt":   # it was called "weights only", which it is not (a hunt)
            raise UserError(f"{ckpt['path']} is nanoGPT's: its optimizer state names nanoGPT's parameters, so it "
                            f"cannot be resumed here (fix: {new_run} to start a new run from its weights, at "
                            f"iteration 0)")
        if ckpt.get("optimizer") is None:
            raise UserError(f"{ckpt['path']} has weights only (e.g. from pangu.inherit), nothing to resume "
                            f"(fix: {new_run} to start a new run from it)")
        missing = [k for k in ("iter_num", "best_val_loss") if k not in ckpt]   # (their types: damaged_fields)
        if missing:
            raise UserError(f"{ckpt['path']} has no {' or '.join(missing)}, so it cannot be resumed (fix: "
                            f"{new_run} to start a new run from its weights)")
        if math.isnan(ckpt["best_val_loss"]):   # none recorded: no evaluation beat NaN, ckpt.pt never saved (a hunt)
            ckpt["best_val_loss"] = math.inf
        return ckpt

    def check_model(self, args, explicit):
        """One line, before the data is prepared, for model arguments (args, as train.py built them, but for the
        data's vocab_size; explicit: the keys the user set) that cannot start: a resume whose max_iters is below
        its checkpoint's iteration (it would train nothing and rewrite last.pt), or whose model arguments differ
        from its checkpoint's in anything but dropout; an mlp_ratio an mlp_hidden makes void
        (check_mlp_ratio_applies); arguments this model.py cannot build (model_config); a data_segments file that
        is not a window-start array (read_segments); a resume on a dataset folder not prepared that is not its
        run's (check_resume_data)."""
        config, ckpt = self.config, self.ckpt
        base = dict(gpt_config_defaults(), **(ckpt["model_args"] if ckpt else {}))
        base.update(load_variant(config["variant"]) if config["variant"] else {})
        check_mlp_ratio_applies(base, {k: args[k] for k in explicit & {"mlp_ratio", "mlp_hidden"}})
        check_model_keys_read(args, {k: args[k] for k in explicit if k in args})
        # another checkpoint's weights: every tensor is copied unless allow_partial_init, so the keys that draw
        # the starting weights draw none (accepted, and recorded as if they had; a hunt)
        defaults = gpt_config_defaults()
        init_keys = explicit & {"init_std", "init_scheme", "residual_logit_init"}
        drawn = sorted(k for k in init_keys if args[k] != defaults[k])
        if drawn and config["init_from"] not in ("scratch", "resume") and not config["allow_partial_init"]:
            raise UserError(f"--{drawn[0]} draws a run's starting weights, and --init_from={config['init_from']} "
                            f"copies every one of them (fix: drop --{drawn[0]}, or --allow_partial_init=True to "
                            f"draw the tensors that do not fit)")
        if config["init_from"] == "resume":
            if config["max_iters"] < ckpt["iter_num"] and not config["eval_only"]:
                raise UserError(f"resume: max_iters={config['max_iters']} is below iteration {ckpt['iter_num']}, "
                                f"where {ckpt['path']} is (fix: --max_iters above {ckpt['iter_num']} to train on, "
                                f"or --eval_only=True to evaluate it)")
            saved = ckpt["model_args"]
            preset = load_variant(config["variant"]) if config["variant"] else {}
            for key in sorted(k for k in args if k != "dropout" and args[k] != saved.get(k)):
                if key in preset and preset[key] == args[key]:   # the value --variant set (train.py)
                    # the variant came from --variant or a config file: --variant= last on the line undoes both
                    raise UserError(f"resume: {key}={args[key]!r} (from variant={config['variant']!r}) differs from "
                                    f"the checkpoint's {key}={saved.get(key)!r} (fix: --variant= last on the command "
                                    f"line: a resume builds the model its checkpoint holds)")
                raise UserError(f"resume: {key}={args[key]!r} differs from the checkpoint's {key}="
                                f"{saved.get(key)!r} (fix: drop that override, or start a new run from its "
                                f"weights: --init_from={ckpt['path']} --out_dir=NEW_DIR --allow_partial_init=True)")
            self.check_resume_data()
        # the data's vocab_size is not known yet: 1 (its memory: check, once it is), unless
        # the value here is one GPTConfig refuses
        low = model_config(dict(args, vocab_size=min(args["vocab_size"], 1)))
        # a micro-batch that cannot fit even so: refused before the data is prepared (it was after; a hunt)
        check_batch_memory(low, config["batch_size"], config["device"], training=not config["eval_only"],
                           eval_iters=config["eval_iters"], dtype=config["dtype"])
        if config["data_segments"]:   # readable, the right kind of array (against the data: check)
            read_segments(config["data_segments"])

    def check_resume_data(self):
        """One line when a resume names a dataset folder that is not prepared and is not its run's (data_dir, else
        data/<dataset>): train.py prepared it, writing it to disk, and then refused its tokenizer (an exploration as
        a new user). The run's own folder, removed since, is prepared again as on first use, if it can be with its run's
        dataset (check_prepared_again)."""
        run = self.ckpt.get("config") or {}
        folder = default_data_dir(self.config)
        if is_prepared(folder) or "data_dir" not in run:
            return
        if not recipe_changed(run, self.config, "data_dir"):
            check_prepared_again(run.get("dataset"), self.config["dataset"], folder, self.ckpt["path"])
            return
        raise UserError(f"resume: {folder} is not prepared, and {self.ckpt['path']} was trained on "
                        f"{default_data_dir(run)}: a resume continues on its run's dataset (fix: --data_dir="
                        f"{default_data_dir(run)}; another dataset must be prepared first, with the run's "
                        f"tokenizer)")

    def note_other_recipe(self):
        """A note when a resume trains with other values of RECIPE_KEYS than its run did: a resume without the
        run's config file takes the defaults, and no longer repeats the run's batches and losses. Rank 0's,
        and none for eval_only (it trains nothing)."""
        if self.config["eval_only"] or not self.master:
            return
        run = self.ckpt.get("config") or {}
        changed = [k for k in RECIPE_KEYS if k in run and recipe_changed(run, self.config, k)]
        if not changed:
            return
        fixes = ["to continue it exactly, give the run's config file and keys again"]
        schedule = [k for k in changed if k in SCHEDULE_KEYS]
        if schedule:   # e.g. extended: lr_decay_iters was filled from its max_iters
            fixes.append("to keep its schedule: " + " ".join(f"--{k}={run[k]}" for k in schedule))
        listed = ", ".join(f"{k} {recipe_value(run, k)!r} -> {recipe_value(self.config, k)!r}" for k in changed)
        print(f"note: resuming with other settings than the run's: {listed} ({'; '.join(fixes)})", flush=True)

    def check(self, args, meta):
        """One line, before anything is built, for what train.py cannot start from once the data is known: a
        checkpoint of another tokenizer; a vocab_size under the data's; arguments whose model this model.py
        cannot build (model_config) or whose micro-batch cannot fit this machine's memory (check_batch_memory);
        token files that do not fit the model, or data_segments that do not fit them (check_splits).
        (Non-finite weights: load_checkpoint.)"""
        config, ckpt = self.config, self.ckpt
        # first: another tokenizer's data also shows up as a vocab_size mismatch below
        if ckpt is not None and ckpt.get("tokenizer_id") not in (None, tokenizer_id(meta)):   # older: none
            why = f"its dataset: {ckpt.get('dataset') or 'the one it was exported with'}"
            if ckpt.get("dataset") == config["dataset"]:
                why = "the same dataset, prepared again since from another text or with another tokenizer"
            raise UserError(f"{ckpt['path']} was trained with another tokenizer than {config['data_dir']}'s ({why}) "
                            f"(fix: --dataset/--data_dir of that run, as it was prepared then, or "
                            f"--init_from=scratch)")
        check_gpt2_ids(ckpt, meta, config, args["vocab_size"])
        if args["vocab_size"] < meta["vocab_size"]:
            raise UserError(f"vocab_size {args['vocab_size']} is smaller than the dataset's {meta['vocab_size']} "
                            f"tokens (fix: drop --vocab_size, it is read from meta.json)")
        gpt_config = model_config(args)   # what GPTConfig refuses, as one line
        check_batch_memory(gpt_config, config["batch_size"], config["device"], training=not config["eval_only"],
                           eval_iters=config["eval_iters"], dtype=config["dtype"])
        check_splits(config["data_dir"], args["vocab_size"], args["block_size"], config["data_segments"])

    def restore(self, model, optimizer, scaler, rank, world):
        """A resumed run (init_from=resume): the weights, optimizer, fp16 loss scaler and this rank's RNG states
        as last.pt saved them (a rank with none, after a change of the number of ranks, keeps the stream
        train.py seeded). Another checkpoint (init_from=<path>): its weights whose names and shapes fit, and a
        line saying how many. Scratch: nothing."""
        config, ckpt = self.config, self.ckpt
        if ckpt is None:
            return
        if config["init_from"] != "resume":
            allow_partial = config["allow_partial_init"]
            copied, total = load_matching_weights(model, ckpt["model"], ckpt["path"], allow_partial)
            # every tensor fits, yet a key (n_head, norm_eps, rope_base, ...) makes them compute another function;
            # not: dropout, block_size (no shape of RoPE's), the init keys (every weight is copied)
            changed = [f"{key} {value!r} -> {getattr(model.config, key)!r}"
                       for key, value in sorted(ckpt["model_args"].items())
                       if key not in NOT_NOTED and getattr(model.config, key, value) != value]
            if rank == 0:
                print(f"initialized {copied}/{total} tensors from {ckpt['path']}", flush=True)
                if changed and copied == total:
                    print(f"note: every tensor fits, but this model differs from {ckpt['path']}'s in "
                          f"{', '.join(changed)}: the same weights compute another function here", flush=True)
            return
        if rank == 0:   # after every check: a refused resume's error line came after these (an exploration)
            print(f"resuming from {ckpt['path']} at iteration {ckpt['iter_num']}", flush=True)
            self.note_other_recipe()
        model.load_state_dict(ckpt["model"])   # they fit its model_args: load_checkpoint checked
        load_optimizer_state(optimizer, ckpt)
        if scaler.is_enabled() and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
        ranks = len(ckpt["rng_ranks"]) if ckpt.get("rng_ranks") else 1   # 1: a single process, or a stop at once
        if rank == 0 and ranks != world and config["dropout"] > 0:
            print(f"note: {ckpt['path']} holds the random state of {ranks} rank(s), this run has {world}: the same "
                  f"batches, but dropout draws other masks than an uninterrupted run would", flush=True)
        saved = ckpt.get("rng") if rank == 0 else None
        if ckpt.get("rng_ranks") and len(ckpt["rng_ranks"]) == world:
            saved = ckpt["rng_ranks"][rank]
        if saved is not None:
            restore_rng(saved, torch.device(config["device"]))
