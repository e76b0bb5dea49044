"""The record's packages: the core ones always (null when absent), and every installed CUDA
plugin and CUDA library wheel by name, read from real dist-info metadata."""

import importlib.metadata

from dew.bench.record import capture

# What the cuda13 lock installs besides the core (locks/cuda13.txt), some under the
# spellings their wheels use (underscores, capitals), and wheels that are no CUDA's.
INSTALLED = {
    "jax": "0.11.1",
    "numpy": "2.4.4",
    "jax_cuda13_plugin": "0.11.1",
    "jax-cuda13-pjrt": "0.11.1",
    "nvidia-cublas": "13.10.0.20",
    "nvidia_cudnn_cu13": "9.28.1.4",
    "nvidia-nccl-cu13": "2.32.3",
    "NVIDIA-cuda-nvrtc": "13.5.37",
    "scipy": "1.18.1",
    "jaxtyping": "0.3.2",
}


def _site(root, distributions):
    """A site-packages directory holding each distribution's dist-info, as pip writes it."""
    for name, version in distributions.items():
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


def test_every_cuda_plugin_and_library_wheel_is_listed_after_the_core(tmp_path):
    packages = capture.installed_packages([str(_site(tmp_path, INSTALLED))])
    assert list(packages)[: len(capture.CORE_PACKAGES)] == list(capture.CORE_PACKAGES)
    assert packages["jax"] == "0.11.1" and packages["numpy"] == "2.4.4"
    assert packages["flax"] is None and packages["grain"] is None  # core, absent: null
    assert list(packages)[len(capture.CORE_PACKAGES) :] == [
        "jax-cuda13-pjrt",
        "jax-cuda13-plugin",
        "nvidia-cublas",
        "nvidia-cuda-nvrtc",
        "nvidia-cudnn-cu13",
        "nvidia-nccl-cu13",
    ]
    assert packages["nvidia-cudnn-cu13"] == "9.28.1.4"
    assert "scipy" not in packages and "jaxtyping" not in packages


def test_the_first_of_a_name_on_the_path_wins_as_an_import_would(tmp_path):
    first = _site(tmp_path / "first", {"nvidia-cublas": "13.10.0.20"})
    second = _site(tmp_path / "second", {"nvidia-cublas": "12.9.1.4", "jax": "0.4.0"})
    packages = capture.installed_packages([str(first), str(second)])
    assert packages["nvidia-cublas"] == "13.10.0.20" and packages["jax"] == "0.4.0"


def test_this_environment_lists_its_core_and_nvidia_wheels_as_installed():
    packages = capture.capture().packages
    assert packages["jax"] == importlib.metadata.version("jax")
    # nvidia-ml-py (NVML's binding, in every lock) is named though no list of ours names it.
    assert packages["nvidia-ml-py"] == importlib.metadata.version("nvidia-ml-py")
