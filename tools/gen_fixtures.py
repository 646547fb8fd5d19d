#!/usr/bin/env python3
"""Generate the independent JAX reference fixture for tide's GPT-2 model.

What it does
------------
Builds a tiny GPT-2 (n_layer=2, n_head=2, n_embd=16, vocab_size=53,
max_seq_len=12, batch B=3, T=8) in JAX, entirely independent of the C++ code,
and records into ``tests/fixtures/gpt_tiny.json``:

  * the config and the initial parameters (numpy RandomState(1234), scales in
    INIT below),
  * 10 batches of tokens (numpy RandomState(99), shape (10, B, T+1)),
  * loss0 and the gradients of loss0 w.r.t. every parameter (jax.grad),
  * a 10-step AdamW run (PyTorch semantics, global-norm clipping 1.0,
    weight decay only on params with ndim >= 2): per-step losses (before the
    update), pre-clip global grad norms, and the final parameters. (The key
    part [C, 2C) of each attn.c_attn.bias has a zero gradient in exact
    arithmetic, softmax being shift-invariant; Adam turns its rounding noise
    into steps of up to lr, so the C++ test leaves that slice out of the
    final-parameter comparison.)

Everything in the JAX path is float32 (x64 disabled) with
``jax.default_matmul_precision("highest")``.

Why these weights
-----------------
The C++ tests compare against this fixture with a relative tolerance of
GRAD_TOL = 1e-4 per gradient tensor (tests/unit/model/test_gpt.cpp). For that
comparison to mean anything, the fixture must sit where the model's details
matter: with GPT-2's own initialisation (N(0, 0.02) weights, LayerNorm weights
1, biases 0) the MLP's pre-activations are ~0.02 and exact-erf GELU differs
from GPT-2's tanh GELU by < 1e-5, under the tolerance. Here weights and
embeddings are N(0, 0.5^2), biases N(0, 0.2^2), LayerNorm weights
1 + N(0, 0.3^2) and LayerNorm biases N(0, 0.2^2): the MLP's pre-activations
have a standard deviation of ~2, where the two GELUs differ by up to 4.7e-4
(at |x| ~ 2.7), and attention is far from uniform. Exact-erf GELU then moves
every tensor's gradient by 1.6e-4 to 2.2e-3 (the loss only by 1e-6, so it is
the gradients that tell the two apart), while the float32 reference is within
3.3e-6 of float64.

The script checks its own fixture before writing it (and fails otherwise):

  * accuracy: the float32 JAX gradients against the same model in float64
    (jax.enable_x64) differ by less than GRAD_TOL / 10 per tensor, so the
    tolerance is not eaten by the reference's own rounding;
  * discrimination: the same model with exact-erf GELU has gradients that
    differ from the fixture's by more than 10 x GRAD_TOL in at least one
    tensor, so a C++ model using erf GELU fails the test (the differences of
    every tensor are printed);
  * a few JAX gradient entries against central finite differences of a
    float64 numpy re-implementation of the forward pass.

Parameter layout follows PyTorch: linear weights are (out, in), y = x @ W.T + b;
the LM head is tied to wte.

How to rerun
------------
    pip install -r tools/requirements.txt     # jax[cpu], jaxlib, numpy (pinned)
    python3 tools/gen_fixtures.py            # writes tests/fixtures/gpt_tiny.json

It runs on CPU (a minute or two, mostly JAX start-up and compilation) and is
deterministic: with the pinned versions it rewrites the same file byte for
byte. Optional:
``python3 tools/gen_fixtures.py OUT.json`` writes elsewhere. After
regenerating, run the tests that read the fixture:
``ctest --test-dir build -R "GPT.LossAndGradients|Trainer.AdamWRun"``.

JSON schema
-----------
{
  "config": {"n_layer", "n_head", "n_embd", "vocab_size", "max_seq_len", "B", "T",
             "steps", "ln_eps"},
  "params":       [{"name": str, "shape": [ints], "data": [flat row-major floats]}, ...],
  "data":         nested int lists, shape (steps, B, T+1),
  "loss0":        float,
  "grads0":       same layout as "params",
  "adamw":        {"lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip",
                   "clip_eps", "decay_ndim_min"},
  "losses":       [steps floats]  (loss at step s on batch s, before update s),
  "grad_norms":   [steps floats]  (pre-clip global L2 norm of all grads),
  "final_params": same layout as "params" (after all steps)
}
Floats are written so that they round-trip exactly to the float32 values.
"""

import json
import math
import os
import sys

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.scipy.special  # noqa: E402

jax.config.update("jax_enable_x64", False)

CFG = dict(n_layer=2, n_head=2, n_embd=16, vocab_size=53, max_seq_len=12,
           B=3, T=8, steps=10, ln_eps=1e-5)
# Standard deviations of the initial parameters (see "Why these weights"): weights and
# embeddings, biases, LayerNorm weights (around 1), LayerNorm biases.
INIT = dict(w=0.5, b=0.2, lnw=0.3, lnb=0.2)
# The C++ tests' relative tolerance per gradient tensor; the self-checks below are relative to it.
GRAD_TOL = 1e-4
ADAMW = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
             grad_clip=1.0, clip_eps=1e-6, decay_ndim_min=2)


# ----------------------------------------------------------------------------
# parameters
# ----------------------------------------------------------------------------
def param_specs(cfg):
    """[(name, shape, kind)] in canonical order; kind in {w, b, lnw, lnb}."""
    C, V, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_layer"]
    specs = [("wte", (V, C), "w"), ("wpe", (cfg["max_seq_len"], C), "w")]
    for l in range(L):
        p = f"h.{l}."
        specs += [
            (p + "ln_1.weight", (C,), "lnw"),
            (p + "ln_1.bias", (C,), "lnb"),
            (p + "attn.c_attn.weight", (3 * C, C), "w"),
            (p + "attn.c_attn.bias", (3 * C,), "b"),
            (p + "attn.c_proj.weight", (C, C), "w"),
            (p + "attn.c_proj.bias", (C,), "b"),
            (p + "ln_2.weight", (C,), "lnw"),
            (p + "ln_2.bias", (C,), "lnb"),
            (p + "mlp.c_fc.weight", (4 * C, C), "w"),
            (p + "mlp.c_fc.bias", (4 * C,), "b"),
            (p + "mlp.c_proj.weight", (C, 4 * C), "w"),
            (p + "mlp.c_proj.bias", (C,), "b"),
        ]
    specs += [("ln_f.weight", (C,), "lnw"), ("ln_f.bias", (C,), "lnb")]
    return specs


def init_params(cfg):
    rng = np.random.RandomState(1234)
    params = {}
    for name, shape, kind in param_specs(cfg):
        r = rng.standard_normal(shape)
        if kind == "lnw":
            a = 1.0 + INIT["lnw"] * r
        else:  # "w" (weights, embeddings), "b" (biases), "lnb" (LayerNorm biases)
            a = INIT[kind] * r
        params[name] = a.astype(np.float32)
    return params


# ----------------------------------------------------------------------------
# model (generic over numpy / jax.numpy so the float64 check is independent of jax)
# ----------------------------------------------------------------------------
def make_forward(xp, cfg, gelu="tanh"):
    """Loss function loss(P, tokens, targets). gelu: "tanh" (GPT-2's, what tide implements) or
    "erf" (exact; jax.numpy only), the latter to check that the fixture tells them apart."""
    C, NH, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    HS = C // NH
    eps = cfg["ln_eps"]

    def layernorm(x, w, b):
        mu = xp.mean(x, axis=-1, keepdims=True)
        var = xp.mean((x - mu) ** 2, axis=-1, keepdims=True)  # biased
        return (x - mu) / xp.sqrt(var + eps) * w + b

    def gelu_tanh(u):
        return 0.5 * u * (1.0 + xp.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))

    def gelu_erf(u):
        return 0.5 * u * (1.0 + jax.scipy.special.erf(u / math.sqrt(2.0)))

    assert gelu in ("tanh", "erf") and (gelu == "tanh" or xp is jnp)
    gelu_fn = gelu_tanh if gelu == "tanh" else gelu_erf

    def linear(x, w, b=None):
        y = xp.matmul(x, w.T)
        return y if b is None else y + b

    def logits_fn(P, tokens):
        B, T = tokens.shape
        x = P["wte"][tokens] + P["wpe"][0:T]
        mask = np.tril(np.ones((T, T), dtype=bool))
        for l in range(L):
            p = f"h.{l}."
            h = layernorm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
            qkv = linear(h, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"])
            q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
            q, k, v = (xp.transpose(t.reshape(B, T, NH, HS), (0, 2, 1, 3)) for t in (q, k, v))
            att = xp.matmul(q, xp.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(HS))
            att = xp.where(mask, att, -xp.inf)
            att = att - xp.max(att, axis=-1, keepdims=True)
            att = xp.exp(att)
            att = att / xp.sum(att, axis=-1, keepdims=True)
            y = xp.matmul(att, v)                                   # (B,NH,T,HS)
            y = xp.transpose(y, (0, 2, 1, 3)).reshape(B, T, C)
            y = linear(y, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
            x = x + y
            h = layernorm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
            f = gelu_fn(linear(h, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"]))
            x = x + linear(f, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])
        x = layernorm(x, P["ln_f.weight"], P["ln_f.bias"])
        return linear(x, P["wte"])                                  # tied head (B,T,V)

    def loss_fn(P, tokens, targets):
        logits = logits_fn(P, tokens)
        m = xp.max(logits, axis=-1, keepdims=True)
        lse = xp.log(xp.sum(xp.exp(logits - m), axis=-1)) + m[..., 0]
        picked = xp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
        return xp.mean(lse - picked)

    return loss_fn


# ----------------------------------------------------------------------------
# AdamW (PyTorch semantics) in float32 jax
# ----------------------------------------------------------------------------
def train(params0, data, cfg, hp, loss_and_grad):
    names = [n for n, _, _ in param_specs(cfg)]
    f32 = jnp.float32
    P = {n: jnp.asarray(params0[n]) for n in names}
    m = {n: jnp.zeros_like(P[n]) for n in names}
    v = {n: jnp.zeros_like(P[n]) for n in names}
    lr, b1, b2 = f32(hp["lr"]), f32(hp["beta1"]), f32(hp["beta2"])
    eps, wd = f32(hp["eps"]), f32(hp["weight_decay"])
    losses, norms = [], []
    T = cfg["T"]
    for s in range(cfg["steps"]):
        tok = jnp.asarray(data[s, :, :T])
        tgt = jnp.asarray(data[s, :, 1:])
        loss, g = loss_and_grad(P, tok, tgt)
        total = jnp.sqrt(sum(jnp.sum(g[n] * g[n]) for n in names))
        coef = jnp.minimum(f32(1.0), f32(hp["grad_clip"]) / (total + f32(hp["clip_eps"])))
        losses.append(float(loss))
        norms.append(float(total))
        t = s + 1
        bc1 = f32(1.0) - b1 ** t
        bc2 = f32(1.0) - b2 ** t
        for n in names:
            gn = g[n] * coef
            p = P[n]
            if p.ndim >= hp["decay_ndim_min"]:
                p = p - lr * wd * p
            m[n] = b1 * m[n] + (f32(1.0) - b1) * gn
            v[n] = b2 * v[n] + (f32(1.0) - b2) * gn * gn
            mhat = m[n] / bc1
            vhat = v[n] / bc2
            P[n] = p - lr * mhat / (jnp.sqrt(vhat) + eps)
    return losses, norms, {n: np.asarray(P[n], dtype=np.float32) for n in names}


# ----------------------------------------------------------------------------
# serialization
# ----------------------------------------------------------------------------
def f32_float(x):
    """Python float that round-trips exactly to the float32 value x."""
    return float("%.9g" % np.float32(x))


def tensor_list(cfg, arrays):
    out = []
    for name, shape, _ in param_specs(cfg):
        a = np.asarray(arrays[name], dtype=np.float32)
        assert a.shape == tuple(shape), (name, a.shape, shape)
        out.append({"name": name, "shape": list(shape),
                    "data": [f32_float(x) for x in a.reshape(-1)]})
    return out


def fd_check(params, tokens, targets, grads, cfg):
    """Central finite differences in float64 (numpy forward) vs JAX float32 grads."""
    loss64 = make_forward(np, cfg)
    P64 = {n: params[n].astype(np.float64) for n in params}
    l64 = float(loss64(P64, tokens, targets))
    checks = [("wte", (5, 3)), ("h.0.attn.c_attn.weight", (20, 7)),
              ("h.1.mlp.c_fc.bias", (11,)), ("h.0.ln_1.weight", (4,)),
              ("wpe", (2, 9)), ("ln_f.bias", (0,))]
    h = 1e-6
    results = []
    for name, idx in checks:
        Pp = dict(P64); Pp[name] = P64[name].copy(); Pp[name][idx] += h
        Pm = dict(P64); Pm[name] = P64[name].copy(); Pm[name][idx] -= h
        fd = (float(loss64(Pp, tokens, targets)) - float(loss64(Pm, tokens, targets))) / (2 * h)
        ag = float(np.asarray(grads[name])[idx])
        rel = abs(fd - ag) / max(abs(fd), abs(ag), 1e-12)
        results.append((name, idx, ag, fd, rel))
    return l64, results


def rel_err(a, ref):
    """||a - ref|| / ||ref|| over a whole tensor, as the C++ tests' rel_error."""
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def self_checks(params, tokens, targets, grads0, cfg):
    """Per tensor: the float32 gradients against float64 ones (accuracy of the reference), and
    the gradients of the same model with exact-erf GELU against the float32 ones (what a C++
    model with the wrong GELU would show). Returns (loss64, loss_erf, {name: (acc, erf)})."""
    names = [n for n, _, _ in param_specs(cfg)]
    with jax.enable_x64(True):
        P64 = {n: jnp.asarray(params[n].astype(np.float64)) for n in names}
        loss64, g64 = jax.value_and_grad(make_forward(jnp, cfg))(
            P64, jnp.asarray(tokens), jnp.asarray(targets))
        assert loss64.dtype == jnp.float64
        g64 = {n: np.asarray(g64[n]) for n in names}
        loss64 = float(loss64)
    with jax.default_matmul_precision("highest"):
        P32 = {n: jnp.asarray(params[n]) for n in names}
        loss_erf, gerf = jax.jit(jax.value_and_grad(make_forward(jnp, cfg, gelu="erf")))(
            P32, jnp.asarray(tokens), jnp.asarray(targets))
    table = {n: (rel_err(grads0[n], g64[n]), rel_err(np.asarray(gerf[n]), grads0[n]))
             for n in names}
    return loss64, float(loss_erf), table


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "gpt_tiny.json")
    out_path = os.path.normpath(out_path)
    cfg = CFG
    B, T, V = cfg["B"], cfg["T"], cfg["vocab_size"]
    assert T < cfg["max_seq_len"]

    params = init_params(cfg)
    data = np.random.RandomState(99).randint(0, V, size=(cfg["steps"], B, T + 1)).astype(np.int32)

    with jax.default_matmul_precision("highest"):
        loss_fn = make_forward(jnp, cfg)
        loss_and_grad = jax.jit(jax.value_and_grad(loss_fn))
        P0 = {n: jnp.asarray(a) for n, a in params.items()}
        tok0, tgt0 = jnp.asarray(data[0, :, :T]), jnp.asarray(data[0, :, 1:])
        loss0, grads0 = loss_and_grad(P0, tok0, tgt0)
        assert loss0.dtype == jnp.float32
        grads0 = {n: np.asarray(g, dtype=np.float32) for n, g in grads0.items()}
        loss0 = float(loss0)
        losses, norms, final = train(params, data, cfg, ADAMW, loss_and_grad)

    assert losses[0] == loss0
    l64, fd = fd_check(params, data[0, :, :T], data[0, :, 1:], grads0, cfg)
    jl64, loss_erf, table = self_checks(params, data[0, :, :T], data[0, :, 1:], grads0, cfg)
    worst_acc = max(acc for acc, _ in table.values())
    most_erf = max(erf for _, erf in table.values())

    if worst_acc >= GRAD_TOL / 10:
        sys.exit(f"the float32 reference is off its float64 self by {worst_acc:.2e}")
    if most_erf <= 10 * GRAD_TOL:
        sys.exit(f"exact-erf GELU changes the gradients by only {most_erf:.2e}: the fixture "
                 f"could not tell it from tanh GELU at tolerance {GRAD_TOL:g}")

    fixture = {
        "config": cfg,
        "params": tensor_list(cfg, params),
        "data": data.tolist(),
        "loss0": f32_float(loss0),
        "grads0": tensor_list(cfg, grads0),
        "adamw": ADAMW,
        "losses": [f32_float(x) for x in losses],
        "grad_norms": [f32_float(x) for x in norms],
        "final_params": tensor_list(cfg, final),
    }
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")

    n_params = sum(int(np.prod(s)) for _, s, _ in param_specs(cfg))
    print(f"jax {jax.__version__}, numpy {np.__version__}, backend {jax.default_backend()}")
    print(f"params: {len(param_specs(cfg))} tensors, {n_params} scalars")
    print(f"loss0 (jax f32) = {loss0:.9g}   numpy f64 = {l64:.9g}   "
          f"rel diff = {abs(loss0 - l64) / abs(l64):.2e}   ln(V) = {math.log(V):.6f}")
    print("finite-difference check (float64 numpy, central, h=1e-6) vs jax float32 grad:")
    for name, idx, ag, fdv, rel in fd:
        print(f"  {name}{list(idx)}: jax={ag:+.6e} fd={fdv:+.6e} rel_err={rel:.2e}")
    worst = max(r[-1] for r in fd)
    print(f"  worst rel err = {worst:.2e} -> {'OK' if worst < 1e-3 else 'SUSPICIOUS'}")
    print(f"loss0: float64 jax {jl64:.9g}; with exact-erf GELU {loss_erf:.9g} "
          f"(rel diff {abs(loss_erf - loss0) / abs(loss0):.2e})")
    print(f"per-tensor ||g - ref|| / ||ref|| (C++ tolerance {GRAD_TOL:g}):")
    print(f"  {'tensor':24s} {'f32 vs f64':>11s} {'erf GELU':>11s}")
    for name, (acc, erf) in table.items():
        print(f"  {name:24s} {acc:11.2e} {erf:11.2e}")
    print(f"  worst f32 vs f64 {worst_acc:.2e} (must be < {GRAD_TOL / 10:g}); "
          f"largest erf-GELU difference {most_erf:.2e} (must be > {10 * GRAD_TOL:g})")
    print("losses:     " + " ".join(f"{x:.6f}" for x in losses))
    print("grad_norms: " + " ".join(f"{x:.6f}" for x in norms))
    print(f"wrote {out_path} ({os.path.getsize(out_path) / 1024:.1f} KB)")


if __name__ == "__main__":
    main()
