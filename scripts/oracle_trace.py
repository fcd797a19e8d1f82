#!/usr/bin/env python3
"""Debug aid: the oracle's decode path for one prompt with every op's output captured (forward hooks),
to find which op of the CPU reference departs from the oracle. Also reports the precision of the
GPU's RoPE angle computation. Usage: oracle_trace.py --checkpoint DIR --out FILE --device cuda"""
import argparse, sys, os, torch
sys.path.insert(0, os.path.dirname(__file__))
from oracle_goldens import load_model
from safetensors.torch import save_file

ap = argparse.ArgumentParser()
ap.add_argument("--checkpoint", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--device", default="cuda")
ap.add_argument("--tokens", type=int, default=50)
a = ap.parse_args()
model, config = load_model(a.checkpoint, a.device)
print("allow_tf32 matmul", torch.backends.cuda.matmul.allow_tf32, "cudnn", torch.backends.cudnn.allow_tf32,
      "float32_matmul_precision", torch.get_float32_matmul_precision())
gen = torch.Generator().manual_seed(1234)
ids = torch.randint(0, 248044, (a.tokens,), generator=gen).tolist()  # = prompt0 of the goldens
caps = {}
def hook(name):
    def f(mod, inp, out):
        o = out[0] if isinstance(out, tuple) else out
        caps.setdefault(name, []).append(o.detach().float().reshape(-1).cpu())
    return f
for i, l in enumerate(model.model.layers):
    l.register_forward_hook(hook(f"layer{i}"))
    l.input_layernorm.register_forward_hook(hook(f"l{i}.innorm"))
    l.mlp.register_forward_hook(hook(f"l{i}.mlp"))
    if hasattr(l, "linear_attn"):
        la = l.linear_attn
        for n in ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "norm", "out_proj"]:
            getattr(la, n).register_forward_hook(hook(f"l{i}.{n}"))
    else:
        sa = l.self_attn
        for n in ["q_proj", "k_proj", "v_proj", "q_norm", "k_norm", "o_proj"]:
            getattr(sa, n).register_forward_hook(hook(f"l{i}.{n}"))
# Capture the inputs and outputs of the functions the layers call (module globals), per call.
import transformers.models.qwen3_5.modeling_qwen3_5 as M
calls = {"conv": 0, "rec": 0, "attn": 0}
def put(name, x):
    caps.setdefault(name, []).append(x.detach().float().reshape(-1).cpu().clone())
orig_conv = M.causal_conv1d_update
def conv_wrap(hidden_states, conv_state, weight, bias=None, activation=None):
    put("conv.in", hidden_states); put("conv.state_in", conv_state)
    out = orig_conv(hidden_states, conv_state, weight, bias, activation)
    put("conv.out", out)
    return out
M.causal_conv1d_update = conv_wrap
orig_rec = M.torch_recurrent_gated_delta_rule
def rec_wrap(query, key, value, g, beta, initial_state=None, **kw):
    put("rec.q", query); put("rec.k", key); put("rec.v", value); put("rec.g", g); put("rec.beta", beta)
    put("rec.state_in", initial_state)
    o, st = orig_rec(query, key, value, g=g, beta=beta, initial_state=initial_state, **kw)
    put("rec.out", o); put("rec.state_out", st)
    return o, st
M.torch_recurrent_gated_delta_rule = rec_wrap
orig_attn = M.eager_attention_forward
def attn_wrap(module, query, key, value, attention_mask, scaling, dropout=0.0, **kw):
    put("attn.q", query); put("attn.k", key); put("attn.v", value)
    o, w = orig_attn(module, query, key, value, attention_mask, scaling, dropout=dropout, **kw)
    put("attn.out", o)
    return o, w
M.eager_attention_forward = attn_wrap
rot = model.model.rotary_emb
cache = None
with torch.no_grad():
    for t in ids:
        o = model(input_ids=torch.tensor([[t]], device=a.device), past_key_values=cache, use_cache=True)
        cache = o.past_key_values
    pos = torch.arange(a.tokens, device=a.device).view(1, 1, -1).expand(3, 1, -1)
    cos, sin = rot(torch.zeros(1, dtype=torch.bfloat16, device=a.device), pos)
    pos_c = pos.cpu()
    rot_c = type(rot)(config)
    cos_c, sin_c = rot_c(torch.zeros(1, dtype=torch.bfloat16), pos_c)
    print("rope cos gpu vs cpu max diff", (cos.cpu().float() - cos_c.float()).abs().max().item(),
          "sin", (sin.cpu().float() - sin_c.float()).abs().max().item())
out = {f"{k}.t{j}": v for k, vs in caps.items() for j, v in enumerate(vs)}
out["rope.cos"] = cos[0].float().cpu().contiguous()
out["rope.sin"] = sin[0].float().cpu().contiguous()
out["ids"] = torch.tensor(ids, dtype=torch.int32)
save_file(out, a.out)
print("saved", len(out), "tensors")
