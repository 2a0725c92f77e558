"""The API judges through the real `openai` client and alpaca_eval's own decoder, against a real HTTP server on
127.0.0.1 (`openai_server.OpenAIServer`): nothing here monkeypatches `openai`. Both orders of every pair, the report,
and the key in no file or log the run writes."""

import json

import pytest
from openai_server import OpenAIServer

from constrained_sft.cli import main as cli
from constrained_sft.evaluation.alpaca.generate import output_path

pytest.importorskip("alpaca_eval")
KEY = "sk-SENTINEL-7d41c0ffee9a"
# (instruction, the model's answer, the reference's): the server's rule (more words wins) makes the model win 4 of 6
PAIRS = [(f"task {i}", "a long answer with many words" if i < 4 else "short", "brief" if i < 4 else "a much longer one here")
         for i in range(6)]  # fmt: skip


def generations(root) -> str:
    for name, side in (("constrained", 1), ("erm", 2)):
        path = output_path(str(root / "gens"), name, 0.0)
        rows = [{"instruction": p[0], "output": p[side], "generator": name, "dataset": "toy"} for p in PAIRS]
        (root / "gens" / name).mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            json.dump(rows, f)
    return str(root / "gens")


@pytest.fixture
def server(monkeypatch):
    with OpenAIServer() as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        yield running


def judged(tmp_path, judge: str, *extra) -> dict:
    out = tmp_path / f"report-{judge}"
    argv = ["eval", "alpaca", "--generations", generations(tmp_path), "--judge", judge, "--output_dir", str(out)]
    assert cli([*argv, *extra]) == 0
    return json.loads((out / "alpaca_eval.json").read_text())


def no_key_anywhere(tmp_path, capsys, caplog) -> None:
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not [str(p) for p in written if KEY.encode() in p.read_bytes()]
    out = capsys.readouterr()
    assert KEY not in out.out + out.err + caplog.text


@pytest.mark.parametrize("judge", ["gpt5", "gpt4"])
def test_an_api_judge_end_to_end_over_http(tmp_path, server, judge, capsys, caplog):
    """Every pair asked in both orders, one request each; the model wins 4 of 6 in both orders."""
    result = judged(tmp_path, judge)
    assert len(server.requests) == 12 and {r["key_end"] for r in server.requests} == {KEY[-4:]}
    body = server.requests[0]["body"]
    if judge == "gpt5":  # what reasoning models accept, and nothing else
        assert body["model"] == "gpt-5" and body["max_completion_tokens"] > 0 and "reasoning_effort" in body
        assert not {"max_tokens", "temperature", "top_p", "logprobs"} & set(body)
    else:  # alpaca_eval's weighted annotator reads the first token's log-probabilities
        assert body["logprobs"] is True and body["top_logprobs"] == 5 and body["max_tokens"] == 1
    level = result["levels"][0]
    assert level["n_verdicts"] == 12 and level["unparsed"] == 0 and level["order_agreement"] == 1.0
    # gpt5 answers a label (4 of 6 won in both orders); gpt4's verdict is the weight the log-probs give (0.9 / 0.1)
    assert level["win_rate"] == pytest.approx(100 * 4 / 6 if judge == "gpt5" else 100 * (4 * 0.9 + 2 * 0.1) / 6)
    assert result["judge_model"] == {"gpt5": "gpt-5", "gpt4": "gpt-4-1106-preview"}[judge]
    no_key_anywhere(tmp_path, capsys, caplog)
