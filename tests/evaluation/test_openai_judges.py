"""The API judges through the real `openai` client and alpaca_eval's own decoder, against a real HTTP server on
127.0.0.1 (`openai_server.OpenAIServer`): nothing here monkeypatches `openai`. Both orders of every pair, the report,
and the key in no file or log the run writes."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import hang_limit
from openai_server import OpenAIServer

from constrained_sft.cli import console
from constrained_sft.cli import main as cli
from constrained_sft.evaluation.alpaca import AnswersFolder

pytest.importorskip("alpaca_eval")
KEY = "sk-SENTINEL-7d41c0ffee9a"
# (instruction, the model's answer, the reference's): the server's rule (more words wins) makes the model win 4 of 6
PAIRS = [(f"task {i}", "a long answer with many words" if i < 4 else "short", "brief" if i < 4 else "a much longer one here")
         for i in range(6)]  # fmt: skip


def generations(root) -> str:
    for name, side in (("constrained", 1), ("erm", 2)):
        path = AnswersFolder(str(root / "gens")).answers(name, 0.0)
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


def chats(server) -> list[dict]:
    return [r for r in server.requests if r["body"] is not None]


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
    assert server.requests[0]["path"].endswith("/models")  # reached before any work
    assert len(chats(server)) == 12 and {r["key_end"] for r in server.requests} == {KEY[-4:]}
    body = chats(server)[0]["body"]
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


@pytest.mark.parametrize("judge", ["gpt5", "gpt4"])
def test_rate_limits_and_server_errors_are_retried(tmp_path, server, judge):
    """A 429 with Retry-After, another, and a 500: the client's own retries; the same verdicts, three requests more."""
    server.faults.extend(["429", "429", "500"])
    level = judged(tmp_path, judge)["levels"][0]
    assert len(chats(server)) == 15 and level["n_verdicts"] == 12 and level["unparsed"] == 0


@pytest.mark.parametrize("judge", ["gpt5", "gpt4"])
def test_a_verdict_no_parser_reads_and_an_empty_answer_count_as_unparsed(tmp_path, server, judge):
    server.faults.extend(["unparsable", "empty"])
    result = judged(tmp_path, judge)
    level, cost = result["levels"][0], result["cost"]
    assert level["unparsed"] == 2 and level["n_verdicts"] == 10 and len(chats(server)) == 12
    # alpaca_eval keeps nothing of an unparsed verdict: the cost sums the 10 it kept, and says so
    assert (cost["verdicts"], cost["requests"], cost["with_usage"]) == (12, 12, 10)


@pytest.mark.parametrize(
    ("fault", "said"),
    [("500", r"127\.0\.0\.1:\d+ answered 500 \(after the client's retries\)"),
     ("drop", r"nothing answered at http://127\.0\.0\.1:\d+/v1 \(RemoteProtocolError\)")],
)  # fmt: skip
def test_a_server_that_keeps_failing_is_one_line(tmp_path, server, capsys, fault, said):
    """A server answering 500 to everything, or closing every connection unanswered (a crash), outlasts the client's
    two retries: the run stops with one line naming the judge, the server's host and what it did; no traceback, no
    key."""
    server.faults.extend([fault] * 100)
    out = tmp_path / "report"
    argv = ["eval", "alpaca", "--generations", generations(tmp_path), "--judge", "gpt5", "--output_dir", str(out)]
    assert console(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]  # alpaca_eval's progress bars aside
    assert len(errors) == 1 and "Traceback" not in err and KEY not in err, err
    assert re.fullmatch(rf"constrained-sft: error: judge 'gpt5' \(gpt-5\): {said}.*", errors[0]), errors[0]


@pytest.mark.parametrize(
    ("case", "message"),
    [("refused", r"judge '(gpt5|gpt4)' \(gpt-[^)]+\): nothing answered at http://127\.0\.0\.1:9/v1"),
     ("wrong-key", r"judge '(gpt5|gpt4)' \(gpt-[^)]+\): 127\.0\.0\.1:\d+ refused the API key \(401\)")],
)  # fmt: skip
@pytest.mark.parametrize("judge", ["gpt5", "gpt4"])
def test_no_server_or_a_refused_key_is_said_before_any_work(tmp_path, monkeypatch, capsys, judge, case, message):
    with OpenAIServer(keys=(KEY,)) as running:
        monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1" if case == "refused" else running.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-WRONG-1234" if case == "wrong-key" else KEY)
        out = tmp_path / "report"
        argv = ["eval", "alpaca", "--generations", generations(tmp_path), "--judge", judge, "--output_dir", str(out)]
        assert console(argv) == 2
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(f"constrained-sft: error: {message}.*", err) and "sk-" not in err, err
    assert not out.exists() and not chats(running)  # nothing judged, nothing written


def test_a_judging_run_killed_half_way_asks_only_what_was_never_answered(tmp_path, server):
    """kill -9 once 5 of the 12 verdicts arrived (the rest held by the server): the same command again sends the 7
    it never got an answer to, and reports what an uninterrupted run reports."""
    server.slow_seconds = 60
    server.faults.extend(["ok"] * 5 + ["slow"] * 7)
    gens, out = generations(tmp_path), tmp_path / "report-gpt5"
    argv = ["eval", "alpaca", "--generations", gens, "--judge", "gpt5", "--output_dir", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    run = subprocess.Popen([sys.executable, "-m", "constrained_sft", *argv], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    kept = out / "alpaca_eval" / "completions_kept.jsonl"
    deadline = time.monotonic() + hang_limit(12)
    while (not kept.exists() or len(kept.read_text().splitlines()) < 5) and time.monotonic() < deadline:
        time.sleep(0.05)
    while len(chats(server)) < 12 and time.monotonic() < deadline:  # the held requests reached it, unanswered
        time.sleep(0.05)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=hang_limit(3))
    assert len(kept.read_text().splitlines()) == 5 and len(chats(server)) == 12
    server.faults.clear()
    result = judged(tmp_path, "gpt5")
    assert len(chats(server)) == 12 + 7  # the 5 answered ones were not asked again
    level = result["levels"][0]
    assert level["n_verdicts"] == 12 and level["win_rate"] == pytest.approx(100 * 4 / 6)
    assert (result["cost"]["verdicts"], result["cost"]["requests"]) == (12, 7)  # the report says so


def test_a_self_hosted_judge_by_url_needs_no_key(tmp_path, monkeypatch, capsys):
    """`--judge openai-compatible --judge_base_url URL --judge_model NAME`, no OPENAI_API_KEY: the server is reached
    before any work (one line naming it), asked greedily with a short budget, and named in the report."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with OpenAIServer() as running:
        argv = ["--judge_base_url", running.url, "--judge_model", "gpt-5"]  # a model the fixture lists
        result = judged(tmp_path, "openai-compatible", *argv)
    assert re.search(r"judge: 127\.0\.0\.1:\d+ answered, serving gpt-5", capsys.readouterr().out)
    assert running.requests[0]["path"].endswith("/models") and len(chats(running)) == 12
    body = chats(running)[0]["body"]
    assert body["model"] == "gpt-5" and body["max_tokens"] == 16 and body["temperature"] == 0.0
    level = result["levels"][0]
    assert level["n_verdicts"] == 12 and level["win_rate"] == pytest.approx(100 * 4 / 6)
    assert re.fullmatch(r"openai-compatible at 127\.0\.0\.1:\d+ \(gpt-5\)", result["judge_config"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [((), "needs `--judge_base_url`"),
     (("--judge_base_url", "localhost:8000/v1", "--judge_model", "m"), "give the server's http\\(s\\) URL"),
     (("--judge_base_url", "http://127.0.0.1:9/v1", "--judge_model", "m"), "nothing answered at http://127.0.0.1:9/v1"),
     (("--judge_model", "not-served"),
      "model 'not-served', which 127.0.0.1:\\d+ does not serve \\(it serves gpt-5, gpt-4-1106-preview\\); give `--judge_model`")],
)  # fmt: skip
def test_a_self_hosted_judge_is_checked_before_any_work(tmp_path, monkeypatch, capsys, extra, message):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIServer() as running:
        if extra[:1] == ("--judge_model",):
            extra = ("--judge_base_url", running.url, *extra)
        out = tmp_path / "report"
        argv = ["eval", "alpaca", "--generations", generations(tmp_path), "--judge", "openai-compatible"]
        assert console([*argv, "--output_dir", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(message, err) and err.count("\n") == 0, err
    assert not out.exists() and not chats(running)


def served(server, name: str) -> int:
    return sum(u[name] for u in server.usage)


def test_the_report_states_what_the_judge_cost(tmp_path, server, capsys):
    """gpt5: every request's usage as the server reported it, priced at gpt-5's list price, per comparison and for a
    full AlpacaEval level; in alpaca_eval.json, the printed lines and report.html."""
    cost = judged(tmp_path, "gpt5")["cost"]
    prompt, completion = served(server, "prompt_tokens"), served(server, "completion_tokens")
    assert cost["verdicts"] == cost["requests"] == cost["with_usage"] == 12 and len(server.usage) == 12
    assert (cost["prompt_tokens"], cost["completion_tokens"], cost["total_tokens"]) == (prompt, completion,
                                                                                       prompt + completion)  # fmt: skip
    assert cost["price_usd"] == pytest.approx((1.25 * prompt + 10.0 * completion) / 1e6)
    assert cost["price_basis"].startswith("at gpt-5's list price ($1.25 / $10 per million")
    per_comparison = 2 * cost["price_usd"] / 12
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Judge cost"))
    assert f"12 verdicts (12 requested by this run), {prompt + completion:,} tokens" in line
    assert (
        f"${per_comparison:.4f}; a full AlpacaEval level (805 pairs) at this rate: ${805 * per_comparison:.2f}" in line
    )
    assert "Judge cost: 12 verdicts" in (tmp_path / "report-gpt5" / "report.html").read_text()


def test_alpaca_evals_own_decoder_is_priced_as_it_prices_it(tmp_path, server):
    """gpt4 (alpaca_eval's decoder) says a request's total tokens only: the report gives them and alpaca_eval's
    price ($10 per million tokens for gpt-4-1106-preview), saying whose price it is."""
    cost = judged(tmp_path, "gpt4")["cost"]
    total = served(server, "total_tokens")
    assert cost["requests"] == 12 and cost["total_tokens"] == total and cost["prompt_tokens"] is None
    assert cost["price_usd"] == pytest.approx(total * 10 / 1e6) and "alpaca_eval" in cost["price_basis"]


def test_a_self_hosted_judge_is_counted_in_tokens_not_dollars(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIServer() as running:
        argv = ["--judge_base_url", running.url, "--judge_model", "gpt-5"]  # named as OpenAI's, served by us
        cost = judged(tmp_path, "openai-compatible", *argv)["cost"]
    assert cost["requests"] == 12 and cost["total_tokens"] == served(running, "total_tokens")
    assert cost["price_usd"] is None and cost["price_basis"] is None


def test_a_server_that_reports_no_usage_is_said_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIServer(report_usage=False) as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.url)
        cost = judged(tmp_path, "gpt5")["cost"]
    assert cost["requests"] == 12 and cost["total_tokens"] is None and cost["price_usd"] is None
    assert "12 verdicts (12 requested by this run); token usage unknown" in capsys.readouterr().out


def test_a_dry_run_judges_the_first_pairs_and_prices_the_full_run(tmp_path, server):
    result = judged(tmp_path, "gpt5", "--judge_max_instances", "2")
    assert len(chats(server)) == 4 and result["cost"]["requests"] == 4
    assert result["levels"][0]["n_verdicts"] == 4 and "LC needs all 805" in result["lc_missing_reason"]


@pytest.mark.parametrize("judge", ["gpt5", "gpt4"])
def test_a_rerun_reports_what_every_verdict_cost_and_asks_nothing(tmp_path, server, judge):
    """Run again on the same folder (a resumed study), answered from alpaca_eval's cache, then from the verdicts kept
    as they arrived (the cache lost, as by a stop before it was written): no request, the same cost of the whole."""
    first = judged(tmp_path, judge)["cost"]
    again = judged(tmp_path, judge)["cost"]
    (tmp_path / f"report-{judge}" / "alpaca_eval" / "annotations_cache.json").unlink()
    kept = judged(tmp_path, judge)["cost"]
    assert len(chats(server)) == 12 and first["requests"] == 12 and again["requests"] == kept["requests"] == 0
    assert {k: v for k, v in again.items() if k != "requests"} == {k: v for k, v in first.items() if k != "requests"}
    assert kept == again and first["total_tokens"] == served(server, "total_tokens")


@pytest.mark.parametrize("judge", ["gpt5", "gpt4"])
def test_a_server_that_does_not_answer_in_time_is_one_line(tmp_path, server, capsys, judge):
    """`--judge_timeout 0.5` against a server that takes 3 s: the client's retries, then one line; no traceback."""
    server.faults.extend(["slow"] * 100)
    out = tmp_path / "report"
    argv = ["eval", "alpaca", "--generations", generations(tmp_path), "--judge", judge, "--output_dir", str(out)]
    assert console([*argv, "--judge_timeout", "0.5"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert re.fullmatch(
        r"constrained-sft: error: judge '.*' \(.*\): 127\.0\.0\.1:\d+ did not answer in time .*", errors[0]
    )
    # the first 8 requests (the workers) tried three times each; the first to fail stops the rest being sent
    assert len(chats(server)) == 3 * 8
