"""Preset names, generated from gpus.json, models.json and fabrics.json by
scripts/regenerate.py: do not edit; add a preset to the JSON file and run the script."""

GPU_NAMES: tuple[str, ...] = (
    "a100-40gb",
    "a100-80gb",
    "h100-sxm",
    "h100-sxm-hbm2e",
    "h800",
    "h200",
    "b200",
    "b300",
    "gb200-nvl72",
    "gb300-nvl72",
    "mi300x",
)

MODEL_NAMES: tuple[str, ...] = (
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "llama3.2-1b",
    "tinyllama-1.1b",
    "gpt2-small",
    "gpt3-175b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "gpt-oss-120b",
    "deepseek-v3",
    "kimi-k2",
    "llama4-scout-17b-16e",
    "llama4-maverick-17b-128e",
    "gpt-22b",
    "gpt-530b",
    "gpt-1t",
)

FABRIC_NAMES: tuple[str, ...] = (
    "llama3-roce",
    "dgx-superpod-h100",
    "dgx-superpod-b200",
    "gb200-nvl72-superpod",
)
