#!/usr/bin/env python3
"""A catalog entry that is a FIFO: the preset is refused as unknown, with a
note saying what the file is, instead of blocking on the read forever. The
catalog is made next to the spec (err/file-fifo-preset/catalog)."""
import os
import pathlib
import sys

target = pathlib.Path(sys.argv[1])
models = target.parent / "file-fifo-preset" / "catalog" / "models"
models.mkdir(parents=True)
os.mkfifo(models / "stuck.yaml")
target.write_text("""# A model preset whose catalog file is a FIFO.
version: 1
name: case

model:
  preset: stuck

hardware:
  nodes: 1
  gpus_per_node: 8
  gpu: { memory: 80 GB, hbm_bandwidth: 3.35 TB/s, bf16: 989 TFLOP/s }
  scale_up: { bandwidth: 450 GB/s }
  scale_out: { bandwidth: 50 GB/s }

workload:
  input_tokens: 2000
  output_tokens: 300

deployment:
  mode: aggregated
  pools:
    - name: main
      tp: 8
""")
