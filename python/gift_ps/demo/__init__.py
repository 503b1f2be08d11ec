"""The GIFT-PS training demo (`make demo`, or `python3 -m gift_ps.demo --help`).

Trains a small Llama-style byte-level language model on the King James Bible
with 4 data-parallel processes that average their gradients through a local
GIFT-PS cluster, once per communication configuration (FP32, BF16, direct FP8
in the published baseline's format and in GIFT's, GIFT FP8), and compares the
runs. Modules:

  model   the model (also used by scripts/real_gradients.py); imports only torch
  data    the corpus, its train/validation split and the per-seed data order
  train   one training process (one rank)
  driver  the command line: clusters, policies, processes, table, JSON, plot
"""
