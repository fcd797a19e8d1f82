#!/usr/bin/env python3
"""Record oracle goldens: transformers' Qwen3_5ForCausalLM on a (synthetic or real) checkpoint.

The oracle is transformers 5.17 as installed on the GPU machine (torch 2.11, cu130). The checkpoint's
fp8 weights are dequantised to bf16 up front (W = bf16(fp8 * weight_scale_inv), seed article 4.1/8.1),
attention is the eager implementation (explicit rounding points: softmax in fp32, probabilities
rounded to bf16), and the model runs in bf16.

For each prompt (random token ids, deterministic from --seed) it records two paths:
  prompt: one forward over the whole prompt (chunked Gated DeltaNet, causal_conv1d_fn)
  decode: token by token with the cache (recurrent Gated DeltaNet, causal_conv1d_update)
and for each path: the top-32 logits and ids at every position, the full logits at three positions,
and the final conv state, recurrent state and KV cache. It also measures how much the two paths
disagree (top-1 agreement, largest logit difference over the decode path's top-32 ids): the
oracle's own noise, from which every later tolerance is derived.

Output: one safetensors file per prompt plus summary.json in --out.

Usage (on the GPU machine):
  python3 scripts/oracle_goldens.py --checkpoint /tmp/tiny --out goldens/tiny --device cuda
"""
import argparse
import json
import os
import platform
import time

import torch
from safetensors import safe_open
from safetensors.torch import save_file

import transformers
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

TOPK = 32


def empty_model(cfg_json, device, attn="eager"):
    """Qwen3_5ForCausalLM of a config.json's text config in bf16 on `device`, its weights as initialised
    (scripts/peer_replay.py times such a model; load_model loads a checkpoint into it)."""
    text = cfg_json.get("text_config", cfg_json)
    config = Qwen3_5TextConfig(**text)
    if attn is not None:
        config._attn_implementation = attn
    config.dtype = torch.bfloat16
    # Build as from_pretrained(dtype=bfloat16) does: parameters in bf16 through the default dtype,
    # while buffers created with an explicit float dtype (RoPE's inv_freq) stay fp32. A blanket
    # model.to(bfloat16) would round inv_freq to bf16 and change every RoPE angle.
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = Qwen3_5ForCausalLM(config)
    finally:
        torch.set_default_dtype(prev)
    model.eval()
    inv = model.model.rotary_emb.inv_freq
    if inv.dtype != torch.float32:
        raise SystemExit(f"RoPE inv_freq is {inv.dtype}, expected float32")
    return model, config


def load_model(ckpt, device):
    cfg_json = json.load(open(os.path.join(ckpt, "config.json")))
    prefix = "model.language_model." if "text_config" in cfg_json else "model."
    model, config = empty_model(cfg_json, device)
    index_path = os.path.join(ckpt, "model.safetensors.index.json")
    if os.path.exists(index_path):
        files = sorted(set(json.load(open(index_path))["weight_map"].values()))
    else:
        files = sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors"))
    raw = {}
    for f in files:
        with safe_open(os.path.join(ckpt, f), framework="pt") as st:
            for k in st.keys():
                if k.startswith("mtp.") or k.startswith("model.visual."):
                    continue
                raw[k] = st.get_tensor(k)
    state = {}
    for k, v in raw.items():
        if k.endswith("weight_scale_inv"):
            continue
        if v.dtype == torch.float8_e4m3fn:
            s = raw[k + "_scale_inv"].float()
            s = s.repeat_interleave(128, 0)[: v.shape[0]].repeat_interleave(128, 1)[:, : v.shape[1]]
            v = (v.float() * s).to(torch.bfloat16)
        name = "model." + k[len(prefix):] if k.startswith(prefix) else k
        state[name] = v.to(torch.bfloat16) if v.dtype != torch.bfloat16 else v
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing {missing[:5]} unexpected {unexpected[:5]}")
    return model, config


def cache_states(cache, config, seq_len):
    out = {}
    gi = ai = 0
    for i, kind in enumerate(config.layer_types):
        layer = cache.layers[i]
        if kind == "linear_attention":
            conv = layer.conv_states[0][0]  # [conv_dim, kernel]
            out[f"conv.{gi}"] = conv[:, -(config.linear_conv_kernel_dim - 1):].contiguous().to(torch.bfloat16)
            out[f"recurrent.{gi}"] = layer.recurrent_states[0][0].float().contiguous()  # [Hv, K, V]
            gi += 1
        else:
            out[f"k.{ai}"] = layer.keys[0].contiguous().to(torch.bfloat16)  # [kv_heads, T, 256]
            out[f"v.{ai}"] = layer.values[0].contiguous().to(torch.bfloat16)
            ai += 1
    return out


def record(logits, full_pos):
    """logits: [T, V] bf16. Returns the path's tensors (top-k by value; ties by lowest id)."""
    lf = logits.float()
    vals, ids = torch.topk(lf, TOPK, dim=-1, sorted=True)
    return {
        "top_ids": ids.to(torch.int32).contiguous(),
        "top_logits": vals.contiguous(),
        "argmax": torch.argmax(lf, dim=-1).to(torch.int32),  # first maximal index = lowest id
        "full_logits": logits[full_pos].contiguous(),
    }


@torch.no_grad()
def run_prompt(model, config, ids, device):
    T = len(ids)
    x = torch.tensor([ids], device=device)
    full_pos = torch.tensor([0, T // 2, T - 1], device=device)
    # prompt path
    out = model(input_ids=x, use_cache=True, logits_to_keep=0)
    lp = out.logits[0]
    res = {f"prompt.{k}": v for k, v in record(lp, full_pos).items()}
    res.update({f"prompt.{k}": v for k, v in cache_states(out.past_key_values, config, T).items()})
    # decode path, teacher-forced
    cache = None
    rows = []
    for t in range(T):
        o = model(input_ids=x[:, t : t + 1], past_key_values=cache, use_cache=True)
        cache = o.past_key_values
        rows.append(o.logits[0, -1])
    ld = torch.stack(rows)
    res.update({f"decode.{k}": v for k, v in record(ld, full_pos).items()})
    res.update({f"decode.{k}": v for k, v in cache_states(cache, config, T).items()})
    # the oracle's own noise: prompt vs decode logits at the decode path's top-32 ids
    dtop = res["decode.top_ids"].long()
    diff = (lp.float().gather(1, dtop) - ld.float().gather(1, dtop)).abs().max(dim=1).values
    res["self.max_abs_diff"] = diff.contiguous()
    res["self.top1_agree"] = (res["prompt.argmax"] == res["decode.argmax"]).to(torch.int32)
    top2 = torch.topk(ld.float(), 2, dim=-1).values
    res["decode.margin"] = (top2[:, 0] - top2[:, 1]).contiguous()
    res["ids"] = torch.tensor(ids, dtype=torch.int32)
    res["full_positions"] = full_pos.to(torch.int32).cpu()
    return {k: v.cpu() for k, v in res.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--lengths", default="50,120,250,400")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--git-sha", default="unknown")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    model, config = load_model(a.checkpoint, a.device)
    gen = torch.Generator().manual_seed(a.seed)
    synth = {}
    sp = os.path.join(a.checkpoint, "synthetic.json")
    if os.path.exists(sp):
        synth = json.load(open(sp))
    meta = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if a.device == "cuda" else platform.processor() or "cpu",
        "attn_implementation": "eager",
        "weights": "fp8 dequantised to bf16 up front",
        "checkpoint": json.dumps(synth),
        "git_sha": a.git_sha,
        "command": "python3 scripts/oracle_goldens.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items()),
    }
    summary = {"meta": meta, "prompts": []}
    for i, L in enumerate(int(x) for x in a.lengths.split(",")):
        # real-text token ids only (below the 248,044 special/added ids)
        ids = torch.randint(0, 248044, (L,), generator=gen).tolist()
        res = run_prompt(model, config, ids, a.device)
        save_file(res, os.path.join(a.out, f"prompt{i}.safetensors"), metadata=meta)
        agree = res["self.top1_agree"].float().mean().item()
        d = res["self.max_abs_diff"]
        summary["prompts"].append({
            "file": f"prompt{i}.safetensors", "length": L,
            "self_top1_agreement": agree, "self_max_abs_diff": d.max().item(),
            "self_mean_abs_diff": d.mean().item(),
            "decode_margin_median": res["decode.margin"].median().item(),
        })
        print(json.dumps(summary["prompts"][-1]), flush=True)
    summary["seconds"] = time.time() - t0
    json.dump(summary, open(os.path.join(a.out, "summary.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
