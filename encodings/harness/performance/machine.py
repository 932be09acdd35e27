"""The machine a measurement was taken on: CPU and GPU names, torch and CUDA versions."""

from __future__ import annotations

import os
import platform

import torch


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: str) -> str:
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    return f"{cpu_name()}, {os.cpu_count()} logical CPUs, {torch.get_num_threads()} torch threads"


def machine_info() -> dict:
    info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpus": [],
    }
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["cudnn"] = torch.backends.cudnn.version()
    return info
