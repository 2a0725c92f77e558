"""
Embedding noise, measured: the statistics of the added noise, and a small model's token accuracy at several noise
levels with the hook in evaluation (teacher forcing) and in generation (every prompt and generated token perturbed).

    python benchmarks/noise_levels.py --gammas 0 0.5 1.5

Trains the tiny 4-layer Llama on the synthetic successor task first (about 20 s on 2 CPU cores), then evaluates it
on held-out rows; generation accuracy is the share of greedily generated completion tokens that match the answer.
"""

from __future__ import annotations

import argparse
import json
import logging
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import torch  # noqa: E402

from constrained_sft import ConstrainedSFTConfig, ConstrainedSFTTrainer, embedding_noise, embedding_sigma  # noqa: E402
from constrained_sft.noise import input_embedding_module  # noqa: E402
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer  # noqa: E402


def noise_statistics(model, gammas, mean: float, seed: int = 0) -> list[dict]:
    """Empirical std and mean of the noise added to 64 x 256 token embeddings, against gamma * sigma_x and mu."""
    ids = torch.randint(4, model.config.vocab_size, (64, 256), generator=torch.Generator().manual_seed(seed))
    module = input_embedding_module(model)
    sigma = embedding_sigma(model)
    rows = []
    with torch.no_grad():
        clean = module(ids)
        for gamma in gammas:
            if gamma == 0:
                continue
            with embedding_noise(model, gamma=gamma, mean=mean, seed=seed):
                noisy = module(ids)
            noise = noisy - clean
            rows.append(
                {
                    "gamma": gamma,
                    "mean": mean,
                    "draws": noise.numel(),
                    "std": noise.std().item(),
                    "target_std": gamma * sigma,
                    "std_ratio": noise.std().item() / (gamma * sigma),
                    "empirical_mean": noise.mean().item(),
                }
            )
    return rows


@torch.no_grad()
def generation_accuracy(model, tokenizer, rows, gamma: float, seed: int) -> float:
    """Greedy generation with every token perturbed; share of completion tokens equal to the answer's."""
    tokenizer.padding_side = "left"
    prompts = [r["prompt"] for r in rows]
    answers = [tokenizer(r["completion"], add_special_tokens=False)["input_ids"] for r in rows]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    length = max(len(a) for a in answers)
    with embedding_noise(model, gamma=gamma, seed=seed):
        out = model.generate(
            **batch, max_new_tokens=length, min_new_tokens=length, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
    generated = out[:, batch["input_ids"].shape[1] :]
    hits = sum(
        sum(int(g == a) for g, a in zip(gen.tolist(), ans, strict=False))
        for gen, ans in zip(generated, answers, strict=True)
    )
    return hits / sum(len(a) for a in answers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gammas", type=float, nargs="+", default=[0.0, 0.5, 1.5])
    parser.add_argument("--mean", type=float, default=0.0)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out")
    args = parser.parse_args()

    tokenizer = tiny_tokenizer()
    model = tiny_causal_lm("llama", num_layers=4, hidden=64, seed=0)
    config = ConstrainedSFTConfig(
        output_dir="/tmp/noise-levels",
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
        max_steps=args.steps,
        per_device_train_batch_size=32,
        learning_rate=3e-3,
        disable_tqdm=True,
        logging_steps=50,
        per_device_eval_batch_size=64,
        constraints="none",
        eval_noise_gammas=args.gammas,
        seed=0,
    )
    held_out = successor_dataset(256, seed=1)
    trainer = ConstrainedSFTTrainer(
        model=model,
        args=config,
        train_dataset=successor_dataset(4096, seed=0),
        eval_dataset=held_out,
        processing_class=tokenizer,
    )
    trainer.train()
    metrics = trainer.evaluate()
    model.eval()
    rows = []
    for i, gamma in enumerate(args.gammas):
        rows.append(
            {
                "gamma": gamma,
                "eval_token_accuracy": metrics[f"eval_gamma_{gamma:g}_mean_token_accuracy"],
                "eval_loss": metrics[f"eval_gamma_{gamma:g}_loss"],
                "generation_token_accuracy": generation_accuracy(model, tokenizer, list(held_out), gamma, seed=i),
            }
        )
    stats = noise_statistics(model, [g for g in args.gammas if g > 0] + [3.0], args.mean)
    print(f"sigma_x = {embedding_sigma(model):.5f}")
    print(f"{'gamma':>6} {'draws':>9} {'std':>9} {'gamma*sigma':>12} {'ratio':>7} {'mean':>9}")
    for s in stats:
        print(
            f"{s['gamma']:>6g} {s['draws']:>9} {s['std']:>9.5f} {s['target_std']:>12.5f} {s['std_ratio']:>7.4f} {s['empirical_mean']:>9.5f}"
        )
    print(f"\n{'gamma':>6} {'eval token acc':>15} {'eval loss':>10} {'generation token acc':>21}")
    for r in rows:
        print(
            f"{r['gamma']:>6g} {r['eval_token_accuracy']:>15.4f} {r['eval_loss']:>10.4f} {r['generation_token_accuracy']:>21.4f}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"noise": stats, "accuracy": rows}, f, indent=2)


if __name__ == "__main__":
    main()
