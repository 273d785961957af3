"""Communication per method and stage (the paper's Figure 5 analogue), K = 3 and K = 2..8.

Sizes are counted from real models: the router and a 2B-class reward model / policy built from
a Qwen2-VL-2B-shaped config on the ``meta`` device (no weights needed), its LoRA adapter counted
by peft, and the tiny benchmark models. Tiny-scale image bytes are the measured PNG sizes of
benchmark images; the 2B-class image size is an assumption (``--image-kb``) reported in the JSON.
The last stdout line is one JSON object with a ``headline`` (K = 3, MB, 2B-class scale).

    .venv/bin/python examples/benchmarks/communication.py --quick
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

from sdk.alignment import (
    CommunicationSetting,
    communication_bytes,
    lora_parameter_count,
    parameter_count,
)
from sdk.data import SynthConfig, synthesize
from sdk.models import build_tiny_vlm, load_vlm
from sdk.reward import LoraSettings
from sdk.router import Router, RouterConfig

MB = 1e6
# The adapter GRPOSettings(lora=LoraSettings()) trains: r=8 on the language model's q, k, v, o.
LORA = LoraSettings().peft_config()


def qwen2_vl_2b_on_meta() -> torch.nn.Module:
    """Qwen2-VL-2B's published shape (text 1536 x 28 layers, vision 1280 x 32), no weights."""
    config = Qwen2VLConfig(
        text_config={"vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960,
                     "num_hidden_layers": 28, "num_attention_heads": 12,
                     "num_key_value_heads": 2, "tie_word_embeddings": True,
                     "rope_parameters": {"rope_type": "default", "mrope_section": [16, 24, 24],
                                         "rope_theta": 1e6}},
        vision_config={"depth": 32, "embed_dim": 1280, "hidden_size": 1536, "num_heads": 16,
                       "mlp_ratio": 4, "patch_size": 14, "spatial_merge_size": 2},
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        return Qwen2VLForConditionalGeneration(config)


def benchmark_image_bytes() -> int:
    """Mean file size of the synthetic benchmark's policy images (PNG, 84x84), measured."""
    with tempfile.TemporaryDirectory() as tmp:
        synthesize(SynthConfig(train_pairs=1, eval_pairs=1, heldout_pairs=1, warmup_queries=0,
                               policy_train_queries=16, policy_eval_queries=1), tmp)
        files = list((Path(tmp) / "policy" / "train").rglob("*.png"))
        return int(sum(f.stat().st_size for f in files) / len(files))


def router_params(input_dim: int, k: int) -> int:
    """The project's default router (RouterConfig defaults) over an encoder of ``input_dim``."""
    cfg = RouterConfig(input_dim=input_dim)
    return parameter_count(Router(cfg, [f"c{i}" for i in range(k)], "enc"))


def scale_sizes(image_kb: float) -> dict[str, dict[str, int]]:
    print("counting parameters of the 2B-class model on the meta device ...", flush=True)
    big = qwen2_vl_2b_on_meta()
    big_hidden = 1536
    sizes = {"2b_class": {"rm_params": parameter_count(big) + big_hidden + 1,
                          "lora_params": lora_parameter_count(big, LORA),
                          "image_bytes": int(image_kb * 1000), "hidden": big_hidden}}
    print("building the tiny benchmark model ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tiny = load_vlm(build_tiny_vlm("qwen2_5_vl", Path(tmp)))
    sizes["tiny"] = {"rm_params": parameter_count(tiny.model) + tiny.hidden_size + 1,
                     "lora_params": lora_parameter_count(tiny.model, LORA),
                     "image_bytes": benchmark_image_bytes(), "hidden": tiny.hidden_size}
    return sizes


def table(size: dict[str, int], k: int, args: argparse.Namespace) -> dict[str, dict[str, int]]:
    setting = CommunicationSetting(
        num_clients=k, rounds=args.rounds, queries=args.queries, group_size=args.group_size,
        unique_images=args.unique_images, router_params=router_params(size["hidden"], k),
        rm_params=size["rm_params"], lora_params=size["lora_params"],
        image_bytes=size["image_bytes"], text_bytes=200,
    )
    return communication_bytes(setting)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--queries", type=int, default=4000, help="GRPO prompts in the run")
    parser.add_argument("--unique-images", type=int, default=1000, help="distinct query images")
    parser.add_argument("--group-size", type=int, default=4, help="M")
    parser.add_argument("--image-kb", type=float, default=50.0,
                        help="assumed bytes on the wire of one 2B-scale image (JPEG ~448x448)")
    args = parser.parse_args()
    sizes = scale_sizes(args.image_kb)
    results: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for scale, size in sizes.items():
        print(f"{scale}: {size}", flush=True)
        results[scale] = {}
        for k in range(2, 9):
            methods = table(size, k, args)
            results[scale][str(k)] = {
                m: {stage: b / MB for stage, b in stages.items()} for m, stages in methods.items()
            }
            totals = "  ".join(f"{m}={v['total']:.1f}MB" for m, v in results[scale][str(k)].items())
            print(f"  K={k}: {totals}", flush=True)
    k3 = results["2b_class"]["3"]
    headline = {
        "mor_cached_mb": round(k3["mor_cached"]["total"], 3),
        "mor_uncached_mb": round(k3["mor_uncached"]["total"], 3),
        "fedavg_rm_mb": round(k3["fedavg_rm"]["total"], 3),
        "lora_mb": round(k3["lora"]["total"], 3),
    }
    print(json.dumps({
        "headline": headline,
        "headline_scale": "2b_class (Qwen2-VL-2B-shaped config, counted on the meta device)",
        "fedavg_over_mor_cached": round(headline["fedavg_rm_mb"] / headline["mor_cached_mb"], 1),
        "lora_over_mor_cached": round(headline["lora_mb"] / headline["mor_cached_mb"], 2),
        "assumptions": {"rounds": args.rounds, "queries": args.queries,
                        "unique_images": args.unique_images, "group_size": args.group_size,
                        "image_kb_2b_class": args.image_kb, "text_bytes": 200,
                        "router": "RouterConfig defaults, input_dim = encoder hidden size",
                        "lora": "r=8 on q,k,v,o projections"},
        "sizes": sizes, "mb": results,
    }))


if __name__ == "__main__":
    main()
