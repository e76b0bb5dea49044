"""NVIDIA GPUs (JAX's "gpu" on CUDA): NVML reads the cards, the CUDA stack runs them.

Records have always named the platform "gpu", JAX's name; a ROCm GPU, which JAX calls
"gpu" too, is not this platform's: the vendor decides (the device kind, or the backend's
platform_version naming CUDA).
"""

from __future__ import annotations

from dew.platforms import Peak, Platform, Prior, register

# Keys are matched inside `jax.Device.device_kind` as whole words (dew.telemetry.peaks).
PEAKS = {
    "RTX 4080": Peak(97.5, "NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4080 column"),
    "RTX 4090": Peak(165.2, "NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090 column"),
    "RTX 3090": Peak(71.0, "NVIDIA Ampere GA102 GPU Architecture whitepaper, RTX 3090 column"),
    "A100": Peak(312.0, "NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe)"),
    "H100 80GB HBM3": Peak(989.4, "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column"),
    "H100 SXM": Peak(989.4, "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column"),
    "H100 SXM5": Peak(989.4, "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column"),
    "H100 PCIe": Peak(756.0, "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column"),
    "H100 NVL": Peak(835.0, "NVIDIA H100 NVL datasheet, per GPU"),
    "H200": Peak(989.0, "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column"),
    "H200 NVL": Peak(835.0, "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column"),
    "B200": Peak(2250.0, "NVIDIA DGX B200 / HGX B200 datasheet, per GPU, dense"),
    "L4": Peak(121.0, "NVIDIA L4 Tensor Core GPU datasheet"),
    "L40S": Peak(362.0, "NVIDIA L40S GPU datasheet"),
}

# CUDA's device names: "NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB", "GeForce RTX 4080"
VENDOR = r"nvidia|tesla|geforce|quadro|titan|\brtx\b|\bgtx\b|\bcuda\b"

NVIDIA = register(
    Platform(
        name="gpu",
        title="an NVIDIA GPU",
        jax_names=("gpu", "cuda"),
        aliases=("cuda",),
        vendor=VENDOR,
        kinds=VENDOR,
        peaks=PEAKS,
        memory="dew.bench.record.devices:nvml_memory_gib",
        guess="dew.bench.record.devices:nvml_guess",
        stack_variant="cuda13",
        variants=("cuda12", "cuda13"),
        jax_platforms="cuda",
        attention=frozenset({"cudnn"}),
        nvml=True,
        noise=Prior(
            0.02,
            0.01,
            0.01,
            "one published same-commit rerun on an RTX 4080 (83.0 against 83.26 ms, 0.3%), "
            "widened; no committed GPU A/A record bears it out (the H200's three, cut at a "
            "timeout, read 15% between processes of 50-step windows of 3-6 ms steps)",
        ),
        band=0.02,  # its runs repeat within about 1%
    )
)
