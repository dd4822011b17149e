"""
Bench results as text and files: number formatting, the Markdown tables (paper 001's Tables 3-6 layout
among them) and the CSV / Markdown output of --out, for tools/bench.py.
"""

import csv

from safety_net.fileio import atomic_open


def short(v):
    """A number for a progress line: floats to 4 significant digits."""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def mb(v):
    """Bytes in MiB (2**20; the columns say so), for the tables."""
    if v is None:
        return "n/a"
    v = v / 2**20
    return f"{v:.1f}" if v >= 10 else f"{v:.3g}"


def num(v, spec):
    return "n/a" if v is None else format(v, spec)


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def ratio_vs(rows, ref_model, key, row, higher_is_better=False):
    """row[key] relative to ref_model's at the same seq and batch: > 1 means row is faster (ms) / larger."""
    ref = next((r.get(key) for r in rows if r["model"] == ref_model and r["seq"] == row["seq"]
                and r["batch"] == row["batch"]), None)
    value = row.get(key)
    if ref is None or value is None:
        return "n/a"
    return f"{(value / ref if higher_is_better else ref / value):.2f}x"


def render(cfg, entries, rows, samples, device, dtype):
    out = []
    m = cfg["measure"]
    first = entries[0]["name"]
    if "train" in m or "memory" in m:
        what = "forward + backward + AdamW step" if cfg["optimizer_step"] else "forward + backward (no optimizer step)"
        out.append(f"### Training: {what}, random tokens, median of {cfg['repeats']} after {cfg['warmup']} warm-up")
        body = []
        for r in rows:
            if "train_ms" not in r:
                body.append([r["model"], f"{r['params'] / 1e6:.2f}M", r["seq"], r["batch"], r.get("note", "n/a"), "", "", ""])
                continue
            body.append([r["model"], f"{r['params'] / 1e6:.2f}M", r["seq"], r["batch"], f"{r['train_ms']:.1f}",
                         f"{r['train_tok_s']:,.0f}", ratio_vs(rows, first, "train_ms", r),
                         mb(r.get("train_peak_bytes")) if "memory" in m else "-"])
        out.append(table(["model", "params", "seq", "batch", "ms/iter", "tokens/s", f"speed vs {first}",
                          "peak MiB"], body))
    if "infer" in m or "memory" in m:
        out.append(f"### Inference: batch {cfg['infer_batch']}, prefill into an empty KV cache, then "
                   f"{cfg['decode_steps']} single-token decode steps (median; at a seq up to "
                   f"{cfg['decode_steps']}, seq - 1 of them)")
        body = []
        for r in rows:
            if "prefill_ms" not in r:
                continue
            body.append([r["infer_model"], r["seq"], f"{r['prefill_ms']:.2f}", num(r.get("decode_ms"), ".2f"),
                         ratio_vs(rows, first, "decode_ms", r), mb(r["kv_bytes"]),
                         mb(r.get("infer_peak_bytes")) if "memory" in m else "-"])
        out.append(table(["model", "seq", "prefill ms", "decode ms/token", f"decode speed vs {first}",
                          "KV cache MiB", "peak MiB (prefill)"], body))
    sampled = [s for s in samples if "sample_tok_s_cache" in s]
    decoded = [s for s in samples if "decode_ms_token" in s]
    if sampled:
        out.append(f"### Sampling: {cfg['gen_tokens']} new tokens from one token, batch 1, "
                   f"temperature 1, with and without the KV cache")
        body = [[s["infer_model"], s["gen_tokens"], f"{s['sample_tok_s_cache']:.1f}", f"{s['sample_tok_s_plain']:.1f}",
                 f"{s['sample_tok_s_cache'] / s['sample_tok_s_plain']:.1f}x", mb(s["kv_block_bytes"])] for s in sampled]
        out.append(table(["model", "new tokens", "tokens/s (KV cache)", "tokens/s (no cache)", "speed-up",
                          "KV cache MiB (block_size)"], body))
    if decoded:
        out.append(f"### Decoding vs its linear layers alone: batch 1, median of {cfg['repeats']} alternating "
                   f"rounds after {cfg['warmup']} warm-up, {decoded[0]['clock']} (linears: one eager F.linear per "
                   f"weight matrix on a 1-token input, MKL's GEMV, not a bound; / linears: the median of each "
                   f"round's ratio to its own linears; GB/s: the weights' MB x tokens/s)")
        compiled = "compiled_ms_token" in decoded[0]
        body = [[s["infer_model"], s["decode_tokens"], f"{s['weights_mb']:.1f}", f"{s['linears_ms']:.3f}",
                 f"{s['decode_ms_token']:.3f}", f"{1000 / s['decode_ms_token']:.0f}",
                 f"{s['weights_mb'] / s['decode_ms_token']:.1f}", f"{s['decode_vs_linears']:.2f}x"]
                + ([f"{s['compiled_ms_token']:.3f}", f"{1000 / s['compiled_ms_token']:.0f}",
                    f"{s['weights_mb'] / s['compiled_ms_token']:.1f}", f"{s['compiled_vs_linears']:.2f}x"]
                   if compiled else [])
                for s in decoded]
        compiled_columns = ["compiled ms/token", "compiled tokens/s", "compiled GB/s", "compiled / linears"]
        out.append(table(["model", "tokens", "weights MB", "linears ms", "decode ms/token", "tokens/s", "GB/s",
                          "decode / linears"] + (compiled_columns if compiled else []), body))
    if cfg["mode"] == "paper001" and len(entries) >= 2:
        out += paper001_tables(entries[0]["name"], entries[1]["name"], rows, m)
    return "\n\n".join(out)


def paper001_tables(a, b, rows, m):
    """Paper 001 Tables 3-6 layout: per length, A and B for training and inference, % reduction of B vs A."""
    by = {(r["model"], r["seq"]): r for r in rows}
    seqs = sorted({r["seq"] for r in rows if (a, r["seq"]) in by and (b, r["seq"]) in by})

    def red(x, y):
        return "n/a" if x is None or y is None or x == 0 else f"{100 * (x - y) / x:.2f}"

    def block(title, train_key, infer_key, fmt):
        body = []
        for s in seqs:
            ra, rb = by[(a, s)], by[(b, s)]
            ta, tb, ia, ib = ra.get(train_key), rb.get(train_key), ra.get(infer_key), rb.get(infer_key)
            if ta is None and ia is None:
                continue
            body.append([s, fmt(ta), fmt(tb), red(ta, tb), fmt(ia), fmt(ib), red(ia, ib)])
        hdr = ["Length", f"Training {a}", f"Training {b}", "(% reduction)", f"Inference {a}", f"Inference {b}",
               "(% reduction)"]
        return f"### {title}\n" + table(hdr, body)

    out = []
    ms = lambda v: num(v, ".2f")
    if "train" in m or "infer" in m:
        out.append(block(f"Paper 001 Tables 3/4 layout: latency (ms) of {a} and {b} (training = forward + backward "
                         f"per step; inference = prefill forward)", "train_ms", "prefill_ms", ms))
    if "memory" in m:
        gb = lambda v: "n/a" if v is None else f"{v / 2**30:.4f}"
        out.append(block(f"Paper 001 Tables 5/6 layout: peak memory (GiB) of {a} and {b}",
                         "train_peak_bytes", "infer_peak_bytes", gb))
    return out


def write_csv(path, records):
    """One CSV row per record; the columns are every key that appears, in order of first appearance."""
    keys = []
    for r in records:
        keys += [k for k in r if k not in keys]
    with atomic_open(path, "w") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(records)


def write_out(path, text, rows, samples):
    """--out, written atomically like every other file here: a symbolic link named by --out is replaced by
    the file, its target left as it was."""
    if path.endswith(".csv"):
        write_csv(path, rows + [dict(s, seq="sample" if "sample_tok_s_cache" in s else "decode") for s in samples])
    else:
        with atomic_open(path, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":   # run as a command, it would do nothing
    raise SystemExit("error: tools.benchmarks.report is a library, not a command (fix: the commands are in docs/reference.md)")
