"""A misbehaving judge server, through the real `openai` client and alpaca_eval's own decoder against a real HTTP server
on 127.0.0.1 (`openai_server.OpenAIServer`): every answer of the wrong shape, a body that drips or never ends, a rate
limit that outlasts every retry, impossible usage, a model list that is no list, a damaged record of kept verdicts.
Each gets one line naming the judge's own server and what it sent, before any work where it can be seen then; only
real verdicts are kept, so a rerun against a healthy server asks exactly what is missing."""

import json
import re
import time

import pytest
from conftest import hang_limit, time_scale
from openai_server import OpenAIServer
from test_openai_judges import KEY, chats, generations, judged

from constrained_sft.cli import console

pytest.importorskip("alpaca_eval")


@pytest.fixture
def server(monkeypatch):
    with OpenAIServer() as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        yield running


def refused(tmp_path, capsys, judge: str, *extra) -> str:
    """The one error line of an `eval alpaca` run that must stop (exit 2, no traceback, no key)."""
    out = tmp_path / "report"
    argv = ["eval", "alpaca", "--generations", generations(tmp_path), "--judge", judge, "--output_dir", str(out)]
    assert console([*argv, *extra]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]  # alpaca_eval's progress bars aside
    assert len(errors) == 1 and "Traceback" not in err and KEY not in err, err
    return errors[0]


def kept_lines(tmp_path, judge="report") -> list[dict]:
    path = tmp_path / judge / "alpaca_eval" / "completions_kept.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    ("fault", "said"),
    [("html", "an HTML page"), ("shape", "no `choices`"), ("no-choices", "no `choices`"),
     ("string-message", "a choice whose `message` is str, not an object"), ("huge", "an answer of over 1 MiB")],
)  # fmt: skip
@pytest.mark.parametrize("judge", ["gpt5", "gpt4"])
def test_an_answer_of_the_wrong_shape_is_one_line_naming_the_server(tmp_path, server, capsys, judge, fault, said):
    server.forever = fault
    line = refused(tmp_path, capsys, judge)
    assert re.fullmatch(rf"constrained-sft: error: judge '{judge}' \(gpt-[^)]+\): 127\.0\.0\.1:\d+ .*", line), line
    assert said in line, line
    assert not kept_lines(tmp_path)  # nothing of it kept


@pytest.mark.parametrize(
    ("fault", "said"),
    [("html", "answered GET /v1/models with an HTML page where an OpenAI model list belongs"),
     ("shape", "an object without a `data` list"),
     ("404", r"answered 404 to GET /models, so it is no OpenAI API root; .*ends in /v1")],
)  # fmt: skip
def test_a_server_that_lists_no_models_is_refused_before_any_work(tmp_path, server, capsys, fault, said):
    server.models_fault = fault
    line = refused(tmp_path, capsys, "gpt5")
    assert re.search(said, line), line
    assert not chats(server) and not (tmp_path / "report").exists()


def test_a_url_without_v1_is_refused_before_any_work_naming_it(tmp_path, monkeypatch, capsys):
    """The user's own server at its root (no /v1): a 404 to the model list, said with the URL and the fix, before
    anything is asked; the error names the user's server, never api.openai.com."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIServer() as running:
        root = running.url.removesuffix("/v1")
        line = refused(tmp_path, capsys, "openai-compatible", "--judge_base_url", root, "--judge_model", "gpt-5")
    assert f"{root} answered 404 to GET /models" in line and "ends in /v1" in line and "openai.com" not in line
    assert not chats(running)


def test_the_reach_obeys_the_judge_timeout(tmp_path, server, capsys):
    """A model list that takes 30 s, `--judge_timeout 0.5`: two tries of 0.5 s and the refusal, counted from the first
    request the server saw; the reach's fixed 20 s a try took 40 s."""
    server.models_fault, server.slow_seconds = "slow", 30.0
    line = refused(tmp_path, capsys, "gpt5", "--judge_timeout", "0.5")
    first = min(r["at"] for r in server.requests)
    assert "did not answer in time" in line and len(server.requests) == 2
    assert time.monotonic() - first < 20 * time_scale()  # ~2 s: tries, the client's back-off; 10x that


@pytest.mark.parametrize("judge", ["gpt5", "gpt4"])
def test_a_body_that_drips_meets_the_deadline(tmp_path, server, capsys, judge):
    """Every answer sent one byte a second (a whole answer takes minutes): each read answers in time, so only a
    deadline for the whole request stops it; `--judge_timeout 1` does, within the client's three tries (~6 s)."""
    server.forever, server.drip_seconds = "drip", 1.0
    start = time.monotonic()
    line = refused(tmp_path, capsys, judge, "--judge_timeout", "1")
    assert "did not answer in time" in line, line
    assert time.monotonic() - start < hang_limit(6)  # was: still judging after 150 s


@pytest.mark.parametrize("judge", ["gpt5", "gpt4"])
def test_rate_limited_to_the_end_keeps_only_real_verdicts(tmp_path, server, capsys, judge):
    """5 verdicts, then 429 to everything: one line saying so (alpaca_eval's decoder would retry ten more times and
    hand back empty answers); the 5 kept, no empty one; the same command against a healthy server asks the 7 others
    and reports what an uninterrupted run reports."""
    server.faults.extend(["ok"] * 5)
    server.forever = "429"
    line = refused(tmp_path, capsys, judge)
    assert re.search(r"127\.0\.0\.1:\d+ kept answering 429 \(rate limited\) .*run the same command again", line), line
    kept = kept_lines(tmp_path)
    assert len(kept) == 5 and all(k["answer"]["completions"].strip() for k in kept)
    server.forever, asked = None, len(chats(server))
    result = judged(tmp_path, judge)
    assert len(chats(server)) - asked == 12  # a fresh folder of its own: all 12, none taken from the broken run
    out = tmp_path / "report"
    argv = ["eval", "alpaca", "--generations", generations(tmp_path), "--judge", judge, "--output_dir", str(out)]
    asked = len(chats(server))
    assert console(argv) == 0  # the stopped folder, continued: only what was never answered
    assert len(chats(server)) - asked == 7
    again = json.loads((out / "alpaca_eval.json").read_text())
    assert again["levels"][0]["win_rate"] == pytest.approx(result["levels"][0]["win_rate"])


def test_empty_answers_are_used_but_never_kept(tmp_path, server):
    """A server's empty message counts as unparsed in this run and is asked again by the next."""
    server.faults.extend(["empty"])
    first = judged(tmp_path, "gpt5")["levels"][0]
    assert first["unparsed"] == 1 and len(kept_lines(tmp_path, "report-gpt5")) == 11
    (tmp_path / "report-gpt5" / "alpaca_eval" / "annotations_cache.json").unlink()  # alpaca_eval's cache keeps all
    again = judged(tmp_path, "gpt5")["levels"][0]
    assert len(chats(server)) == 13 and again["unparsed"] == 0 and again["n_verdicts"] == 12


def test_impossible_usage_is_flagged_never_priced(tmp_path, server, capsys):
    server.faults.extend(["negative-usage"] * 2)
    cost = judged(tmp_path, "gpt5")["cost"]
    assert cost["invalid_usage"] == 2 and cost["with_usage"] == 10 and cost["price_usd"] > 0
    assert cost["prompt_tokens"] > 0 and cost["total_tokens"] > 0
    assert "impossible usage for 2" in capsys.readouterr().out


def test_a_damaged_record_of_kept_verdicts_is_asked_again_or_refused(tmp_path, server, capsys):
    """An edited line (another shape) and a line cut short are asked again, and said; a folder in the file's place is
    refused in one line."""
    judged(tmp_path, "gpt5")
    folder = tmp_path / "report-gpt5" / "alpaca_eval"
    (folder / "annotations_cache.json").unlink()
    lines = (folder / "completions_kept.jsonl").read_text().splitlines()
    lines[0] = json.dumps({"key": json.loads(lines[0])["key"], "answer": "Output (a)"})  # a hand edit
    lines[1] = lines[1][:20]  # cut by a stop
    (folder / "completions_kept.jsonl").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    again = judged(tmp_path, "gpt5")["levels"][0]
    assert len(chats(server)) == 14 and again["n_verdicts"] == 12
    assert (
        "2 line(s) hold no answer (cut by a stop, edited, or empty); their prompts are asked again"
        in capsys.readouterr().out
    )
    (folder / "annotations_cache.json").unlink()
    (folder / "completions_kept.jsonl").unlink()
    (folder / "completions_kept.jsonl").mkdir()
    out = tmp_path / "report-gpt5"
    argv = ["eval", "alpaca", "--generations", generations(tmp_path), "--judge", "gpt5", "--output_dir", str(out)]
    assert console(argv) == 2
    assert "completions_kept.jsonl is not a plain file" in capsys.readouterr().err
