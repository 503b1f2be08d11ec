"""The demo's configurations (codecs and transform per run), its model sizes, and the giftctl policy each configuration sets."""

# name -> (push codec, pull codec, GIFT transform on, description)
CONFIGS = {
    "fp32": ("fp32", "fp32", False, "FP32 push and pull, every tensor direct: the exact reference"),
    "bf16": ("bf16", "bf16", False, "BF16 push and pull, every tensor direct"),
    "fp8": ("e5m2/tensor", "bf16", False, "direct FP8: E5M2 with one scale per tensor (the published baseline), BF16 pull"),
    "fp8-block": ("e4m3/block128", "bf16", False, "direct FP8 in GIFT's format: E4M3, a scale per 128 values, no transform, BF16 pull"),
    "gift": (
        "e4m3/block128",
        "bf16",
        True,
        "GIFT FP8: E4M3 with a scale per 128 values after the GIFT transform (default policy: "
        "tensors chosen by measured error), BF16 pull",
    ),
    "gift-unbudgeted": (
        "e4m3/block128",
        "bf16",
        True,
        "gift with the step budget off (giftctl policy set --gift-budget off): every measured "
        "winner at the policy's rank, whatever it costs",
    ),
    "gift-e5m2": ("e5m2/tensor", "bf16", True, "GIFT in the baseline's format: E5M2 per tensor after the GIFT transform, BF16 pull"),
    "gift-overlap": (
        "e4m3/block128",
        "bf16",
        True,
        "gift, with each bucket of gradients pushed as soon as backward finished it (GradientSync overlap)",
    ),
    "ddp-fp32": ("fp32", "fp32", False, "no service: DistributedDataParallel over gloo, FP32 all-reduce"),
    "ddp-fp16": ("fp16", "fp16", False, "no service: DistributedDataParallel over gloo with fp16_compress_hook"),
    # FP8 both ways (the paper's all-reduce) and NVFP4 push, each without and
    # with the transform; 1-D tensors go bf16 both ways in all of them (the
    # policy's default for tensors that are not transformable).
    "fp8-both": ("e4m3/block128", "e4m3/block128", False, "direct FP8 both ways: E4M3, a scale per 128 values, push and pull"),
    "gift-fp8-both": (
        "e4m3/block128",
        "e4m3/block128",
        True,
        "the default policy with FP8 both ways: E4M3/block128 push and pull, each tensor in the fewest bytes "
        "(NVFP4 where it measures within E4M3's error) under the fidelity target",
    ),
    "nvfp4": ("nvfp4", "e4m3/block128", False, "direct NVFP4 push (E2M1, an E4M3 scale per 16 values), E4M3/block128 pull"),
    "gift-nvfp4": ("nvfp4", "e4m3/block128", True, "GIFT NVFP4 push, E4M3/block128 pull, both in the GIFT basis"),
    "nvfp4-rot": ("nvfp4", "e4m3/block128", False, "nvfp4, each row rotated in blocks of 8 before the push (giftctl policy set --rotation-block 8)"),
    "gift-nvfp4-rot": ("nvfp4", "e4m3/block128", True, "gift-nvfp4, each row rotated in blocks of 8 after the GIFT basis (--rotation-block 8)"),
    "gift-nvfp4-mse": (
        "nvfp4/mse",
        "e4m3/block128",
        True,
        "GIFT NVFP4 push with least-squares block scales (nvfp4/mse), bases from the layers' inputs and the "
        "workers' gradients (--source activations-per-worker; the training loop hands in X^T X every step)",
    ),
}
# Configurations with a geometry source other than the policy's default ->
# that source; the activation sources make the training loop collect X^T X of
# every linear layer's inputs on every step.
SOURCE = {"gift-nvfp4-mse": "activations-per-worker"}
# Configurations that rotate each row in blocks (policy transform.rotation_block)
# -> the block: 8, the largest power of two dividing every last dimension of the
# demo's models (mlp.down's 344 and 172).
ROTATION = {"nvfp4-rot": 8, "gift-nvfp4-rot": 8}
# GIFT configurations that keep their push codec on every tensor: the
# fidelity target (the default policy, docs/design.md section 3.7) is off for
# them, since it would send each tensor in whatever codec reaches E4M3
# block-128's error in the fewest bytes. The other GIFT rows (gift,
# gift-unbudgeted, gift-overlap, gift-fp8-both) run the default target.
TARGET_OFF = {"gift-e5m2", "gift-nvfp4", "gift-nvfp4-rot", "gift-nvfp4-mse"}
# Configurations that run without the service: DDP over gloo, with this comm hook.
DDP_HOOKS = {"ddp-fp32": None, "ddp-fp16": "fp16"}
# Configurations whose gradients are pushed during backward -> the same
# configuration synced after backward (whose compute and sync seconds,
# measured separately, the overlapped step is compared with).
OVERLAP = {"gift-overlap": "gift"}
# fp8-block is a default row because GIFT's FP8 format (E4M3, a scale per 128
# values) alone already halves the error of the baseline's (E5M2, one scale
# per tensor) on this model: without it, the gift row would mix the format's
# gain with the transform's. Measured through the service (d_model 128, 4
# layers, 100 steps, mean rel. error of the averaged weight-matrix gradients
# over steps 55-100): fp8 0.040, fp8-block 0.019, gift 0.0089, and gift-e5m2
# 0.019 (the transform halves the error in either format).
DEFAULT_CONFIGS = "fp32,bf16,fp8,fp8-block,gift"

# Sizes: a full run of the 5 default configurations in < 15 minutes on 2 cores
# (about 1200 CPU seconds in all, most of them the 4 training processes;
# measured: 610 CPU s for 100 steps of each configuration).
FULL = dict(steps=200, d_model=128, layers=4, heads=4, mlp_hidden=344, context=128, batch=32, eval_every=20, measure_every=10)
QUICK = dict(steps=60, d_model=64, layers=2, heads=4, mlp_hidden=172, context=64, batch=16, eval_every=10, measure_every=5)


def policy_args(name):
    push, pull, gift, _ = CONFIGS[name]
    a = ["policy", "set", "--push-codec", push, "--pull-codec", pull]
    if gift:
        a += ["--selection", "measured"]
        if name == "gift-unbudgeted":
            a += ["--gift-budget", "off"]
        if name in TARGET_OFF:
            a += ["--target", "off"]
    else:
        a += ["--selection", "list", "--exclude", "*"]  # every tensor direct
    a += ["--rotation-block", str(ROTATION.get(name, "off"))]
    if name in SOURCE:
        a += ["--source", SOURCE[name]]
    return a


def collects_activations(name):
    """Whether the configuration's training loop hands in activation statistics."""
    return SOURCE.get(name, "").startswith("activations")
