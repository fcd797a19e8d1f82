#!/usr/bin/env python3
"""Issue 29 item 6, the peer: the fixed-count replay of the agent trajectories on transformers 5.17
(Qwen3_5ForCausalLM in bf16, random weights of the model's config: the times do not depend on the
values) with flash-linear-attention's kernels for the Gated DeltaNet, clocked as `mk agent-replay`
clocks its steps.

Input: the replays' token ids and the model's config.json, written here by
  mk agent-trajectories --check experiments/agent/trajectories.json --ids replays.json --preset qwen3.5-27b
(`--preset tiny` for a smoke run: the same vocabulary, so the same ids).

Each step (as src/agent/replay.rs): the pending ids (the cold prompt, then the previous step's tool-result
turn) are prefilled, onto the session's cache (resident) or with the whole history from an empty cache
(--stateless); the first token is the argmax of the prefill's last logits; then emit - 1 decode steps,
and the last emitted token is fed too (mk's replay steps it into the session). Greedy; stop tokens do not
end a step (the fixed count). Clocks (CUDA synchronised, wall time): submit to first token (the prefill
and its argmax) and first token to last. One difference from mk's resident replay: mk re-runs the tokens
since its last 64-token checkpoint with each append (append anchoring: bit-identical to one pass), the
peer's cache takes only the new ids, so a row's `prefill_tokens` here is the new ids alone (resident) or
the whole history (stateless); `context` is the history before the step, `decode_context` after its
prefill (where its decode starts).

Output (--out, JSON): every step's row, each trajectory's totals, the environment (GPU, torch,
transformers, which GDN implementation ran), and, where --only / --max-steps cut the workload short, an
extrapolation of the whole replay from the measured rates (marked as such: a least-squares line of the
prefill's ms over the tokens it ran and of the decode's ms a token over the context).

Usage on the GPU machine (the wheels of flash-linear-attention, fla-core and einops carried in .whl):
  python3 scripts/peer_replay.py --replays replays.json --only t01 --max-steps 4 --out $OUT/peer.json
"""
import argparse
import importlib.util
import json
import platform
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--replays", required=True, help="mk agent-trajectories --ids output")
    p.add_argument("--only", default="", help="trajectory names, comma separated (all when empty)")
    p.add_argument("--max-steps", type=int, default=0, help="at most this many steps a trajectory (0: all)")
    p.add_argument("--stateless", action="store_true", help="re-prefill the whole history every step")
    p.add_argument("--device", default="cuda")
    p.add_argument("--seed", type=int, default=0, help="the random weights' seed")
    p.add_argument("--require-fla", action="store_true", help="refuse to run on the torch reference GDN")
    p.add_argument("--passes", type=int, default=1,
                   help="replay the chosen steps this many times; the last pass's clocks are the result and the "
                        "earlier passes' are kept as `cold_passes` (the first prefill of every new length pays "
                        "Triton's compile and autotune: a second pass measures the peer warmed up)")
    p.add_argument("--out", required=True)
    return p.parse_args()


def gdn_implementation():
    """Which chunked gated delta rule transformers resolved at import (its fallback order: hub kernels,
    the `fla` package, the torch reference), by the modules of the functions its wrapper closes over."""
    import transformers.models.qwen3_5.modeling_qwen3_5 as mq

    seen, todo, mods = set(), [mq.torch_chunk_gated_delta_rule], []
    while todo:
        f = todo.pop()
        if id(f) in seen or not callable(f):
            continue
        seen.add(id(f))
        mods.append(getattr(f, "__module__", "?"))
        for c in getattr(f, "__closure__", None) or ():
            try:
                todo.append(c.cell_contents)
            except ValueError:
                pass
        if hasattr(f, "__wrapped__"):
            todo.append(f.__wrapped__)
    return "fla" if any(m and m.startswith("fla") for m in mods) else "torch reference"


def build_model(config_json, device, seed):
    """The model of the config with seeded random weights in bf16 on `device`, attention as transformers
    defaults it (the peer as users run it; the oracle's goldens use eager)."""
    import torch

    from oracle_goldens import empty_model  # (this script's folder is on sys.path when run as a script)

    torch.manual_seed(seed)
    return empty_model(config_json, device, attn=None)


class Session:
    """One trajectory's state on the peer: the cache (resident) or the history (stateless)."""

    def __init__(self, model, device, stateless):
        self.model, self.device, self.stateless = model, device, stateless
        self.cache, self.history = None, []

    def _forward(self, ids, cache):
        import torch

        x = torch.tensor([ids], device=self.device)
        out = self.model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1], out.past_key_values

    def append(self, ids):
        """Prefills `ids` (resident) or the whole history with them (stateless); the last logits and the
        tokens the prefill ran."""
        self.history.extend(ids)
        if self.stateless:
            self.cache = None  # (the last step's cache freed before the new one is built)
            logits, self.cache = self._forward(self.history, None)
            return logits, len(self.history)
        logits, self.cache = self._forward(ids, self.cache)
        return logits, len(ids)

    def step(self, token):
        self.history.append(token)
        logits, self.cache = self._forward([token], self.cache)
        return logits


def sync(device):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def replay(model, device, traj, max_steps, stateless):
    """One trajectory's steps (rows) as mk's replay runs them."""
    s = Session(model, device, stateless)
    pending, rows = list(traj["prompt"]), []
    steps = traj["steps"][:max_steps] if max_steps else traj["steps"]
    for i, st in enumerate(steps):
        context = len(s.history)
        sync(device)
        t0 = time.perf_counter()
        logits, ran = s.append(pending)
        tok = int(logits.argmax())
        sync(device)
        t1 = time.perf_counter()
        for _ in range(st["emit"] - 1):
            tok = int(s.step(tok).argmax())
        s.step(tok)  # the last emitted token into the session: the next append follows it
        sync(device)
        t2 = time.perf_counter()
        rows.append({
            "trajectory": traj["name"], "step": i, "context": context, "decode_context": context + len(pending),
            "new_tokens": len(pending), "prefill_tokens": ran, "emit": st["emit"],
            "ttft_ms": (t1 - t0) * 1e3, "decode_ms": (t2 - t1) * 1e3,
        })
        print(f"{traj['name']} step {i}: context {context}, prefill {ran} tokens {rows[-1]['ttft_ms']:.1f} ms, "
              f"{st['emit']} tokens {rows[-1]['decode_ms']:.1f} ms", flush=True)
        pending = list(st["append"])
    return rows


def fit(xs, ys, what):
    """Least-squares line y = a + b x (flat, with a warning, with fewer than two distinct x)."""
    n = len(xs)
    if n == 0:
        return 0.0, 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    vx = sum((x - mx) ** 2 for x in xs)
    if vx == 0:
        print(f"warning: {what}: one distinct x measured, the line is flat", flush=True)
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / vx
    return my - b * mx, b


def extrapolate(rows, trajs, stateless):
    """The whole workload's seconds from the measured rates (an estimate): prefill ms = a + b tokens,
    decode ms a token = c + d context; summed over every step of every trajectory."""
    a, b = fit([r["prefill_tokens"] for r in rows], [r["ttft_ms"] for r in rows], "prefill ms over tokens")
    dec = [(r["decode_context"], r["decode_ms"] / r["emit"]) for r in rows if r["emit"] > 0]
    c, d = fit([x for x, _ in dec], [y for _, y in dec], "decode ms a token over the context")
    total_prefill = total_decode = 0.0
    for t in trajs:
        history, pending = 0, len(t["prompt"])
        for st in t["steps"]:
            ran = history + pending if stateless else pending
            total_prefill += a + b * ran
            history += pending
            total_decode += st["emit"] * (c + d * history)
            history += st["emit"]
            pending = len(st["append"])
    hi = max(r["decode_context"] for r in rows)
    return {
        "estimate": True,
        "how": "least-squares lines of the measured steps: prefill ms over the tokens it ran, decode ms a token over "
               "the context its decode starts at; straight lines, so beyond the measured contexts (here up to "
               f"{hi}) attention's growth is not captured",
        "measured_contexts_up_to": hi,
        "prefill_ms_line": [a, b], "decode_ms_per_token_line": [c, d],
        "prefill_s": total_prefill / 1e3, "decode_s": total_decode / 1e3,
        "total_s": (total_prefill + total_decode) / 1e3,
    }


def main():
    args = parse_args()
    try:
        data = json.load(open(args.replays))
        trajs = data["trajectories"]
        data["config"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"peer_replay: {args.replays} is not `mk agent-trajectories --ids` output ({e})")
    if not trajs:
        sys.exit(f"peer_replay: {args.replays} holds no trajectories")
    only = [n for n in args.only.split(",") if n]
    unknown = [n for n in only if n not in {t["name"] for t in trajs}]
    if unknown:
        sys.exit(f"peer_replay: no trajectory {', '.join(unknown)} in {args.replays}")
    chosen = [t for t in trajs if not only or t["name"] in only]
    fla = importlib.util.find_spec("fla") is not None
    import torch
    import transformers

    impl = gdn_implementation()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, fla importable: {fla}, "
          f"the chunked GDN: {impl}", flush=True)
    if args.require_fla and impl != "fla":
        sys.exit("peer_replay: --require-fla, but transformers resolved the torch reference GDN")
    t0 = time.perf_counter()
    model, config = build_model(data["config"], args.device, args.seed)
    sync(args.device)
    build_s = time.perf_counter() - t0
    print(f"model built in {build_s:.1f} s ({sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, "
          f"attention {config._attn_implementation})", flush=True)
    if args.passes < 1:
        sys.exit("peer_replay: --passes must be at least 1")
    rows, cold = [], []
    with torch.inference_mode():
        # warm-up: the first chosen trajectory's first step (its prompt's length: Triton's kernels compiled
        # and autotuned for it) and a decode, before any clock counts
        warm = {"name": "warmup", "prompt": chosen[0]["prompt"], "steps": [{"emit": 2, "append": []}]}
        replay(model, args.device, warm, 1, False)
        for p in range(args.passes):
            if rows:
                cold.append(rows)
            rows = []
            print(f"pass {p + 1} of {args.passes}", flush=True)
            for t in chosen:
                rows += replay(model, args.device, t, args.max_steps, args.stateless)
    per = {}
    for r in rows:
        p = per.setdefault(r["trajectory"], {"steps": 0, "emitted": 0, "prefill_tokens": 0, "ttft_s": 0.0, "decode_s": 0.0})
        p["steps"] += 1
        p["emitted"] += r["emit"]
        p["prefill_tokens"] += r["prefill_tokens"]
        p["ttft_s"] += r["ttft_ms"] / 1e3
        p["decode_s"] += r["decode_ms"] / 1e3
    complete = not args.max_steps and not only
    out = {
        "peer": "transformers + flash-linear-attention" if impl == "fla" else "transformers (torch reference GDN)",
        "residency": "stateless" if args.stateless else "resident",
        "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else platform.processor(),
        "torch": torch.__version__, "transformers": transformers.__version__, "gdn": impl,
        "attention": config._attn_implementation, "model_build_s": build_s,
        "command": " ".join(sys.argv), "complete": complete,
        "measured_s": sum(p["ttft_s"] + p["decode_s"] for p in per.values()),
        "trajectories": per, "steps": rows, "passes": args.passes,
        "cold_passes": [{"measured_s": sum((r["ttft_ms"] + r["decode_ms"]) / 1e3 for r in c), "steps": c} for c in cold],
        "whole_workload": None if complete or not rows else extrapolate(rows, trajs, args.stateless),
    }
    json.dump(out, open(args.out, "w"), indent=1)
    line = f"measured {out['measured_s']:.1f} s over {len(rows)} steps"
    if out["whole_workload"]:
        line += f"; the whole workload extrapolated (an estimate): {out['whole_workload']['total_s']:.1f} s"
    print(line)


if __name__ == "__main__":
    main()
