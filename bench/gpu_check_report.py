"""bench/gpu_check.py's report (issue 47): each step's figures in a line, and gpu_check.md
(the card, the date, the command, the tables, the rows for docs/performance.md). A plain
sibling of bench/gpu_check.py, imported from there."""
from __future__ import annotations

import json


def _fmt(v, spec=".1f", unit=""):
    return "n/a" if v is None else format(v, spec) + unit


def _params(x: dict) -> str:
    return f"{x['params_b']:.2f}B" if x["params_b"] >= 0.1 else f"{x['params_b'] * 1e3:.2f}M"


def figures(name: str, r: dict) -> str:
    """One cell: a step's figures in a line."""
    if not r:
        return ""
    if name == "tests":
        return r.get("summary", "")
    if name == "matmul":
        return f"{r['n']}^3 bf16: {r['tflops']:.1f} TFLOP/s (median of {r['reps']})"
    if name in ("ppo_update", "deepspeed"):
        parts = [f"{x['model']}, {x['backend']} ({_params(x)}{', grad ckpt' if x['gradient_checkpointing'] else ''}): "
                 f"{x['tokens_per_s']:.0f} tok/s, {x['step_s']:.2f} s/step, MFU "
                 f"{_fmt(x['mfu_measured_peak'] and 100 * x['mfu_measured_peak'], unit='%')} of the "
                 f"measured peak, peak memory {_fmt(x['peak_mem_gib'], unit=' GiB')}"
                 for x in r["rows"]]
        return "; ".join(parts + r.get("errors", []))
    if name == "generate":
        return ", ".join(f"batch {x['batch']}: {x['tokens_per_s']:.0f} tok/s" for x in r["rows"])
    if name == "behaviour_gap":
        return "; ".join(f"engine {x['engine']} vs trainer {x['trainer']}: mean |gap| "
                         f"{x['mean_abs']:.4f}, max {x['max_abs']:.4f} nats/token" for x in r["rows"])
    if name == "iteration":
        if "not_run" in r:
            return r["not_run"]
        return (f"{r['preset']}: iteration {r['iteration_s']:.1f} s ("
                + ", ".join(f"{k} {v:.1f}" for k, v in r["stages_s"].items() if v >= 0.05)
                + f"), mars train wall {r['wall_s']:.1f} s")
    return json.dumps(r)[:300]


def markdown(report: dict) -> str:
    lines = [f"# GPU check: {report['card']}", "",
             f"- date: {report['date']}", f"- command: `{report['command']}`",
             f"- device: {report['device']}; torch {report['torch']}, transformers "
             f"{report['transformers']}, Python {report['python']}"
             + ("; **tiny shapes (a dry run: figures mean nothing)**" if report["tiny"] else ""),
             f"- packages: carried {', '.join(report['packages']['carried']) or 'none'}; "
             f"placeholders {', '.join(report['packages']['placeholders']) or 'none'}"
             + (f"; hidden {', '.join(report['hidden'])}" if report["hidden"] else ""), "",
             "| step | status | s | figures |", "|---|---|---|---|"]
    for s in report["steps"]:
        cell = figures(s["name"], s.get("results") or {}) if s["status"] == "ok" else s["reason"]
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']:.1f} | {cell.replace('|', '/')} |")
    ppo_rows = [x for s in report["steps"] if s["name"] in ("ppo_update", "deepspeed")
                and s["status"] == "ok" for x in s["results"]["rows"]]
    if ppo_rows:
        lines += ["", "PPO update (`ppo_update`; torch backend: fp32 master weights, AdamW, bf16 "
                  "autocast; DeepSpeed: ZeRO-2, bf16; random weights; kl_coef 0 unless said):", "",
                  "| model | backend | params | tokens/step | s/step | tokens/s | TFLOP/s | MFU (measured peak) "
                  "| MFU (datasheet) | peak memory GiB |", "|---|---|---|---|---|---|---|---|---|---|"]
        for x in ppo_rows:
            lines.append(f"| {x['model']}{' (grad ckpt)' if x['gradient_checkpointing'] else ''} | "
                         f"{x['backend']} | "
                         f"{_params(x)} | {x['tokens_per_step']} | {x['step_s']:.3f} | "
                         f"{x['tokens_per_s']:.0f} | {x['tflops']:.1f} | "
                         f"{_fmt(x['mfu_measured_peak'] and 100 * x['mfu_measured_peak'], unit='%')} | "
                         f"{_fmt(x['mfu_datasheet'] and 100 * x['mfu_datasheet'], unit='%')} | "
                         f"{_fmt(x['peak_mem_gib'])} |")
    gen = next((s for s in report["steps"] if s["name"] == "generate" and s["status"] == "ok"), None)
    if gen:
        lines += ["", f"Generation ({gen['results']['model']}, {gen['results']['precision']}):", "",
                  "| batch | prompt | new tokens | tokens/s |", "|---|---|---|---|"]
        lines += [f"| {x['batch']} | {x['prompt']} | {x['new_tokens']} | {x['tokens_per_s']:.0f} |"
                  for x in gen["results"]["rows"]]
    gap = next((s for s in report["steps"] if s["name"] == "behaviour_gap" and s["status"] == "ok"), None)
    if gap:
        lines += ["", f"Behaviour gap, log pi_trainer - log pi_engine per sampled token "
                  f"({gap['results']['model']}; {gap['results']['sampling']}):", "",
                  "| engine | trainer | tokens | mean abs | max abs | mean | mean w | capped |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {x['engine']} | {x['trainer']} | {x['tokens']} | {x['mean_abs']:.4f} "
                  f"| {x['max_abs']:.4f} | {x['mean']:.4f} | {x['weight_mean']:.4f} | {x['capped']:.2%} |"
                  for x in gap["results"]["rows"]]
    what = {"tests": "CUDA tests (`pytest -m gpu tests/gpu`)",
            "matmul": "bf16 matrix-product peak (random data, median)",
            "ppo_update": "PPO update, random weights (`ppo_update`, torch backend)",
            "generate": "in-process engine generation (fp32 weights, bf16 autocast)",
            "behaviour_gap": "behaviour gap, engine vs trainer log-probs (random weights)",
            "iteration": "one iteration of a learning preset (`mars train`)",
            "deepspeed": "PPO update through DeepSpeed ZeRO-2 (one rank)"}
    machine = f"{report['card']}, {report['date'][:10]}"
    rows = [f"| {what[s['name']]} | {figures(s['name'], s['results']).replace('|', '/')} | "
            f"`{report['command']}` | {machine} |"
            for s in report["steps"] if s["status"] == "ok"]
    if rows:
        lines += ["", "Rows for docs/performance.md:", "", "| what | figure | command | machine |",
                  "|---|---|---|---|", *rows]
    return "\n".join(lines) + "\n"

