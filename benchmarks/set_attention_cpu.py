"""Masked attention of the Set Transformer baseline on the CPU: ``scaled_dot_product_attention`` with a
boolean key mask (what ``swarmctl.layers.set_attention`` uses) against the same attention written out
(scores, masked_fill, softmax, product) and against SDPA forced to its math backend.

Forward + backward of the two attentions of an ISAB block at the clustering shape of the (32-20-2)
baseline: 100 sets of 600 entities, d 32, 4 heads (head size 8), 20 inducing points; variants
alternate, the median of --repeats is reported.

    python benchmarks/set_attention_cpu.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def written_out(q, k, v, mask):
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1) @ v


def sdpa(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def sdpa_math(q, k, v, mask):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def run(fn, q, k, v, mask) -> None:
    for t in (q, k, v):
        t.grad = None
    fn(q, k, v, mask).sum().backward()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.manual_seed(0)
    B, h, d, n, m = 100, 4, 8, 600, 20
    mask = (torch.arange(n) < torch.randint(n // 2, n + 1, (B, 1))).view(B, 1, 1, n)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, cpus {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}; {B} sets x {n} entities, {h} heads of {d}, {m} inducing points")
    cases = {"inducing <- set (key mask)": (m, n, mask), "set <- inducing (no mask)": (n, m, None)}
    variants = {"sdpa, bool mask (swarmctl)": sdpa, "written out": written_out, "sdpa, math backend": sdpa_math}
    for case, (nq, nk, msk) in cases.items():
        q, k, v = (torch.randn(B, h, size, d, requires_grad=True) for size in (nq, nk, nk))
        times: dict[str, list[float]] = {name: [] for name in variants}

        for fn in variants.values():
            run(fn, q, k, v, msk)
        for _ in range(args.repeats):
            for name, fn in variants.items():
                t = time.perf_counter()
                run(fn, q, k, v, msk)
                times[name].append(time.perf_counter() - t)
        print(f"{case}: forward + backward, median ms")
        base = statistics.median(times["sdpa, bool mask (swarmctl)"])
        for name, ts in times.items():
            print(f"  {name:<28} {1e3 * statistics.median(ts):>8.1f}  ({statistics.median(ts) / base:.2f}x)")
    print(f"load average {os.getloadavg()[0]:.1f} at the end (above {os.cpu_count()}: the machine was shared)")


if __name__ == "__main__":
    main()
