"""Reference points for the memory-bound kernels: time a read-only reduction (torch.sum) and a
copy of the VAE tensors, 20 launches a CUDA graph, median of 30 replays (as trt_gn.bench)."""
import torch

from trt_gn.bench import time_per_launch_us

for shape in [(1, 256, 512, 512), (1, 128, 512, 512)]:
    x = torch.randn(shape, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    out = torch.empty((), device="cuda", dtype=torch.float32)
    mb = x.numel() * 2 / 1e6
    t_sum = time_per_launch_us(lambda: torch.sum(x.view(-1), dim=0, dtype=torch.float32, out=out), 30)
    t_copy = time_per_launch_us(lambda: y.copy_(x), 30)
    t_amax = time_per_launch_us(lambda: torch.amax(x.view(-1, 256), dim=0), 30)
    print(f"{shape}: {mb:.0f} MB  sum {t_sum:.1f} us ({mb / t_sum:.2f} TB/s read)  "
          f"amax-rows {t_amax:.1f} us ({mb / t_amax:.2f} TB/s)  copy {t_copy:.1f} us ({2 * mb / t_copy:.2f} TB/s r+w)")
