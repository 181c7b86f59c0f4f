import time, torch, sys
sys.path.insert(0, "bench")
import bench, mhc
n, M, C = 4, 128, 4096
impl = bench.mhc_ops()
s = bench.make_set(M, n, C)
def layer():
    return bench.layer(impl, s, n)
for op in ("project", "scale", "sinkhorn", "aggregate", "expand_combine"):
    args = bench.args_of(op, s, n)
    f = impl[op]
    for _ in range(50): f(*args)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(500): f(*args)
    host = (time.perf_counter() - t) / 500 * 1e6
    torch.cuda.synchronize(); gpu = (time.perf_counter() - t) / 500 * 1e6
    print(f"{op:15s} host {host:6.1f} us/call, host+drain {gpu:6.1f}")
for _ in range(50): layer()
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(500): layer()
host = (time.perf_counter() - t) / 500 * 1e6
torch.cuda.synchronize(); gpu = (time.perf_counter() - t) / 500 * 1e6
print(f"layer host {host:.1f} us/call, with drain {gpu:.1f}")
