"""Host microseconds per call, for the host-cost probes (host_costs.py, host_breakdown.py)."""
import time

import torch


def host_us(fn, calls, rounds, warmup, cuda):
    """Median over `rounds` of the host microseconds per call of `calls` back-to-back calls with no
    synchronisation inside a round (few enough that CUDA's launch queue never fills), after `warmup`."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(rounds):
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t) / calls * 1e6)
    sync()
    return sorted(out)[len(out) // 2]
