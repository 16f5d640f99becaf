"""The lab: the tools that measure and check the kernels, kept out of the runtime package.

  bench          `trt-gn bench`: the kernels against torch eager, torch.compile and a device copy
  fuzz           `trt-gn fuzz`: random cases over the accepted input space vs the float64 reference
  ab             python -m trt_gn.lab.ab: two builds of the kernels timed in alternation
  compare_plans  python -m trt_gn.lab.compare_plans: two `trt-gn fuzz --plans` dumps compared
  profile        python -m trt_gn.lab.profile: the kernels over the shape list, for Nsight Compute
  host_overhead  python -m trt_gn.lab.host_overhead: the op's host time per call vs stock PyTorch
  vae_decode     python -m trt_gn.lab.vae_decode: end-to-end VAE decode, stock vs trt_gn
  pre_add        python -m trt_gn.lab.pre_add: the pre-add vs the separate pass it replaces
  triton_load    python -m trt_gn.lab.triton_load: a local Triton server under load and faults
  costmodel      python -m trt_gn.lab.costmodel: the planner's cost model swept on a GPU and refitted
  shapes         the benchmark shape list

Every tool needs a CUDA GPU to measure (trt_gn.compile_check, which the served PyTorch model
uses too, checks that a compiled variant really compiled); their history and raw runs are in docs/lab/. Nothing in
the runtime package imports the lab.
"""
